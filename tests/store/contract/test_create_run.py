"""create_run / create_claimed_run / get_run: a run is stored once, readable by id or a unique prefix."""

import pytest

from dayflow_tui.config.errors import RunNotFound


def test_a_new_run_is_queued_with_its_limits_and_no_owner(store):
    run = store.create_run("plan my week", model="offline", run_id="contract0001", max_steps=7,
                           budget_tokens=5000, approval_tools=["send_mail", "send_mail"])
    assert (run.id, run.status, run.user_msg, run.max_steps, run.budget_tokens) == \
        ("contract0001", "queued", "plan my week", 7, 5000)
    assert run.lease_token is None and run.owner_pid is None and run.step_count == 0
    assert run.approval_tools == '["send_mail"]'  # a set of names, once each
    assert store.get_run("contract0001").id == "contract0001"


def test_a_claimed_run_is_running_under_this_process_lease(store):
    run, lease = store.create_claimed_run("t", model="offline", run_id="contract0002")
    assert run.status == "running" and run.lease_token == lease.token and lease.run_id == run.id
    assert run.attempts == 1


def test_a_run_id_is_unique(store):
    store.create_run("t", model="offline", run_id="contract0003")
    with pytest.raises(Exception):
        store.create_run("again", model="offline", run_id="contract0003")
    assert store.get_run("contract0003").user_msg == "t"


def test_get_run_takes_a_unique_prefix_of_four_or_more_and_refuses_the_rest(store):
    store.create_run("a", model="offline", run_id="prefixaaaa01")
    store.create_run("b", model="offline", run_id="prefixbbbb01")
    assert store.get_run("prefixa").id == "prefixaaaa01"
    with pytest.raises(RunNotFound, match="more than one"):
        store.get_run("prefix")
    with pytest.raises(RunNotFound):
        store.get_run("pre")  # too short to be a prefix
    with pytest.raises(RunNotFound):
        store.get_run("nosuchrun000")

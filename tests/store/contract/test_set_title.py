"""set_title: a run's title, kept as one line; giving it the title it has changes nothing (a call run again)."""

import pytest

from dayflow_tui.config.errors import RunNotFound

from .helpers import held_run


def test_a_title_is_kept_as_one_trimmed_line(store):
    run, _lease = held_run(store, "title0000001")
    assert store.get_run(run.id).title is None
    assert store.set_title(run.id, "  Morning\n brief\t for [bold]Ann[/]  ") is True
    assert store.get_run(run.id).title == "Morning brief for [bold]Ann[/]"  # kept as text; shown as text
    assert store.set_title(run.id, "x" * 500) is True
    assert store.get_run(run.id).title == "x" * 200


def test_the_same_title_again_changes_nothing_not_even_updated_at(store):
    run, _lease = held_run(store, "title0000002")
    assert store.set_title(run.id, "Inbox triage") is True
    before = store.get_run(run.id)
    marker = store.change_marker()
    assert store.set_title(run.id, "Inbox  triage ") is False  # the same title once cleaned
    after = store.get_run(run.id)
    assert after.title == "Inbox triage" and after.updated_at == before.updated_at
    assert store.change_marker() == marker


def test_a_new_run_takes_its_agents_title_and_an_unknown_run_is_refused(store):
    run = store.create_run("Read my mail", model="offline", run_id="title0000003",
                           agent={"agent": "mailer", "title": " Mail:\nRead my mail "})
    assert run.title == "Mail: Read my mail"
    with pytest.raises(RunNotFound):
        store.set_title("nosuchrun000", "t")

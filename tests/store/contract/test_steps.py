"""The step readers: steps (a tail with from_n, a page with limit), replay_steps, step_at, step_count."""

from .helpers import held_run, reply


def test_steps_are_read_in_order_whole_or_from_a_step(store):
    run, lease = held_run(store, "readsteps001")
    for n in (1, 2, 3):
        store.append_step(run.id, reply(n, f"reply {n}"), lease=lease)
    assert [s.n for s in store.steps(run.id)] == [1, 2, 3]
    assert [s.n for s in store.steps(run.id, from_n=2)] == [2, 3]
    assert [s.n for s in store.steps(run.id, from_n=2, limit=1)] == [2]
    assert [s.n for s in store.steps(run.id, limit=2)] == [1, 2]
    assert store.steps(run.id, from_n=4, limit=5) == []
    assert [s.assistant for s in store.replay_steps(run.id)] == [s.assistant for s in store.steps(run.id)]
    assert store.step_at(run.id, 2).assistant == '[{"type":"text","text":"reply 2"}]'
    assert store.step_at(run.id, 9) is None and store.step_count(run.id) == 3

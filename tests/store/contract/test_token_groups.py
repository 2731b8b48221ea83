"""The spend readers: token_groups (per run, model and day), step_tokens, run_agents."""

from .helpers import held_run, reply


def test_tokens_are_summed_per_run_model_and_day(store):
    run, lease = held_run(store, "spend0000001")
    store.append_step(run.id, reply(1, input_tokens=100, output_tokens=10), lease=lease)
    store.append_step(run.id, reply(2, input_tokens=300, output_tokens=30), lease=lease)
    [group] = store.token_groups([run.id])
    assert (group.model, group.input_tokens, group.output_tokens, group.calls, group.largest_input) == \
        ("offline", 400, 40, 2, 300)
    assert store.token_groups([]) == []
    assert [(s.n, s.input_tokens) for s in store.step_tokens(run.id)] == [(1, 100), (2, 300)]
    assert store.run_agents([run.id]) == {run.id: "brief"}

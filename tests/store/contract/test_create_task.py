"""create_task and the task readers: a side effect made once per idempotency key."""

from .helpers import held_run


def test_a_task_is_made_once_per_key(store):
    run, _lease = held_run(store, "tasks0000001")
    task, created = store.create_task(idempotency_key="k-1", title="Call the bank", due="2030-01-02", run_id=run.id)
    again, created_again = store.create_task(idempotency_key="k-1", title="Something else")
    assert created is True and created_again is False and again.id == task.id and again.title == "Call the bank"
    assert [t.id for t in store.list_tasks(run_id=run.id)] == [task.id]


def test_find_tasks_narrows_and_pages_by_key(store):
    made = [store.create_task(idempotency_key=f"page-{i}", title=f"contract page {i}")[0] for i in range(5)]
    page, total = store.find_tasks(text="contract page", limit=2)
    assert total == 5 and [t.id for t in page] == [made[4].id, made[3].id]
    older, _ = store.find_tasks(text="contract page", limit=2, before_id=page[-1].id)
    assert [t.id for t in older] == [made[2].id, made[1].id]


def test_a_task_names_the_step_whose_call_made_it(store):
    from .helpers import call, reply

    run, lease = held_run(store, "tasks0000002")
    store.append_step(run.id, reply(1), lease=lease)
    store.append_step(run.id, reply(2, tool=call("tu_1", key="origin-key-1")), lease=lease)
    task, _ = store.create_task(idempotency_key="origin-key-1", title="t", run_id=run.id)
    assert store.task_origins([task]) == {task.id: 2}

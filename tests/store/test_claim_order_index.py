"""A worker's claim of the queue's head reads the claim order's index (priority, then age), on both backends.

The plan is read from the database itself (EXPLAIN), with enough queued runs of mixed priorities that a
sort would show: no sort step, and the index ``runs_claim_order`` named.
"""

from dayflow_tui.store import Run, RunStatus
from dayflow_tui.store.tables.claims import CLAIM_ORDER


def test_the_claim_of_a_queued_run_reads_the_claim_order_index(store):
    with store.bound(), store.write_transaction():
        Run.insert_many([dict(id=f"plan{n:08d}", user_msg="t", status="queued" if n % 3 else "done",
                              model="offline", priority=n % 4, created_at=f"2026-01-01T00:{n // 60:02d}:"
                              f"{n % 60:02d}.000Z", updated_at="2026-01-01T00:00:00.000Z") for n in range(600)]
                        ).execute()
    with store.bound():
        query = (Run.select().where(Run.status == RunStatus.QUEUED, Run.not_before.is_null() | (Run.not_before <= "2030"))
                 .order_by(*CLAIM_ORDER).limit(1))
        sql, params = query.sql()
        postgres = "postgres" in store.dialect.__class__.__name__.lower()
        if postgres:
            store.db.execute_sql("ANALYZE runs")
            store.db.execute_sql("SET enable_seqscan = off")  # the plan the index allows, at any table size
            plan = " ".join(row[0] for row in store.db.execute_sql("EXPLAIN " + sql, params).fetchall())
        else:
            plan = " ".join(row[3] for row in store.db.execute_sql("EXPLAIN QUERY PLAN " + sql, params).fetchall())
        assert "runs_claim_order" in plan, plan
        assert "Sort" not in plan and "TEMP B-TREE" not in plan, plan
        assert query.first().id == "plan00000007"  # queued (n % 3), priority 3 (n % 4), the oldest of them

"""Store contract, both backends: ``schema_version`` reads the database's version as it is now, and a claim on a
database migrated past this code's schema takes nothing (``SchemaAhead``): a rolling upgrade's old worker."""

from __future__ import annotations

import pytest

from dayflow_tui.config.errors import SchemaAhead
from dayflow_tui.store import SCHEMA_VERSION


def test_schema_version_moves_when_another_version_migrates_and_claims_stop(store):
    run = store.create_run("hello", model="offline", status="queued")
    assert store.schema_version() == SCHEMA_VERSION
    with store.write_transaction():  # what a newer Dayflow's migration leaves behind
        store.dialect.set_schema_version(store.db, SCHEMA_VERSION + 1)
    assert store.schema_version() == SCHEMA_VERSION + 1
    with pytest.raises(SchemaAhead) as raised:
        store.claim_next()
    assert (raised.value.found, raised.value.known) == (SCHEMA_VERSION + 1, SCHEMA_VERSION)
    assert store.get_run(run.id).status == "queued" and store.get_run(run.id).lease_token is None
    with store.write_transaction():
        store.dialect.set_schema_version(store.db, SCHEMA_VERSION)
    lease = store.claim_next()
    assert lease is not None and lease.run_id == run.id

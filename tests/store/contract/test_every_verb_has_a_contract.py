"""Every verb of ``Store`` is called by some file of this contract, so a new verb comes with its contract."""

import inspect
from pathlib import Path

from dayflow_tui.store import Store

# The connection's own plumbing, tested wherever the store is used; not verbs on the data.
PLUMBING = {"close", "close_thread_connection", "bound", "write_transaction", "verify_same_database",
            "commit_window"}


def test_each_verb_is_called_in_the_contract():
    verbs = {name for name, _ in inspect.getmembers(Store, inspect.isfunction) if not name.startswith("_")}
    text = "".join(p.read_text() for p in Path(__file__).parent.glob("test_*.py"))
    missing = sorted(v for v in verbs - PLUMBING if f"store.{v}(" not in text)
    assert not missing, f"Store verbs with no contract test: {missing}"

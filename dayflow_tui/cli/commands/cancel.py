"""``dayflow cancel``: end a run for good, once; a run another process drives is asked, and stops there."""

from __future__ import annotations

import argparse
import sys

from ...config.errors import UsageError
from ...safe_text import printable
from ..opening import open_db

REASON_MOST = 1000  # characters: a reason is a line for people, shown in lists


def canceller(name: str | None) -> str:
    """Who cancels, as the run records it: ``user@host`` (the user setting or login name, or ``--as``)."""
    from ...agent.approvals import decider

    user, host = decider()
    if name is not None:
        user = name.strip()
        if not user or len(user) > 200:
            raise UsageError("--as needs a name (at most 200 characters)")
    return f"{user}@{host}"


def cmd_cancel(args: argparse.Namespace) -> int:
    reason = None
    if args.reason is not None:
        reason = " ".join(args.reason.split())  # one line, as lists show it
        if not reason:
            raise UsageError("--reason is empty: say why, or leave it out")
        if len(reason) > REASON_MOST:
            raise UsageError(f"--reason is longer than {REASON_MOST:,} characters")
    by = canceller(args.canceller)  # checked before anything is opened
    store = open_db(args, create=False)
    outcome = store.cancel_run(args.run_id, by=by, reason=reason)
    if outcome.asked:
        print(printable(f"cancel asked: run {outcome.run_id} is driven by {outcome.holder}; its call in flight "
                        "is kept, then it starts no call and runs no tool, and the run ends cancelled at its "
                        "next commit or heartbeat (see: dayflow show " + outcome.run_id + ")"))
    else:
        print(printable(f"cancelled run {outcome.run_id} (it was {outcome.was})"))
    sys.stdout.flush()
    return 0

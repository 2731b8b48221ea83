"""Money in one place: where prices come from (``rates``), what calls and runs cost (``cost``), and what the
next call will likely cost before it is made (``estimate``, with ``tokens``).

Below the agent, above the store and the settings: money never imports ``agent``, ``cli`` or ``tui``.
This file imports nothing, so ``import dayflow_tui.money.cost`` pays for nothing else.
"""

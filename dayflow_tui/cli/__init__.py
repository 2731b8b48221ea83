"""``dayflow``: the command-line front end over the views, the agent and the store.

``main`` (the console script) is in ``cli.main``; the command line in
``cli.parser``; the commands in ``cli.commands``, one module per kind; what
they print is read through ``views``, as the dashboard reads it.
"""

from .main import main

__all__ = ["main"]

"""The commands of ``dayflow``, one module per kind; ``cli.main`` imports the one that runs."""

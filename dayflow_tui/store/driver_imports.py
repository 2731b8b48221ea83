"""Peewee without the database drivers a store does not use: psycopg is imported only for PostgreSQL.

Peewee imports every driver it can find when it is imported (psycopg2,
psycopg 3, pymysql/MySQLdb), so with the PostgreSQL extra installed every
SQLite command paid for psycopg (about half of ``dayflow runs``' time here).
Importing this module first imports Peewee with those drivers hidden; the
PostgreSQL dialect calls its ``load_psycopg`` when a URL is
opened, which imports psycopg 3 and hands it to Peewee exactly as Peewee's
own import would have. This module names the drivers but imports none.

It must be imported before anything else imports Peewee: ``dayflow_tui.store``
imports it first. A process that imported Peewee earlier keeps Peewee as it
is (with whatever drivers it found), and ``load_psycopg`` still works there.
"""

from __future__ import annotations

import sys

# What Peewee tries at import time, other than SQLite (see the top of peewee.py).
_DRIVERS = ("psycopg2cffi", "psycopg2", "psycopg", "pymysql", "MySQLdb")


def _import_peewee_without_drivers():
    if "peewee" in sys.modules:
        return sys.modules["peewee"]
    # A None entry makes ``import NAME`` raise ImportError, the way Peewee sees a driver that is absent.
    hidden = [name for name in _DRIVERS if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        import peewee
    finally:
        for name in hidden:
            if sys.modules.get(name, "") is None:
                del sys.modules[name]
    return peewee


peewee = _import_peewee_without_drivers()

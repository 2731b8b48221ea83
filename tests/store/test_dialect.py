"""Only ``store.dialect`` asks which database a store is on; everything else asks the dialect to do it.

import-linter (pyproject) keeps the PostgreSQL driver's modules inside ``store.dialect``; Peewee's
database classes are names inside ``peewee``, which it cannot tell apart, so this reads the source.
"""

from __future__ import annotations

import re
from pathlib import Path

import dayflow_tui

PACKAGE = Path(dayflow_tui.__file__).parent
DIALECT = PACKAGE / "store" / "dialect"
# A branch on the database: the old property, a dialect's name as a string, a test of a dialect's class,
# Peewee's database classes. (A URL scheme in a pattern, "postgresql://", names no dialect.)
ASKS_WHICH = re.compile(r"is_postgres|[\"'](postgres|sqlite)[\"']|PostgresqlDatabase|SqliteDatabase|"
                        r"isinstance\([^)]*(Dialect|Backend)\b")


def test_no_module_outside_the_dialect_asks_which_database_it_is_on():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if DIALECT in path.parents:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if ASKS_WHICH.search(line):
                found.append(f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}")
    assert found == []


def test_the_pattern_finds_the_branches_it_names():
    """The check above is only as good as its pattern: each way a branch was written before matches."""
    for line in ('if store.is_postgres:', 'if store.backend.kind == "postgres":', 'SqliteDatabase(path)',
                 'class X(PostgresqlDatabase):', 'if isinstance(backend, SqliteBackend):',
                 "if store.dialect.name != 'sqlite':", 'NAMES = {"sqlite": "SQLite", "postgres": "PostgreSQL"}'):
        assert ASKS_WHICH.search(line), line
    for line in ('_URL = re.compile(r"\\b(?:postgres(?:ql)?|sqlite)://\\S+")', 'help="postgresql://USER@HOST/DB"'):
        assert not ASKS_WHICH.search(line), line

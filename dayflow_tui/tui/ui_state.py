"""What the dashboard remembers between sessions: the theme, the last status filter, the run list's sort
and the columns chosen.

A small JSON file in the settings' state directory (``dashboard.json``), not
the config file: that one is the user's to edit, this one is written by the
dashboard whenever the theme or filter changes. Written atomically (a temp
file renamed over it). A damaged or unreadable file is ignored with a
warning and left as it is until the next successful save.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ..config import settings

FILE_NAME = "dashboard.json"


@dataclass(frozen=True)
class UiState:
    theme: str | None = None
    status_filter: str | None = None
    sort: str | None = None  # views.run_list.SORTS; None: started (the newest first)
    ascending: bool = False
    hidden_columns: tuple[str, ...] | None = None  # None: the default (widgets.run_table.HIDDEN_BY_DEFAULT)


def state_path() -> Path:
    return settings.current().state_home / FILE_NAME


def load(path: Path | None = None) -> tuple[UiState, str | None]:
    """The remembered state, and a warning when the file was there but could not be used."""
    path = path or state_path()
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return UiState(), None
    except OSError as exc:
        return UiState(), f"{path}: cannot be read ({exc.strerror or exc}); using the defaults"
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        theme, status = data.get("theme"), data.get("status_filter")
        if not (theme is None or isinstance(theme, str)) or not (status is None or isinstance(status, str)):
            raise ValueError("theme and status_filter must be strings")
        sort, ascending, hidden = data.get("sort"), data.get("ascending", False), data.get("hidden_columns")
        if not (sort is None or isinstance(sort, str)) or not isinstance(ascending, bool):
            raise ValueError("sort must be a string and ascending true or false")
        if hidden is not None and not (isinstance(hidden, list) and all(isinstance(h, str) for h in hidden)):
            raise ValueError("hidden_columns must be a list of column names")
    except ValueError as exc:
        return UiState(), f"{path}: damaged ({exc}); using the defaults"
    return UiState(theme, status, sort, ascending, tuple(hidden) if hidden is not None else None), None


def save(state: UiState, path: Path | None = None) -> None:
    """Write ``state`` atomically (raises OSError; the dashboard reports it once)."""
    path = path or state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=".dashboard.", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            values = asdict(state)
            if values["hidden_columns"] is not None:
                values["hidden_columns"] = list(values["hidden_columns"])
            json.dump(values, fh, indent=2)
            fh.write("\n")
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


def changed(state: UiState, **values) -> UiState:
    return replace(state, **values)

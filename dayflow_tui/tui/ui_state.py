"""What the dashboard remembers between sessions: the theme chosen and the last status filter.

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
    except ValueError as exc:
        return UiState(), f"{path}: damaged ({exc}); using the defaults"
    return UiState(theme, status), None


def save(state: UiState, path: Path | None = None) -> None:
    """Write ``state`` atomically (raises OSError; the dashboard reports it once)."""
    path = path or state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=".dashboard.", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(asdict(state), fh, indent=2)
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

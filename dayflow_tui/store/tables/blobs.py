"""Large base64 payloads in tool results (images, documents), kept once by their SHA-256.

A tool's result is committed twice, in the call's journal row and then in the step's results, and a fork
copies both; an image of a few megabytes would be stored each time. Before a result is written, every
``"data": "<base64>"`` of at least ``MIN_CHARS`` characters (the ``source.data`` of an image or document
block: inside a text block or a JSON payload the quotes are escaped, so nothing else matches) becomes
``"data": "dayflow-blob:sha256:HEX"`` and the data goes in ``blobs`` (once per hash) in the same
transaction. ``resolve`` puts the data back where a history is read to be sent. A blob is never changed
or deleted by a write: its hash names its bytes.
"""

from __future__ import annotations

import hashlib
import re

from ...config.errors import HistoryError
from ..handle import StoreHandle
from ..models import Blob

MARKER = "dayflow-blob:sha256:"
MIN_CHARS = 8192
_DATA = re.compile(r'("data":\s*")([A-Za-z0-9+/]{%d,}={0,2})(")' % MIN_CHARS)
_REFERENCE = re.compile(re.escape(MARKER) + r"([0-9a-f]{64})")


def externalise(store: StoreHandle, encoded: str) -> str:
    """``encoded`` (a result's JSON text) with its large base64 data kept in ``blobs``; call inside the write
    transaction that stores the text, so the text never names a blob that is not there."""
    if len(encoded) < MIN_CHARS:
        return encoded
    found: dict[str, str] = {}

    def keep(match: re.Match) -> str:
        data = match.group(2)
        digest = hashlib.sha256(data.encode("ascii")).hexdigest()
        found[digest] = data
        return f"{match.group(1)}{MARKER}{digest}{match.group(3)}"

    text = _DATA.sub(keep, encoded)
    for digest, data in found.items():
        Blob.insert(sha256=digest, data=data, size=len(data)).on_conflict_ignore().execute()
    return text


def resolve(store: StoreHandle, encoded: str | None) -> str | None:
    """``encoded`` with each blob reference replaced by its data (one query for all of them)."""
    if encoded is None or MARKER not in encoded:
        return encoded
    wanted = set(_REFERENCE.findall(encoded))
    rows = dict(Blob.select(Blob.sha256, Blob.data).where(Blob.sha256.in_(sorted(wanted))).tuples())
    missing = wanted - rows.keys()
    if missing:
        raise HistoryError(f"a tool result names a stored image or document that is not in the database "
                           f"(blob {sorted(missing)[0][:12]}…): the history cannot be sent")
    return _REFERENCE.sub(lambda match: rows[match.group(1)], encoded)

"""What a tool may return besides JSON: images, documents (PDF, plain text) and lists of content blocks.

A tool that returns ``Image``, ``Document`` or a list mixing them with text (``str``) and the API's own
block dicts answers with a ``tool_result`` whose content is the API's blocks
(https://platform.claude.com/docs/en/agents-and-tools/tool-use/implement-tool-use, "tool_result content":
``text``, ``image``, ``document`` and ``search_result`` blocks; images and PDFs as base64 ``source``).
Checked before anything is kept: a media type the API does not take, or an image over its 5 MB, is the
tool's error (an ``is_error`` result that says why), never a request the API would refuse. Large data is
stored once, by its hash (``store/tables/blobs.py``).
"""

from __future__ import annotations

import base64
import json
import mimetypes
from dataclasses import dataclass
from pathlib import Path
from typing import Any

IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
DOCUMENT_TYPES = ("application/pdf", "text/plain")
MAX_IMAGE_BYTES = 5 * 1024 * 1024  # the API's limit per image
MAX_DOCUMENT_BYTES = 32 * 1024 * 1024  # the API's limit per request
BLOCK_TYPES = ("text", "image", "document", "search_result")


class ToolContentError(ValueError):
    """A tool's return value cannot be sent as the API's content blocks; the message says why."""


@dataclass(frozen=True)
class Image:
    """An image a tool returns: its bytes and media type (``image/png``, ``image/jpeg``, ``image/gif``,
    ``image/webp``)."""

    data: bytes
    media_type: str

    @classmethod
    def from_path(cls, path: str | Path) -> "Image":
        path = Path(path)
        return cls(path.read_bytes(), mimetypes.guess_type(path.name)[0] or "application/octet-stream")


@dataclass(frozen=True)
class Document:
    """A document a tool returns: a PDF's bytes (``application/pdf``) or UTF-8 text (``text/plain``)."""

    data: bytes
    media_type: str = "application/pdf"
    title: str | None = None

    @classmethod
    def from_path(cls, path: str | Path, title: str | None = None) -> "Document":
        path = Path(path)
        kind = "text/plain" if path.suffix.lower() in (".txt", ".md") else "application/pdf"
        return cls(path.read_bytes(), kind, title)


def is_rich(payload: Any) -> bool:
    """Whether ``payload`` is content blocks rather than a JSON value (a list holding an ``Image`` or
    ``Document`` counts; a plain list of dicts stays JSON, as it always was)."""
    if isinstance(payload, (Image, Document)):
        return True
    return isinstance(payload, list) and any(isinstance(part, (Image, Document)) for part in payload)


def content_blocks(payload: Any) -> list[dict]:
    """``payload`` as the API's tool_result content blocks (``ToolContentError`` names what cannot be)."""
    parts = payload if isinstance(payload, list) else [payload]
    blocks = []
    for part in parts:
        if isinstance(part, Image):
            blocks.append(_image(part))
        elif isinstance(part, Document):
            blocks.append(_document(part))
        elif isinstance(part, str):
            blocks.append({"type": "text", "text": part})
        elif isinstance(part, dict) and part.get("type") in BLOCK_TYPES:
            blocks.append(part)
        else:
            blocks.append({"type": "text", "text": json.dumps(part, ensure_ascii=False, default=str)})
    return blocks


def _image(image: Image) -> dict:
    if image.media_type not in IMAGE_TYPES:
        raise ToolContentError(f"an image of type {image.media_type[:60]!r} cannot be sent; the API takes "
                               f"{', '.join(IMAGE_TYPES)}")
    if not isinstance(image.data, (bytes, bytearray)) or not image.data:
        raise ToolContentError("an image with no bytes cannot be sent")
    if len(image.data) > MAX_IMAGE_BYTES:
        raise ToolContentError(f"an image of {len(image.data):,} bytes is over the API's 5 MB per image")
    return {"type": "image", "source": {"type": "base64", "media_type": image.media_type,
                                        "data": base64.b64encode(bytes(image.data)).decode("ascii")}}


def _document(document: Document) -> dict:
    if document.media_type not in DOCUMENT_TYPES:
        raise ToolContentError(f"a document of type {document.media_type[:60]!r} cannot be sent; the API takes "
                               f"{', '.join(DOCUMENT_TYPES)}")
    if len(document.data) > MAX_DOCUMENT_BYTES:
        raise ToolContentError(f"a document of {len(document.data):,} bytes is over the API's 32 MB per request")
    if document.media_type == "text/plain":
        try:
            source = {"type": "text", "media_type": "text/plain", "data": bytes(document.data).decode("utf-8")}
        except UnicodeDecodeError:
            raise ToolContentError("a text/plain document is not UTF-8") from None
    else:
        source = {"type": "base64", "media_type": document.media_type,
                  "data": base64.b64encode(bytes(document.data)).decode("ascii")}
    block: dict[str, Any] = {"type": "document", "source": source}
    if document.title:
        block["title"] = str(document.title)[:500]
    return block

"""Dayflow: durable LLM agent runs that survive crashes and never pay twice.

The public API, for agents written as code::

    from dayflow_tui import Agent, tool

``Agent``, ``tool``, ``Param`` and ``ToolContext`` (``agent.define``), ``Image`` and ``Document`` (what a
tool may return besides JSON: ``agent.tool_content``) and
``open_store`` (``store``) are imported when first asked for, so
``import dayflow_tui`` costs nothing: the SDK (``anthropic``), Textual and
Peewee stay out of every process that does not use them (the CLI's reading
commands start fast; tests/cli/test_startup_imports.py measures it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .version import __version__

__all__ = ["Agent", "Document", "Image", "Param", "ToolContext", "__version__", "mcp", "open_store", "tool", "tool_from_agent"]

if TYPE_CHECKING:
    from .agent.define import Agent, Param, ToolContext, tool
    from .agent.tool_content import Document, Image
    from .store import open_store


def __getattr__(name: str) -> Any:
    # Each name is imported on first use and then kept in the module, so this runs once per name.
    if name in ("Agent", "Param", "ToolContext", "tool"):
        from .agent import define

        value = getattr(define, name)
    elif name == "tool_from_agent":  # a subagent as a tool (``agent.subagents``)
        from .agent.subagents import tool_from_agent as value
    elif name == "mcp":  # mcp.stdio(...), mcp.http(...): an agent's MCP servers (``agent.mcp_servers``)
        from .agent import mcp_servers as value
    elif name in ("Image", "Document"):
        from .agent import tool_content

        value = getattr(tool_content, name)
    elif name == "open_store":
        from .store import open_store as value
    else:
        raise AttributeError(f"module 'dayflow_tui' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

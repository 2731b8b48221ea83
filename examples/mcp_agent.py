"""An agent whose tools come from a local MCP server: ``dayflow run examples/mcp_agent.py:agent``.

Needs the mcp extra (``pip install 'dayflow-tui[mcp]'``). Offline, the built-in model calls the read-only
``weather__forecast`` once and answers; with ``ANTHROPIC_API_KEY`` set, Claude decides.
"""

import sys
from pathlib import Path

from dayflow_tui import Agent, mcp

agent = Agent(
    name="weather-notes",
    system="Answer with today's weather; keep a note when the user asks you to remember something.",
    task="What's the weather in Lisbon?",
    mcp_servers=[mcp.stdio("weather", sys.executable, str(Path(__file__).with_name("mcp_weather_server.py")),
                           auto_approve=["note"])],
)

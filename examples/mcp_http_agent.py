"""An agent whose tools come from an MCP server over HTTP: ``dayflow run examples/mcp_http_agent.py:agent``.

Start the server first (needs the mcp extra, ``pip install 'dayflow-tui[mcp]'``)::

    WEATHER_MCP_TOKEN=s3cret python examples/mcp_weather_server.py --http 8765 &
    WEATHER_MCP_TOKEN=s3cret dayflow run examples/mcp_http_agent.py:agent

``WEATHER_MCP_URL`` points it elsewhere. The token goes in ``secret_headers``: sent with every request, never
stored in the database, the run's fingerprint (which keeps the header's name), a log or an error line.
Offline, the built-in model calls the read-only ``weather__forecast`` once and answers.
"""

import os

from dayflow_tui import Agent, mcp

token = os.environ.get("WEATHER_MCP_TOKEN")

agent = Agent(
    name="weather-notes-http",
    system="Answer with today's weather; keep a note when the user asks you to remember something.",
    task="What's the weather in Lisbon?",
    mcp_servers=[mcp.http("weather", os.environ.get("WEATHER_MCP_URL", "http://127.0.0.1:8765/mcp"),
                          secret_headers={"Authorization": f"Bearer {token}"} if token else {},
                          auto_approve=["note"])],
)

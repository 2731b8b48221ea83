"""``dayflow-tui --serve [HOST:PORT]``: the same dashboard in a browser, through ``textual-serve``.

Each browser tab that connects gets its own ``dayflow-tui`` process (textual-serve runs the command
with Textual's web driver and relays the terminal over a websocket): the same keys, the same live
updates, the same database. It listens on 127.0.0.1 unless told otherwise, and every request but the
static files (the page's script, its font) must carry a random token made at start: the page as
``/?token=T``, its websocket as ``/ws/T``. A request without it, or with another, is refused (403)
before any process starts. The URL to open is printed once; the token is never logged or stored.
Plain HTTP: to serve beyond this machine, put it behind something that speaks TLS.
"""

from __future__ import annotations

import hmac
import secrets
import shlex
import sys
from pathlib import Path
from typing import Any

from ..config.errors import UsageError

INSTALL_HINT = "pip install 'dayflow-tui[serve]'"
LOOPBACK = ("127.0.0.1", "::1", "localhost")


def command_for(db: str | None) -> str:
    """The command each connection runs: this Python, the dashboard, the same database (made absolute)."""
    argv = [sys.executable, "-m", "dayflow_tui.tui.launch"]
    if db:
        local = "://" not in db
        argv += ["--db", str(Path(db).expanduser().resolve()) if local else db]
    from ..config.settings import current

    schema = current().schema  # --schema given to this process reaches each connection's dashboard too
    if schema:
        argv += ["--schema", schema]
    return shlex.join(argv)


def make_server(command: str, host: str, port: int, token: str) -> Any:
    """A textual-serve ``Server`` that refuses every request without ``token`` (UsageError: not installed)."""
    try:
        import aiohttp_jinja2
        from aiohttp import web
        from textual_serve.server import Server
    except ImportError:
        raise UsageError(f"--serve needs textual-serve, which is not installed: {INSTALL_HINT}") from None

    class TokenServer(Server):
        def __init__(self) -> None:
            super().__init__(command, host=host, port=port, title="Dayflow")

        async def _make_app(self) -> web.Application:
            @web.middleware
            async def check_token(request: web.Request, handler):
                if request.path.startswith("/static/"):
                    return await handler(request)
                given = request.query.get("token", "") if request.path == "/" else request.match_info.get("token", "")
                if not hmac.compare_digest(given.encode(), token.encode()):
                    raise web.HTTPForbidden(text="dayflow-tui: this address needs the token in the URL that "
                                                 "`dayflow-tui --serve` printed\n")
                return await handler(request)

            app = web.Application(middlewares=[check_token])
            aiohttp_jinja2.setup(app, loader=__import__("jinja2").FileSystemLoader(self.templates_path))
            app.add_routes([
                web.get("/", self.handle_index, name="index"),
                web.get("/ws/{token}", self.handle_websocket, name="websocket"),
                web.static("/static", self.statics_path, name="static"),  # no directory listing
            ])
            app.on_startup.append(self.on_startup)
            return app

        @aiohttp_jinja2.template("app_index.html")
        async def handle_index(self, request: web.Request) -> dict[str, Any]:
            # The page's URLs from the address the browser used (a server bound to 0.0.0.0 has no one name).
            base = f"{request.scheme}://{request.host}"
            socket = ("wss:" if request.scheme == "https" else "ws:") + base.split(":", 1)[1]
            size = request.query.get("fontsize", "16")
            return {"font_size": int(size) if size.isdigit() and 6 <= int(size) <= 64 else 16,
                    "app_websocket_url": f"{socket}/ws/{token}",
                    "config": {"static": {"url": f"{base}/static/"}},
                    "application": {"name": "Dayflow"}}

        async def on_startup(self, app: web.Application) -> None:
            # Startup runs before the socket listens: the URL is printed once a connection to it is taken.
            import asyncio

            self._announcing = asyncio.get_running_loop().create_task(self._announce_when_listening())

        async def _announce_when_listening(self) -> None:
            import asyncio

            probe = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
            for _ in range(600):
                try:
                    _reader, writer = await asyncio.open_connection(probe, port)
                except OSError:
                    await asyncio.sleep(0.05)
                    continue
                writer.close()
                break
            shown = f"[{host}]" if ":" in host else host
            print(f"dayflow-tui: serving the dashboard on http://{shown}:{port}/?token={token}", flush=True)
            if host not in LOOPBACK:
                print("dayflow-tui: note: listening beyond this machine over plain HTTP; anyone with the URL "
                      "can drive runs", file=sys.stderr, flush=True)
            print("dayflow-tui: ctrl+c stops it", file=sys.stderr, flush=True)

    return TokenServer()


def serve(db: str | None, host: str, port: int, token: str | None = None) -> int:
    server = make_server(command_for(db), host, port, token or secrets.token_urlsafe(24))
    server.serve()
    return 0

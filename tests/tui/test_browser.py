"""``dayflow-tui --serve`` in a real headless Chromium (issue #30): the page loads, the run list arrives, ``n``
starts a run whose steps arrive, its transcript opens, and a screenshot of the page is not blank. A request
without the printed token is refused. Skipped, with the reason, where Chromium, its driver, selenium or
textual-serve is missing (Debian: ``apt-get install chromium chromium-driver``; ``pip install selenium
'dayflow-tui[serve]'``).

What the page shows is drawn by xterm.js on a canvas, so the test reads it where the browser gets it: a
script put in the page before its own wraps ``WebSocket`` and keeps the terminal output it receives.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import time
import urllib.error
import urllib.request
import zlib

import pytest

from dayflow_tui.store import open_store

from ..reliability_helpers import cli_env, dayflow
from ..tui_helpers import TUI_BIN

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
MISSING = [name for name, there in (("chromium", CHROMIUM), ("chromedriver (chromium-driver)", DRIVER),
                                    ("selenium", importlib.util.find_spec("selenium")),
                                    ("textual-serve", importlib.util.find_spec("textual_serve"))) if not there]
pytestmark = [pytest.mark.slow, pytest.mark.skipif(bool(MISSING), reason=f"not installed: {', '.join(MISSING)}")]

# Keeps what the page's websocket receives (terminal output) in window.__dayflowSeen, as text.
KEEP_TERMINAL_OUTPUT = """
(() => {
  const Real = window.WebSocket;
  const decoder = new TextDecoder();
  window.__dayflowSeen = "";
  window.WebSocket = function (...args) {
    const socket = new Real(...args);
    socket.addEventListener("message", (event) => {
      if (typeof event.data === "string") { window.__dayflowSeen += event.data; }
      else if (event.data instanceof ArrayBuffer) { window.__dayflowSeen += decoder.decode(event.data); }
      else if (event.data instanceof Blob) { event.data.text().then((t) => { window.__dayflowSeen += t; }); }
    });
    return socket;
  };
  window.WebSocket.prototype = Real.prototype;
  Object.assign(window.WebSocket, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
})();
"""
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the rows of an 8-bit RGB or RGBA PNG (what Chromium's screenshots are)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6), (depth, colour)
            size = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, rows, previous = zlib.decompress(idat), [], bytearray(width * size)
    stride = width * size
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - size] if i >= size else 0
            up, corner = previous[i], previous[i - size] if i >= size else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                guess = left + up - corner
                near = min((abs(guess - left), 0), (abs(guess - up), 1), (abs(guess - corner), 2))[1]
                line[i] = (line[i] + (left, up, corner)[near]) & 255
        rows.append(bytes(line))
        previous = line
    return width, height, rows


def colours_seen(png: bytes) -> tuple[int, float]:
    """How many colours a sample of the screenshot has, and the share of it that is not the commonest one."""
    width, height, rows = png_pixels(png)
    size = len(rows[0]) // width
    counts: dict[bytes, int] = {}
    for y in range(0, height, 4):
        row = rows[y]
        for x in range(0, width, 4):
            pixel = row[x * size:x * size + 3]
            counts[pixel] = counts.get(pixel, 0) + 1
    total = sum(counts.values())
    return len(counts), 1 - max(counts.values()) / total


@pytest.fixture
def served(tmp_path):
    """A database with a finished run, served by the real console script; yields (url, db, process)."""
    db = tmp_path / "served.db"
    assert dayflow("brief", db=db).returncode == 0
    port = free_port()
    env = cli_env(DAYFLOW_OFFLINE_DELAY="0.4", XDG_STATE_HOME=str(tmp_path / "state"), HOME=str(tmp_path))
    server = subprocess.Popen([str(TUI_BIN), "--db", str(db), "--serve", f"127.0.0.1:{port}"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                              start_new_session=True, text=True)
    try:
        line = server.stdout.readline()  # the URL, printed once the server listens
        found = re.search(r"(http://127\.0\.0\.1:\d+/\?token=\S+)", line)
        assert found, (line, server.poll())
        yield found.group(1), db, server
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server and the dashboards it started (its own group)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)


def test_without_the_token_nothing_is_served(served):
    url, _db, _server = served
    base = url.split("?")[0]
    for wrong in (base, base + "?token=wrong", base.rstrip("/") + "/ws/wrong"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(wrong, timeout=30)
        assert refused.value.code == 403
    with urllib.request.urlopen(url, timeout=30) as page:
        assert page.status == 200 and b"/ws/" in page.read()


def test_the_dashboard_in_headless_chromium_lists_runs_starts_one_and_opens_its_transcript(served, tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    url, db, _server = served
    with _Store(db) as store:
        [done] = store.list_runs()
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,800",
                 f"--user-data-dir={tmp_path / 'chromium'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": KEEP_TERMINAL_OUTPUT})
        driver.set_page_load_timeout(60)
        driver.get(url)

        def seen() -> str:
            return ESCAPES.sub("", driver.execute_script("return window.__dayflowSeen || ''"))

        def wait(what, timeout: float = 90):
            deadline = time.monotonic() + timeout
            while not what():
                assert time.monotonic() < deadline, f"timed out; the page got:\n{seen()[-3000:]}"
                time.sleep(0.2)

        wait(lambda: done.id in seen() and "Dayflow" in seen())  # the run list, with the finished run
        ActionChains(driver).move_to_element(driver.find_element(By.ID, "terminal")).click().perform()
        ActionChains(driver).send_keys("n").perform()

        def started() -> list:
            with _Store(db) as store:
                return [run for run in store.list_runs() if run.id != done.id]

        wait(lambda: bool(started()))
        new = started()[0]
        wait(lambda: started()[0].step_count >= 2)  # its steps arrive, one by one (0.4 s a call)
        wait(lambda: new.id in seen() and "tokens per step" in seen())  # its transcript opened, live
        png = driver.get_screenshot_as_png()
        (tmp_path / "browser.png").write_bytes(png)
        count, share = colours_seen(png)
        assert count >= 8 and share > 0.05, (count, share)  # text in several colours, not one flat page
    finally:
        driver.quit()


class _Store:
    """``open_store`` as a context manager (each read its own connection, closed after)."""

    def __init__(self, db) -> None:
        self.store = open_store(str(db), create=False)

    def __enter__(self):
        return self.store

    def __exit__(self, *exc) -> None:
        self.store.close()


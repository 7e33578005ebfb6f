"""Headless Chromium driven over the DevTools protocol: load a page offline, record what it logs and
requests, read its DOM, take screenshots.

Debian's chromium is started the way a user would (`chromium --headless ...`) with its network
switched off by flags and every request recorded; the protocol runs over one websocket
(websocket-client) with flattened target sessions, so nothing but the browser is needed.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = next((p for p in ("/usr/bin/chromium", shutil.which("chromium") or "") if p and os.path.exists(p)), None)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--hide-scrollbars",
    "--mute-audio",
    # Nothing leaves the machine even if a page asked: every host name fails to resolve, every proxy
    # connection is refused.
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--proxy-server=http://127.0.0.1:9",
    "--remote-debugging-port=0",
]


@dataclass
class PageLoad:
    """What happened while a page loaded: its console, errors, requests and dialogs."""

    url: str
    console: list[tuple[str, str]] = field(default_factory=list)  # (level, text)
    exceptions: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    @property
    def errors(self) -> list[str]:
        return [f"{level}: {text}" for level, text in self.console if level in ("error", "assert")] + self.exceptions

    @property
    def warnings(self) -> list[str]:
        return [f"{level}: {text}" for level, text in self.console if level in ("warning", "warn")]

    @property
    def outside_requests(self) -> list[str]:
        """Requests other than the page itself (file:// loads of other files count as outside too)."""
        return [u for u in self.requests if u != self.url]


class Browser:
    def __init__(self) -> None:
        import websocket

        if CHROMIUM is None:
            raise RuntimeError("chromium is not installed")
        self.profile = Path(tempfile.mkdtemp(prefix="tracekit-chromium-"))
        self.process = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.is_file() and len(port_file.read_text().splitlines()) >= 2):
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.close()
                raise RuntimeError("chromium did not start its DevTools endpoint")
            time.sleep(0.05)
        port, path = port_file.read_text().splitlines()[:2]
        self.ws = websocket.create_connection(f"ws://127.0.0.1:{port}{path}", timeout=60, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def pump(self, seconds: float) -> None:
        """Read events for a while (e.g. console messages that come after a command answered)."""
        self.ws.settimeout(seconds)
        try:
            while True:
                self.events.append(json.loads(self.ws.recv()))
        except Exception:  # websocket timeout: nothing more for now
            pass
        finally:
            self.ws.settimeout(60)

    def open(
        self, url: str, width: int = 1400, height: int = 1000, ready: str | None = None, timeout: float = 60
    ) -> Tab:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        tab = Tab(self, session, url)
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=session)
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=session,
        )
        self.events.clear()
        self.send("Page.navigate", {"url": url}, session=session)
        deadline = time.monotonic() + timeout
        condition = ready or "document.readyState === 'complete'"
        while not tab.evaluate(f"Boolean({condition})"):
            if time.monotonic() > deadline:
                tab.collect()
                raise TimeoutError(f"{url}: not ready after {timeout} s ({condition}); errors: {tab.load.errors}")
            self.pump(0.1)
        self.pump(0.3)
        tab.collect()
        return tab

    def close(self) -> None:
        try:
            if hasattr(self, "ws"):
                self.send("Browser.close")
        except Exception:
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


class Tab:
    def __init__(self, browser: Browser, session: str, url: str) -> None:
        self.browser = browser
        self.session = session
        self.load = PageLoad(url)

    def evaluate(self, expression: str) -> Any:
        reply = self.browser.send(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}, self.session
        )
        if "exceptionDetails" in reply:
            raise RuntimeError(f"{expression}: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def collect(self) -> None:
        """Move this tab's events into `load` (and dismiss any dialog, which would block the page)."""
        keep = []
        for event in self.browser.events:
            if event.get("sessionId") != self.session:
                keep.append(event)
                continue
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled":
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
                self.load.console.append((params.get("type", ""), text))
            elif method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                self.load.exceptions.append(details.get("exception", {}).get("description") or details.get("text", ""))
            elif method == "Log.entryAdded":
                entry = params.get("entry", {})
                self.load.console.append((entry.get("level", ""), f"{entry.get('source')}: {entry.get('text')}"))
            elif method == "Network.requestWillBeSent":
                self.load.requests.append(params.get("request", {}).get("url", ""))
            elif method == "Page.javascriptDialogOpening":
                self.load.dialogs.append(params.get("message", ""))
                self.browser.send("Page.handleJavaScriptDialog", {"accept": False}, self.session)
        self.browser.events = keep

    def screenshot(self, path: Path, full_page: bool = True) -> Path:
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": full_page}
        if full_page:
            size = self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params["clip"] = {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1}
        data = self.browser.send("Page.captureScreenshot", params, self.session)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

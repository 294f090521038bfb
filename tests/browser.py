"""A headless Chromium driven over the DevTools protocol (CDP) with the ``websockets`` library: enough of
it for the viewer's tests (open a page, evaluate JavaScript, send mouse events, watch network requests).

    with Browser.start(tmp_path) as browser:
        page = browser.new_page()
        page.goto(url)
        page.wait("document.body.dataset.state === 'ready'")

Debian's ``chromium``; :func:`chromium` is None where it is not installed (tests skip with a reason).
"""

from __future__ import annotations

import itertools
import json
import queue
import re
import shutil
import subprocess
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

_LISTENING = re.compile(r"DevTools listening on (ws://\S+)")


def chromium() -> str | None:
    """The system's Chromium, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Page:
    """One tab: :meth:`send` a CDP command and get its result; events are kept in :attr:`events`."""

    def __init__(self, url: str):
        self._opened = ExitStack()  # websockets wants its connections entered as context managers
        self._socket: ClientConnection = self._opened.enter_context(connect(url, max_size=64 << 20, open_timeout=10))
        self._ids = itertools.count(1)
        self.events: list[tuple[str, dict]] = []

    def close(self) -> None:
        self._opened.close()

    def send(self, method: str, timeout: float = 20, **params: Any) -> dict:
        ident = next(self._ids)
        self._socket.send(json.dumps({"id": ident, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            message = json.loads(self._socket.recv(timeout=max(0.01, deadline - time.monotonic())))
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self.events.append((message["method"], message.get("params", {})))

    def pump(self) -> None:
        """Collect the events that arrived since the last command."""
        self.send("Runtime.evaluate", expression="0")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited); a thrown error raises."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait(self, expression: str, timeout: float = 15) -> Any:
        """Poll ``expression`` until it is truthy; its value, or TimeoutError with its last value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                state = self.evaluate("[document.body.dataset.state, document.getElementById('status')?.textContent, "
                                      "document.getElementById('readout')?.textContent]")
                raise TimeoutError(f"{expression} still {value!r} after {timeout} s (state, status: {state})")
            time.sleep(0.05)

    def goto(self, url: str) -> None:
        self.send("Page.navigate", url=url)
        self.wait("document.readyState === 'complete'")

    def mouse(self, kind: str, x: float, y: float, **extra: Any) -> None:
        """Input.dispatchMouseEvent: kind mousePressed, mouseMoved, mouseReleased; x, y in CSS pixels."""
        self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button=extra.pop("button", "left"), **extra)

    def requests(self) -> list[dict]:
        """Every request the page sent (Network.requestWillBeSent's ``request``)."""
        self.pump()
        return [params["request"] for method, params in self.events if method == "Network.requestWillBeSent"]


class Browser:
    """A Chromium process with remote debugging on a port it chose."""

    def __init__(self, process: subprocess.Popen, endpoint: str):
        self.process = process
        self.endpoint = endpoint  # ws://127.0.0.1:PORT/devtools/browser/ID
        self._control = Page(endpoint)

    @classmethod
    def start(cls, profile: Path, executable: str | None = None, timeout: float = 30) -> Browser:
        argv = [executable or chromium() or "chromium", "--headless=new", "--remote-debugging-port=0",
                f"--user-data-dir={profile}", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--no-default-browser-check", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--disable-extensions", "--window-size=1280,1000", "about:blank"]
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        lines: queue.Queue[str] = queue.Queue()

        def read() -> None:  # keeps reading so that a full pipe never blocks the browser
            assert process.stderr is not None
            for line in process.stderr:
                lines.put(line)

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + timeout
        seen = []
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                if process.poll() is not None:
                    break
                continue
            seen.append(line)
            found = _LISTENING.search(line)
            if found:
                return cls(process, found.group(1))
        process.kill()
        process.wait(10)
        raise RuntimeError("chromium did not start: " + "".join(seen)[-2000:])

    def new_page(self) -> Page:
        """A fresh tab (its own sessionStorage) with the Page, Runtime and Network domains on."""
        target = self._control.send("Target.createTarget", url="about:blank")["targetId"]
        host = self.endpoint.split("/devtools/")[0]
        page = Page(f"{host}/devtools/page/{target}")
        for domain in ("Page", "Runtime", "Network"):
            page.send(f"{domain}.enable")
        # One CSS pixel a device pixel, and room for the whole page: mouse events land where rects say.
        page.send("Emulation.setDeviceMetricsOverride", width=1280, height=1000, deviceScaleFactor=1, mobile=False)
        return page

    def close(self) -> None:
        self._control.close()
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""A headless Chromium session a test drives: load a page, evaluate an expression in it, click,
focus, take a screenshot.

Debian's `chromium` speaks the DevTools protocol over a pipe (`--remote-debugging-pipe`: commands
in on fd 3, replies and events out on fd 4, each a JSON message ended by a NUL byte), so no
websocket client and no driver package is needed. One browser per session; each page is opened
in the same tab at the viewport width given, as a phone or a desktop would show it.

The site's pages forbid scripts (Content-Security-Policy): expressions evaluated here come from
the DevTools protocol, which that policy does not govern, and change nothing on the page unless a
test clicks or focuses something.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


class BrowserError(AssertionError):
    pass


class Browser:
    """`with Browser(width=390) as b: b.open(path); b.eval("document.title")`."""

    def __init__(self, *, width: int, height: int = 844, timeout: float = 60.0) -> None:
        self.width, self.height, self.timeout = width, height, timeout
        self._next = 0
        self._buf = b""
        self._events: list[dict[str, Any]] = []

    def __enter__(self) -> Browser:
        self._profile = tempfile.mkdtemp(prefix="batchrun-chromium-")
        to_child, self._out = os.pipe()  # the browser reads fd 3
        self._in, from_child = os.pipe()  # the browser writes fd 4
        low = (to_child, from_child)  # moved to 10 or above: see the shim below
        to_child, from_child = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in low)
        for fd in low:
            os.close(fd)
        args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                "--no-first-run", "--disable-sync", "--hide-scrollbars", "--remote-debugging-pipe",
                f"--user-data-dir={self._profile}", f"--window-size={self.width},{self.height}", "about:blank"]
        # The pipes go on fds 3 and 4 in a small Python step before the browser (Debian's
        # launcher is a shell script, and dash redirects only fds 0-9; a preexec function is
        # unsafe in a threaded process). Both are at 10 or above: one dup2 cannot close the other.
        shim = "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); os.execv(sys.argv[3], sys.argv[3:])"
        self._proc = subprocess.Popen([sys.executable, "-c", shim, str(to_child), str(from_child), CHROMIUM, *args],
                                      pass_fds=(to_child, from_child), stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child)
        os.close(from_child)
        try:
            targets = self.call("Target.getTargets")["targetInfos"]
            page = next(t for t in targets if t["type"] == "page")
            self._session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
            self.page("Page.enable")
            # A headless window never has the system's focus, and without it :focus matches nothing.
            self.page("Emulation.setFocusEmulationEnabled", enabled=True)
            self.page("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height, deviceScaleFactor=1,
                      mobile=self.width < 600)
        except BaseException:
            self.__exit__()  # no browser left behind
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.call("Browser.close")
        except Exception:
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._out)
        os.close(self._in)
        shutil.rmtree(self._profile, ignore_errors=True)

    # --- the protocol ---------------------------------------------------------------------------

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self._next += 1
        msg: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._out, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._events.append(reply)

    def page(self, method: str, **params: Any) -> dict[str, Any]:
        return self.call(method, self._session, **params)

    def _read(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._in], [], [], left)[0]:
                raise BrowserError(f"chromium did not answer within {self.timeout:.0f} s")
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise BrowserError(f"chromium exited ({self._proc.poll()})")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\0", 1)
        return json.loads(line)

    def _wait_event(self, method: str) -> dict[str, Any]:
        while True:
            for i, ev in enumerate(self._events):
                if ev.get("method") == method:
                    return self._events.pop(i)
            self._events.append(self._read())

    # --- what a test does ---------------------------------------------------------------------------

    def open(self, path: Path | str) -> None:
        """Load a page (a file, or a file with #fragment) and wait until it has loaded."""
        url = path if isinstance(path, str) else path.resolve().as_uri()
        self._events.clear()
        self.page("Page.navigate", url=url)
        self._wait_event("Page.loadEventFired")

    def eval(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable)."""
        got = self.page("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in got:
            raise BrowserError(f"{expression}: {got['exceptionDetails']}")
        return got["result"].get("value")

    def url(self) -> str:
        return str(self.eval("location.href"))

    def click(self, selector: str, *, navigates: bool = True) -> None:
        """Click the centre of the first element matching `selector` as a user would (mouse events
        at the middle of its first line box, after scrolling it into view: a link that wraps has
        a gap in the middle of its bounding box; in screen pixels, which differ from the page's
        where a phone has zoomed out), and wait for the page it opens to load (`navigates`)
        or only for the page to have handled the click (a <summary>)."""
        box = self.eval(f"(() => {{ const el = document.querySelector({json.dumps(selector)}); if (!el) return null; "
                        "el.scrollIntoView({block: 'center'}); const r = el.getClientRects()[0]; "
                        "const v = visualViewport; "
                        "return [(r.left + r.width / 2 - v.offsetLeft) * v.scale, (r.top + r.height / 2 - v.offsetTop) * v.scale]; })()")
        if box is None:
            raise BrowserError(f"nothing matches {selector!r}")
        self._events.clear()
        for kind in ("mousePressed", "mouseReleased"):
            self.page("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)
        if navigates:  # else the press has been handled when dispatchMouseEvent returns
            self._wait_event("Page.loadEventFired")

    def press_tab(self) -> None:
        for kind in ("keyDown", "keyUp"):
            self.page("Input.dispatchKeyEvent", type=kind, key="Tab", code="Tab", windowsVirtualKeyCode=9)

    def screenshot(self, path: Path, *, full_page: bool = False, max_height: int = 4000) -> Path:
        """What the screen shows (from where the page is scrolled), or `full_page`: the page from
        its top, down to `max_height` pixels (a tall capture takes a second to encode)."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.eval("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params.update(captureBeyondViewport=True, clip={"x": 0, "y": 0, "width": size[0], "height": min(size[1], max_height), "scale": 1})
        path.write_bytes(base64.b64decode(self.page("Page.captureScreenshot", **params)["data"]))
        return path

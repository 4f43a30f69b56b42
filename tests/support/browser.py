"""Headless Chromium (Debian's `chromium`) driven through its own DevTools protocol over
`--remote-debugging-pipe`: the browser reads NUL-terminated JSON commands on fd 3 and writes
replies and events on fd 4, so no websocket client or browser-automation package is needed."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from typing import Any


class BrowserError(RuntimeError):
    pass


class Browser:
    """One headless Chromium with one page; `evaluate` runs JavaScript in it."""

    def __init__(self) -> None:
        exe = shutil.which("chromium")
        if exe is None:
            raise BrowserError("chromium is not installed; run scripts/install-system-deps.sh")
        self._profile = tempfile.mkdtemp(prefix="peakpack-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        def wire() -> None:  # in the child: the pipe ends become exactly fd 3 and 4 (via fds >= 10)
            ends = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser_r, from_browser_w)]
            for target, fd in zip((3, 4), ends):
                os.dup2(fd, target)  # inheritable; Python's own fds are not (PEP 446)
        self._proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             "--no-first-run", "--no-default-browser-check", f"--user-data-dir={self._profile}",
             "about:blank"],
            preexec_fn=wire, close_fds=False,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        """Send one command and wait for its reply (events in between are dropped)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def _read(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise BrowserError("chromium closed the DevTools pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def goto(self, url: str) -> None:
        self.call("Page.navigate", self._session, url=url)

    def evaluate(self, expression: str) -> Any:
        """The value of `expression` in the page (promises awaited); a page that is navigating
        away answers with an error, raised as BrowserError."""
        result = self.call("Runtime.evaluate", self._session, expression=expression,
                           awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 30.0) -> Any:
        """Evaluate `expression` until it is truthy (across navigations); its value."""
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = self.evaluate(expression)
            except BrowserError as exc:
                last = exc
            else:
                if last:
                    return last
            time.sleep(0.2)
        raise BrowserError(f"waited {timeout_s:.0f} s for {expression}; last: {last!r}")

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except BrowserError:
            pass
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

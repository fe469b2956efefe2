"""Chromium from Debian's package, headless, for checking the docs site in a real browser.

There is no server: ``HeadlessChromium`` starts a browser for one check and drives it over the
DevTools protocol on a pipe (``--remote-debugging-pipe``: file descriptors 3 and 4, messages of JSON
ended by a NUL byte), so no port is opened. The flags keep it off the network this machine does not
have (background networking, component updates, sync) and out of the user's profile.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from strata_platform.services.base import InstalledTool, ServiceError, apt_install, run, terminate_group

BINARY = "/usr/bin/chromium"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-pipe")


class ChromiumService(InstalledTool):
    """Installs the browser; each check starts one of its own (nothing runs between commands)."""

    name = "chromium"

    def install(self) -> None:
        apt_install("chromium")

    def version(self) -> str:
        return run([BINARY, "--version"]).stdout.strip()

    def is_ready(self) -> bool:
        return Path(BINARY).exists()

    def check(self) -> str:
        with HeadlessChromium() as browser:
            browser.open("data:text/html,<title>ok</title><p id=p>rendered</p>")
            text = browser.evaluate("document.getElementById('p').textContent")
        if text != "rendered":
            raise ServiceError(f"chromium rendered {text!r} instead of 'rendered'")
        return "rendered a page headless and read its DOM over the DevTools pipe"


def _above_4(fd: int) -> int:
    """The same pipe end at a descriptor the move to 3 and 4 cannot overwrite."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


class BrowserError(ServiceError):
    """The browser answered a DevTools command with an error, or went away."""


class HeadlessChromium:
    """One headless browser and one page in it, driven over the DevTools pipe."""

    def __init__(self, width: int = 1280, height: int = 900, timeout: float = 60.0) -> None:
        self.width, self.height, self.timeout = width, height, timeout
        self._next_id = 0
        self._buffer = b""

    def __enter__(self) -> HeadlessChromium:
        if not Path(BINARY).exists():
            raise ServiceError(f"{BINARY} not found: install Debian's chromium (strata-services install chromium)")
        self._profile = tempfile.mkdtemp(prefix="strata-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        to_browser_r, from_browser_w = _above_4(to_browser_r), _above_4(from_browser_w)

        # the protocol wants the pipe at fds 3 and 4: bash moves them there and becomes the browser
        # (no preexec_fn, which is unsafe in a process with threads)
        moved = f'exec "$@" 3<&{to_browser_r} 4>&{from_browser_w} {to_browser_r}<&- {from_browser_w}>&-'
        self._process = subprocess.Popen(
            ["bash", "-c", moved, "chromium", BINARY, *FLAGS, f"--user-data-dir={self._profile}",
             f"--window-size={self.width},{self.height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(to_browser_r, from_browser_w), start_new_session=True)
        os.close(to_browser_r)
        os.close(from_browser_w)
        target = self.command("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.command("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.command("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height,
                     deviceScaleFactor=1, mobile=False)
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self._to_browser)
        os.close(self._from_browser)
        terminate_group(self._process.pid, timeout=10)
        self._process.wait(timeout=10)
        shutil.rmtree(self._profile, ignore_errors=True)

    # -- the protocol ----------------------------------------------------------------------------
    def command(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command (to the page once attached) and return its result."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if getattr(self, "_session", None):
            message["sessionId"] = self._session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            answer = self._read_message()
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise BrowserError(f"{method}: {answer['error']}")
                result: dict[str, Any] = answer.get("result", {})
                return result
        raise BrowserError(f"{method}: no answer in {self.timeout:.0f} s")

    def _read_message(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise BrowserError(f"chromium closed its pipe (exit code {self._process.poll()})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        parsed: dict[str, Any] = json.loads(message)
        return parsed

    # -- what a check does -----------------------------------------------------------------------
    def open(self, url: str) -> None:
        """Load a page and wait until it and its resources have loaded."""
        self.command("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete' && location.href !== 'about:blank'", f"{url} to load")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        answer = self.command("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in answer:
            raise BrowserError(f"{expression!r} raised: {answer['exceptionDetails'].get('text')} "
                               f"{answer['exceptionDetails'].get('exception', {}).get('description', '')}")
        return answer["result"].get("value")

    def wait_for(self, expression: str, what: str) -> None:
        """Until the expression is true in the page; BrowserError naming `what` past the timeout."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.evaluate(expression):
                return
            time.sleep(0.1)
        raise BrowserError(f"waited {self.timeout:.0f} s for {what}")

    def screenshot(self, path: Path) -> Path:
        """A PNG of the whole page, not only the window."""
        data = self.command("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

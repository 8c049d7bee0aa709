"""A headless Chromium for tests (Debian's ``chromium``), driven over the DevTools protocol on a pipe
(``--remote-debugging-pipe``: the browser reads commands on its fd 3 and answers on its fd 4), with nothing
but the standard library. It opens a page and records what the page did: console messages and exceptions,
every request it sent; reads values from its DOM; takes a screenshot.

Chromium is started with a fresh profile and every background service off (no update, sync or component
check: this network refuses them, and a test page must be the only thing that asks for anything)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

CHROMIUM = "chromium"
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--window-size=1280,900",
    "--remote-debugging-pipe",
)


def chromium_path() -> str:
    """Where Chromium is; the test fails (it does not skip) when it is missing."""
    found = shutil.which(CHROMIUM)
    if found is None:
        raise AssertionError(f"{CHROMIUM} is not installed: apt-get install -y chromium (.ci/run installs it)")
    return found


class Browser:
    """One Chromium process with one page (``with Browser(profile) as browser: browser.open(url)``)."""

    def __init__(self, profile: Path, *, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self.events: list[dict[str, Any]] = []
        self._next = 0
        self._buffer = b""
        commands_read, self._commands = os.pipe()
        self._answers, answers_written = os.pipe()

        def as_fds_3_and_4() -> None:  # (in the child, before exec: the fds the browser expects)
            read, written = os.dup(commands_read), os.dup(answers_written)
            os.dup2(read, 3)
            os.dup2(written, 4)

        self.process = subprocess.Popen(
            [chromium_path(), *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(3, 4),
            preexec_fn=as_fds_3_and_4,
        )
        os.close(commands_read)
        os.close(answers_written)
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            self.send(f"{domain}.enable", session=self.session)

    # the protocol -----------------------------------------------------------------------------------

    def send(self, method: str, *, session: str | None = None, **params: Any) -> dict[str, Any]:
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._receive()
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def _receive(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._answers], [], [], max(0.0, left))
            if not ready:
                raise TimeoutError(f"Chromium said nothing for {self.timeout} s")
            chunk = os.read(self._answers, 1 << 20)
            if not chunk:
                raise RuntimeError(f"Chromium closed its pipe (exit status {self.process.poll()})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def wait_for(self, method: str) -> dict[str, Any]:
        """The first event ``method`` (already received or next)."""
        while True:
            for event in self.events:
                if event.get("method") == method:
                    return event
            self.events.append(self._receive())

    # what a test asks -------------------------------------------------------------------------------

    def open(self, url: str) -> None:
        """Loads ``url`` and waits for its load event."""
        self.send("Page.navigate", session=self.session, url=url)
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-able)."""
        answer = self.send(
            "Runtime.evaluate", session=self.session, expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in answer:
            raise RuntimeError(f"{expression}: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    def errors(self) -> list[str]:
        """What the page reported as an error: exceptions, console errors and warnings, log entries (a refused
        load, a policy violation) of level error or warning."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(json.dumps(params["exceptionDetails"]))
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning", "assert"):
                found.append(json.dumps(params.get("args")))
            elif method == "Log.entryAdded" and params["entry"].get("level") in ("error", "warning"):
                found.append(params["entry"].get("text", ""))
        return found

    def requests(self) -> list[str]:
        """Every URL the page asked for (its own navigation included)."""
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]

    def screenshot(self, path: Path) -> None:
        """The whole page as a PNG (the viewport's width, the page's height)."""
        height = int(self.evaluate("document.documentElement.scrollHeight"))
        self.send(
            "Emulation.setDeviceMetricsOverride",
            session=self.session,
            width=1280,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        shot = self.send("Page.captureScreenshot", session=self.session, format="png")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):  # (it may close its pipe before answering)
            self.send("Browser.close")
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._commands)
        os.close(self._answers)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

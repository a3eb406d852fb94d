"""Building a service for a test: each test its own app and store."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from urllib.parse import unquote

import httpx
from fastapi.testclient import TestClient

from app.service.app import create_app
from app.service.settings import Settings


@contextlib.contextmanager
def service(url: str, **settings):
    """A running app (lifespan entered) and a client for it; no background loop unless asked.
    Authenticated as `serve` on loopback is unless told otherwise: open until a token exists."""
    settings.setdefault("background", False)
    settings.setdefault("auth", "until_first_token")
    app = create_app(Settings(db_url=url, **settings))
    with TestClient(DecodedOnce(app), base_url="http://127.0.0.1") as client:  # an open loopback service wants a loopback Host
        yield client


class DecodedOnce:
    """The app with each request's path percent-decoded once from its raw path, as uvicorn
    decodes it.  Starlette's TestClient decodes it twice (starlette#2587): a run posted as
    `%2541` reached the app as `A`, and `%2500` as a NUL.  The app's own attributes
    (`client.app.state`) are the app's."""

    def __init__(self, app) -> None:
        self.app = app

    def __getattr__(self, name: str):
        return getattr(self.app, name)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope.get("raw_path"):
            scope = {**scope, "path": unquote(scope["raw_path"].decode("ascii", "replace"))}
        await self.app(scope, receive, send)


def wait_for(check, timeout: float = 10.0):
    """Poll `check` until it returns something truthy (the background loop works in rounds)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def server_process(url: str, *args: str, startup: float = 30):
    """`losswatch serve` as a real process on a free port; yields (base URL, process).
    `startup`: seconds it may take to answer (workers each import everything anew)."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    # Its log goes to a file, which never fills as a pipe nobody reads would (the server would
    # then hang on its next log line); `process.stderr` reads it from the start.
    log = tempfile.NamedTemporaryFile(prefix="losswatch-serve-", suffix=".log", delete=False)
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--db", url, *args],
        stderr=log, env=env,
    )
    log.close()
    process.stderr = open(log.name, "rb")
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return process.poll() is not None  # died: stop waiting, the caller will see it

    try:
        wait_for(up, timeout=startup)
        assert process.poll() is None, process.stderr.read().decode()
        yield base, process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
        process.stderr.close()
        os.unlink(log.name)

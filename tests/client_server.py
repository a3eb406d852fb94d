"""`losswatch serve` as a real process on a fixed port, for the client's tests: it can be
killed (`kill -9`) and started again on the same port while a watcher keeps posting."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import urllib.parse

import httpx

from tests.service_helpers import free_port, wait_for


class Server:
    """`losswatch serve` on a fixed port, so it can be killed and started again there."""

    def __init__(self, db: str, *args: str) -> None:
        self.db, self.args = db, args
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self, wait: bool = True) -> None:
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(self.port), "--db", self.db, *self.args],
            stderr=subprocess.DEVNULL, env=env,
        )
        if wait:
            self.wait_up()

    def wait_up(self) -> None:
        def up() -> bool:
            try:
                return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                assert self.process.poll() is None, "losswatch serve died"
                return False

        wait_for(up, timeout=60)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=30)

    def get(self, path: str, token: str | None = None, **params) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.get(self.url + path, params=params, headers=headers, timeout=30)

    def series(self, run: str, tag: str) -> list:
        answer = self.get(f"/v1/runs/{urllib.parse.quote(run, safe='')}/series", tag=tag, max_points=100_000)
        assert answer.status_code == 200, answer.text
        return answer.json()["points"]


@contextlib.contextmanager
def serving(db: str, *args: str, start: bool = True):
    server = Server(db, *args)
    if start:
        server.start()
    try:
        yield server
    finally:
        server.stop()

"""A real webhook receiver for tests: a threaded HTTP server on a free loopback port that
keeps every delivery it gets (key header and body), optionally slow, failing with a
status of the test's choosing, or holding chosen requests (or all: `hang`) until the test
lets them go."""

from __future__ import annotations

import collections
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    def __init__(self, delay: float = 0.0, hold: set[int] | None = None, status: int = 204, hang: bool = False) -> None:
        self.delay = delay  # seconds each answer takes
        self.hold = hold or set()  # 1-based request numbers held until `release()`
        self.status = status  # the answer to every request
        self.hang = hang  # hold every request until `release()`
        self.released = threading.Event()
        self.received: list[tuple[str, dict]] = []  # (X-Losswatch-Delivery, body), in arrival order
        self.paths: list[str] = []  # each request's path and query, in arrival order
        self.holding = 0  # requests being held right now
        self._lock = threading.Lock()
        self.url = ""

    def keys(self) -> collections.Counter:
        with self._lock:
            return collections.Counter(key for key, _ in self.received)

    def count(self) -> int:
        with self._lock:
            return len(self.received)

    def release(self) -> None:
        self.released.set()

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        body = json.loads(handler.rfile.read(int(handler.headers["Content-Length"])))
        with self._lock:
            self.received.append((handler.headers.get("X-Losswatch-Delivery"), body))
            self.paths.append(handler.path)
            number = len(self.received)
            held = self.hang or number in self.hold
            self.holding += held
        if held:
            self.released.wait(timeout=120)
            with self._lock:
                self.holding -= 1
        time.sleep(self.delay)
        try:
            handler.send_response(self.status)
            handler.end_headers()
        except OSError:
            pass  # the sender is gone (killed, or it gave up)


@contextmanager
def running(receiver: Receiver) -> Iterator[Receiver]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            receiver._handle(self)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    try:
        yield receiver
    finally:
        receiver.release()
        server.shutdown()
        server.server_close()

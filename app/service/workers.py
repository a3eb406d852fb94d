"""Serving from one process or several: `serve --workers N` starts N uvicorn worker
processes, each with its app, store connections, background loop and listening socket of
its own, all bound to one port with SO_REUSEPORT: the kernel spreads the connections over
the workers evenly (by a hash of each connection's addresses).  With one socket shared by
all (uvicorn's way), whichever worker woke first took a burst of new connections: of 32
training loops' kept-alive connections, 19/13, 19/13 and 32/0 went to the two workers in
three starts, and the rate followed (960, 895 and 617 appends a second, bench/append.py).

Nothing is shared between workers but the database: a run's appends are ordered by its row
lock (`app.store.runs.lock_run`), a watched logdir is scanned by one worker at a time
(`FOR UPDATE SKIP LOCKED`), and each webhook delivery is claimed with a lease before it is
sent, so every change is delivered once however many workers (or `serve` processes) run."""

from __future__ import annotations

import contextlib
import functools
import logging
import socket
import sys
from collections.abc import Iterator

from uvicorn.config import STARTUP_FAILURE

from app.service.app import create_app
from app.service.logs import log_config
from app.service.settings import Settings

GRACEFUL_SHUTDOWN = 30  # seconds SIGTERM lets in-flight requests finish
# Seconds a worker may take to answer the supervisor's ping before it is replaced; it answers
# only once its interpreter has imported everything, which on a busy machine takes seconds.
HEALTHCHECK = 60


def run_workers(settings: Settings, host: str, port: int, workers: int) -> None:
    """Serve until SIGTERM/SIGINT.  With several workers, the port is reserved here and
    uvicorn's supervisor starts each worker (a fresh interpreter building its app from
    `settings` and binding a socket of its own), replaces one that dies, and on SIGTERM
    stops them all, each draining its requests."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    config = uvicorn.Config(
        functools.partial(create_app, settings), factory=True, host=host, port=port, workers=workers,
        log_config=log_config(), access_log=False, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN,
        timeout_worker_healthcheck=HEALTHCHECK,
    )
    if workers > 1:
        with _reserved(host, port) as address:
            Multiprocess(config, sockets=[_WorkerSocket(address)]).run()  # type: ignore[list-item]
        return
    server = uvicorn.Server(config)
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:  # the app failed to start (said in the log): as uvicorn.run exits
        sys.exit(STARTUP_FAILURE)


@contextlib.contextmanager
def _reserved(host: str, port: int) -> Iterator[tuple[str, int]]:
    """The address the workers bind (port 0 made a real one), held by a socket of the
    supervisor that never listens, so the port stays the service's while workers are
    replaced; a port taken by another program ends `serve` here, as uvicorn would."""
    try:
        sock = _bound((host, port))
    except OSError as e:
        logging.getLogger("uvicorn.error").error(e)
        sys.exit(STARTUP_FAILURE)
    with sock:
        address = sock.getsockname()[:2]
        logging.getLogger("uvicorn.error").info("Uvicorn running on http://%s:%d (Press CTRL+C to quit)", *address)
        yield address


class _WorkerSocket:
    """What the supervisor hands each worker it starts, in place of a shared socket: pickled
    into the new process (uvicorn starts workers by spawn), where it is unpickled as a socket
    of that worker's own, bound to the service's address with SO_REUSEPORT."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address

    def __reduce__(self) -> tuple:
        return _worker_socket, (self.address,)


def _worker_socket(address: tuple[str, int]) -> socket.socket:
    try:
        return _bound(address)
    except OSError as e:  # the worker could not start: the supervisor stops, not restart it in a loop
        print(f"losswatch worker: cannot bind {address[0]}:{address[1]}: {e}", file=sys.stderr)
        sys.exit(STARTUP_FAILURE)


def _bound(address: tuple[str, int]) -> socket.socket:
    family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock

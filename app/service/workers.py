"""Serving from one process or several: `serve --workers N` starts N uvicorn worker
processes that share the listening socket (the kernel hands each connection to one of
them), each with its app, store connections and background loop.

Nothing is shared between workers but the database: a run's appends are ordered by its row
lock (`app.store.runs.lock_run`), a watched logdir is scanned by one worker at a time
(`FOR UPDATE SKIP LOCKED`), and each webhook delivery is claimed with a lease before it is
sent, so every change is delivered once however many workers (or `serve` processes) run."""

from __future__ import annotations

import contextlib
import functools
import sys

from app.service.app import create_app
from app.service.logs import log_config
from app.service.settings import Settings

GRACEFUL_SHUTDOWN = 30  # seconds SIGTERM lets in-flight requests finish
# Seconds a worker may take to answer the supervisor's ping before it is replaced; it answers
# only once its interpreter has imported everything, which on a busy machine takes seconds.
HEALTHCHECK = 60


def run_workers(settings: Settings, host: str, port: int, workers: int) -> None:
    """Serve until SIGTERM/SIGINT.  With several workers, uvicorn's supervisor binds the
    socket, starts each worker (a fresh interpreter building its app from `settings`),
    replaces one that dies, and on SIGTERM stops them all, each draining its requests."""
    import uvicorn
    from uvicorn.config import STARTUP_FAILURE
    from uvicorn.supervisors import Multiprocess

    config = uvicorn.Config(
        functools.partial(create_app, settings), factory=True, host=host, port=port, workers=workers,
        log_config=log_config(), access_log=False, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN,
        timeout_worker_healthcheck=HEALTHCHECK,
    )
    if workers > 1:
        Multiprocess(config, sockets=[config.bind_socket()]).run()
        return
    server = uvicorn.Server(config)
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:  # the app failed to start (said in the log): as uvicorn.run exits
        sys.exit(STARTUP_FAILURE)

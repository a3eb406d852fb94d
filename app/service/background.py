"""The service's background work, one loop: scan the watched logdirs that are due (the same
code as `losswatch scan`), analyse the runs whose analysis was deferred, deliver webhooks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import httpx

from app.alerts.webhooks import deliver_due
from app.ingest.problems import IngestError, Problem
from app.scan import scan
from app.service.metrics import Metrics
from app.service.settings import Settings
from app.store import logdirs as stored_logdirs
from app.store import runs as stored_runs
from app.store.db import Store
from app.updates import analyze_now

log = logging.getLogger("losswatch.background")

TICK = 1.0  # seconds between rounds when nothing wakes the loop
MAX_PROBLEMS = 20  # a logdir's last_error lists at most this many problems of its last scan


def describe(problems: list[Problem]) -> str | None:
    """A logdir's `last_error`: its last scan's problems, one a line (None: it read everything)."""
    if not problems:
        return None
    lines = [str(p) for p in problems[:MAX_PROBLEMS]]
    if len(problems) > MAX_PROBLEMS:
        lines.append(f"... and {len(problems) - MAX_PROBLEMS} more")
    return "\n".join(lines)


class Background:
    def __init__(self, store: Store, settings: Settings, metrics: Metrics, client: httpx.Client) -> None:
        self.store, self.settings, self.metrics, self.client = store, settings, metrics, client
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()

    def wake(self) -> None:
        """Run a round soon (a logdir was just registered); callable from any thread."""
        self._loop.call_soon_threadsafe(self._wake.set)

    async def run(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.round)
            except Exception:  # one bad round must not stop the next: logged, with its traceback
                log.exception("background round failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=TICK)
            self._wake.clear()

    def round(self) -> None:
        self.poll_logdirs()
        self.analyse_deferred()
        report = deliver_due(self.store, self.client)
        if report.failed:
            self.metrics.webhook_failures.inc(len(report.failed))
            log.warning("webhook deliveries failed", extra={"failed": report.failed})

    def poll_logdirs(self) -> None:
        now = time.time()
        with self.store.write() as conn:
            due = stored_logdirs.claim_due(conn, now, self.settings.poll_interval)
            watched = stored_logdirs.list_logdirs(conn) if due else []
        for logdir in due:
            started = time.perf_counter()
            error = self.poll_one(logdir, watched)
            self.metrics.scan_duration.observe(time.perf_counter() - started)
            with self.store.write() as conn:
                stored_logdirs.record_scan(conn, logdir["id"], time.time(), error)

    def poll_one(self, logdir: dict, watched: list[dict]) -> str | None:
        """Scan one logdir with the allowed roots checked again (a directory or file swapped
        for a symlink since registration is not read); returns what went wrong, for
        `last_error`.  A logdir inside another watched one (registered before overlaps were
        refused) is left to that one: its runs would be stored twice."""
        path = logdir["path"]
        outer = next((w for w in watched if w["id"] != logdir["id"] and stored_logdirs.contains(w["path"], path)), None)
        if outer is not None:
            return f"inside the watched logdir {outer['path']} (id {outer['id']}): not scanned, its runs are scanned there"
        try:
            outcome = scan(self.store, [path], config=self.settings.analysis, webhooks=list(self.settings.webhooks),
                           roots=self.settings.allowed_roots)
        except IngestError as e:
            log.warning("cannot scan logdir", extra={"path": path, "error": str(e)})
            return str(e)
        self.metrics.points_ingested.labels(via="logdir").inc(outcome.points)
        log.info("scanned logdir", extra={"path": path, "runs": outcome.runs,
                                          "points": outcome.points, "changes": len(outcome.events)})
        if outcome.problems:
            log.warning("problems in logdir", extra={"path": path, "problems": [str(p) for p in outcome.problems]})
        return describe(outcome.problems)

    def analyse_deferred(self) -> None:
        now = time.time()
        with self.store.read() as conn:
            waiting = stored_runs.dirty_runs(conn, now - self.settings.analysis_interval)
        for run in waiting:
            applied = analyze_now(self.store, run, self.settings.analysis, self.settings.webhooks, now)
            if applied.error is not None:
                log.warning("analysis failed", extra={"source": run.source, "run": run.name, "error": applied.error})

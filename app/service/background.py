"""The service's background work, two loops side by side so a slow webhook receiver never
holds up analysis: one scans the watched logdirs that are due (the same code as `losswatch
scan`) and analyses the runs whose analysis was deferred; the other delivers webhooks.

Each round runs in a thread of its own.  A round that fails (the database is down, say) is
logged and the loop goes on: the next tick tries again, and the work resumes by itself once
the database is back.  On shutdown each loop finishes the step it is in (a delivery gives
back what it claimed and did not send) for up to `STOP_GRACE` seconds."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable

import httpx
import sqlalchemy as sa

from app.alerts.webhooks import DeliveryConfig, DeliveryReport, deliver_due, resend_firing
from app.ingest.problems import IngestError, Problem
from app.scan import scan
from app.service.metrics import Metrics
from app.service.settings import Settings
from app.store import logdirs as stored_logdirs
from app.store import runs as stored_runs
from app.store.db import Store, StoreError, unavailable
from app.updates import analyze_apart, check_liveness

log = logging.getLogger("losswatch.background")

TICK = 1.0  # seconds between delivery rounds when nothing wakes the loop
# Seconds between analysis rounds: a run that has waited the analysis interval is analysed
# within about 1.5 s of its first deferred answer, before a client reads its alerts (2 s).
ANALYSIS_TICK = 0.5
LIVENESS_EVERY = 5.0  # seconds between staleness checks of the quiet runs
STOP_GRACE = 10.0  # seconds a loop may take to finish its step on shutdown
ANALYSED_PER_BATCH = 32  # deferred analyses applied per transaction (one lock statement, one alert read)
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
    def __init__(
        self, store: Store, settings: Settings, metrics: Metrics, client: httpx.Client,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store, self.settings, self.metrics, self.client, self.clock = store, settings, metrics, client, clock
        self._next_liveness = 0.0
        self.delivery = DeliveryConfig(timeout=settings.webhook_timeout, lease=settings.delivery_lease,
                                       external_url=settings.external_url)
        self._resent_at = float("-inf")  # when firing alerts last went to Alertmanager
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._stopping = threading.Event()

    def wake(self) -> None:
        """Run an analysis round soon (a logdir was just registered); callable from any thread."""
        self._loop.call_soon_threadsafe(self._wake.set)

    async def run(self) -> None:
        """Both loops until cancelled; then let each finish its step (bounded) and return."""
        wakes = [self._wake, asyncio.Event()]
        loops = [
            asyncio.create_task(self._repeat("analysis", self.analysis_round, wakes[0], ANALYSIS_TICK)),
            asyncio.create_task(self._repeat("delivery", self.delivery_round, wakes[1], TICK)),
        ]
        try:
            await asyncio.wait(loops)  # unlike gather, being cancelled leaves the loops running
        except asyncio.CancelledError:
            self._stopping.set()
            for wake in wakes:
                wake.set()
            _, late = await asyncio.wait(loops, timeout=STOP_GRACE)
            for task in late:
                task.cancel()
            raise

    async def _repeat(self, name: str, work: Callable[[], None], wake: asyncio.Event, tick: float) -> None:
        failing = False
        while not self._stopping.is_set():
            failing = await asyncio.to_thread(self._guarded, name, work, failing)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout=tick)
            wake.clear()

    def _guarded(self, name: str, work: Callable[[], None], failing: bool) -> bool:
        """Run one round; returns whether it failed for want of the database.  An outage is
        logged once when it starts and once when it ends, not every tick; any other failure
        is logged with its traceback.  Either way the next round comes."""
        try:
            work()
        except (sa.exc.SQLAlchemyError, StoreError) as e:
            if not unavailable(e):
                log.exception("background round failed", extra={"loop": name})
                return False
            if not failing:
                log.warning("database unavailable: retrying every tick", extra={"loop": name, "error": _first_line(e)})
            return True
        except Exception:  # one bad round must not stop the next: logged, with its traceback
            log.exception("background round failed", extra={"loop": name})
            return False
        if failing:
            log.info("database available again", extra={"loop": name})
        return False

    def analysis_round(self) -> None:
        self.poll_logdirs()
        self.analyse_deferred()
        self.check_liveness()

    def check_liveness(self) -> None:
        """Judge the quiet runs for staleness, every `LIVENESS_EVERY` seconds: a run that
        stops posting fires with nothing arriving to trigger an analysis."""
        now = self.clock()
        if now < self._next_liveness:
            return
        self._next_liveness = now + LIVENESS_EVERY
        changes = check_liveness(self.store, self.settings.analysis, self.settings.webhooks, now)
        if changes:
            log.info("liveness changes", extra={"changes": [(r.event.record.run, r.event.change.value) for r in changes]})

    def delivery_round(self) -> None:
        report = deliver_due(self.store, self.client, self.delivery, stopping=self._stopping.is_set)
        if time.monotonic() - self._resent_at >= self.settings.alertmanager_resend:
            self._resent_at = time.monotonic()
            again = resend_firing(self.store, self.client, self.settings.webhooks, self.delivery,
                                  budget=self.settings.alertmanager_resend)
            report = DeliveryReport(report.delivered, report.failed + again.failed)
        if report.failed:
            self.metrics.webhook_failures.inc(len(report.failed))
            log.warning("webhook deliveries failed", extra={"failed": report.failed})

    def poll_logdirs(self) -> None:
        now = time.time()
        with self.store.write() as conn:
            due = stored_logdirs.claim_due(conn, now, self.settings.poll_interval)
            watched = stored_logdirs.list_logdirs(conn) if due else []
        for logdir in due:
            if self._stopping.is_set():
                return
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
        """Analyse the runs whose analysis waits, a batch at a time, each batch claimed first
        so that the other workers' loops leave it to this one (see `claim_dirty_runs`)."""
        while not self._stopping.is_set():
            now = self.clock()
            with self.store.write() as conn:
                claimed = stored_runs.claim_dirty_runs(conn, now - self.settings.analysis_interval, now, ANALYSED_PER_BATCH)
            for run, done in analyze_apart(self.store, claimed, self.settings.analysis, self.settings.webhooks, self.clock):
                if done.error is not None:
                    log.warning("analysis failed", extra={"source": run.source, "run": run.name, "error": done.error})
            if len(claimed) < ANALYSED_PER_BATCH:
                return


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__

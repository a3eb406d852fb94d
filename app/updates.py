"""Bringing a stored run up to date: store what was read, re-analyse, move the alerts.

One code path for every way points arrive (`losswatch scan`, the service's ingest
endpoints, its logdir poller and its deferred analysis).  `store_points`, `apply` and
`reassess` run inside the caller's transaction, which holds the run's lock; `assess` only
reads, and `analyze_now` runs the two phases in transactions of its own."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from sqlalchemy.engine import Connection

from analyzers.config import AnalysisConfig
from app import incremental
from app.alerts.lifecycle import Event, evaluate
from app.analysis import Alert, AnalysisFailed
from app.ingest.logdir import RunState
from app.ingest.points import Points
from app.ingest.restarts import Rollback
from app.store import alerts as stored_alerts
from app.store import runs as stored_runs
from app.store.db import Store
from app.store.runs import StoredRun
from app.store.schema import runs


@dataclass(frozen=True)
class Reported:
    """A change to tell someone about, and where its run was found."""

    source: str
    event: Event
    id: int | None = None  # the change's row in alert_events


def store_points(
    conn: Connection,
    run: StoredRun,
    points: Points,
    segment: np.ndarray,
    rollbacks: tuple[Rollback, ...],
    state: RunState,
    now: float,
) -> StoredRun:
    """Append points and rollbacks and the run's new state; returns the run as it now is."""
    stored_runs.append_points(conn, run.id, points, segment)
    stored_runs.add_rollbacks(conn, run.id, rollbacks)
    last_step = run.last_step
    if len(points):
        newest = int(points.step.max())
        last_step = newest if last_step is None else max(last_step, newest)
    updated = replace(run, state=state, points=run.points + len(points), last_step=last_step, updated_at=now)
    stored_runs.save_run(conn, run, state, updated.points, last_step, now)
    return updated


@dataclass(frozen=True)
class Assessment:
    """The alerts of a run as it stood with `points` points stored, or why the analysis
    failed (`error`): then the run's alerts stay as they were."""

    points: int
    last_step: int | None
    current: list[Alert]
    error: str | None = None
    health: dict | None = None  # the run's health summary (analyzers/health.py)
    stream: incremental.Advance | None = None  # the streaming state it reached, saved when applied
    vanishing: frozenset[str] | None = None  # alerts whose absence means "no longer seen" (None: any)


@dataclass(frozen=True)
class Applied:
    """What applying an assessment changed, and the analysis error recorded on the run."""

    changes: list[Reported]
    error: str | None = None


def assess(conn: Connection, run: StoredRun, config: AnalysisConfig) -> Assessment:
    """Feed the writes stored since the run's last analysis to its streaming state (only
    those are read).  Reads only: the service runs it outside the write lock, so a slow
    analysis never holds up other runs' appends."""
    run = stored_runs.get_run(conn, run.id)  # the row and the points from one snapshot
    try:
        done = incremental.advance(conn, run, config)
    except AnalysisFailed as e:
        return Assessment(run.points, run.last_step, [], error=e.reason)
    return Assessment(run.points, run.last_step, done.alerts, health=done.health.to_dict(), stream=done.advance,
                      vanishing=done.vanishing)


def apply(conn: Connection, run: StoredRun, assessment: Assessment, webhooks: Sequence[str], now: float) -> Applied:
    """Move the run's alerts along by an assessment and queue their deliveries (not for
    silenced alerts) and returns the changes to report.  `run` is the locked row.  An
    assessment older than the last one applied is dropped (two analyses of a run can finish
    out of order); one that missed points stored since leaves the run waiting for the next
    analysis.  A failed analysis is recorded on the run (the API and UI show it) and stops
    waiting: the next points stored try again."""
    if run.analyzed_points is not None and assessment.points < run.analyzed_points:
        return Applied([])
    done = {"analyzed_at": now, "analysis_error": assessment.error}
    if assessment.points >= run.points:
        done["dirty_since"] = None
    if assessment.error is not None:
        conn.execute(runs.update().where(runs.c.id == run.id).values(**done))
        return Applied([], assessment.error)
    if assessment.stream is not None and not incremental.save(conn, run.id, assessment.stream):
        return Applied([])  # another analysis of the run was applied meanwhile: the run waits for the next
    records, events = evaluate(
        stored_alerts.load_alerts(conn, run.id), assessment.current, assessment.last_step, now, assessment.vanishing
    )
    stored_alerts.save_alerts(conn, run.id, records)
    reported = list(zip(stored_alerts.add_events(conn, events, now), events))
    quiet = stored_alerts.silenced_ids(conn, [e.record.id for _, e in reported])
    stored_alerts.enqueue(conn, [i for i, e in reported if e.record.id not in quiet], list(webhooks), now)
    done["health"] = assessment.health
    conn.execute(runs.update().where(runs.c.id == run.id).values(analyzed_points=assessment.points, **done))
    return Applied([Reported(run.source, e, i) for i, e in reported])


def reassess(conn: Connection, run: StoredRun, config: AnalysisConfig, webhooks: Sequence[str], now: float) -> Applied:
    """Analyse and apply in the caller's one transaction (a scan: crash-safe as a whole)."""
    return apply(conn, run, assess(conn, run, config), webhooks, now)


def analyze_now(store: Store, run: StoredRun, config: AnalysisConfig, webhooks: Sequence[str], now: float) -> Applied:
    """Analyse outside the write lock, then apply under the run's lock (the service)."""
    with store.read() as conn:
        assessment = assess(conn, run, config)
    with store.write() as conn:
        locked = stored_runs.lock_run(conn, run.source, run.name, now)
        return apply(conn, locked, assessment, webhooks, now)


def mark_dirty(conn: Connection, run: StoredRun, now: float) -> None:
    """New points wait for the deferred analysis (the service does this for busy runs)."""
    conn.execute(
        runs.update().where(runs.c.id == run.id, runs.c.dirty_since.is_(None)).values(dirty_since=now)
    )


def due_for_analysis(run: StoredRun, interval: float, now: float) -> bool:
    """Whether the run (as locked) may be analysed now: not analysed in the last `interval` s."""
    return run.analyzed_at is None or now - run.analyzed_at >= interval

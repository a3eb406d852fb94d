"""Bringing a stored run up to date: store what was read, re-analyse, move the alerts.

One code path for every way points arrive (`losswatch scan`, the service's ingest
endpoints, its logdir poller and its deferred analysis).  Everything here runs inside the
caller's transaction, which holds the run's lock."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sqlalchemy.engine import Connection

from analyzers.config import AnalysisConfig
from app.alerts.lifecycle import Change, Event, evaluate
from app.analysis import analyze_writes
from app.ingest.logdir import RunState
from app.ingest.points import Points
from app.ingest.restarts import Rollback
from app.store import alerts as stored_alerts
from app.store import runs as stored_runs
from app.store.runs import StoredRun
from app.store.schema import runs


@dataclass(frozen=True)
class Reported:
    """A change to tell someone about, and where its run was found."""

    source: str
    event: Event


def store_points(
    conn: Connection,
    run: StoredRun,
    points: Points,
    segment: np.ndarray,
    rollbacks: tuple[Rollback, ...],
    state: RunState,
    now: float,
) -> int | None:
    """Append points and rollbacks and the run's new state; returns the run's last step."""
    stored_runs.append_points(conn, run.id, points, segment)
    stored_runs.add_rollbacks(conn, run.id, rollbacks)
    last_step = run.last_step
    if len(points):
        newest = int(points.step.max())
        last_step = newest if last_step is None else max(last_step, newest)
    stored_runs.save_run(conn, run, state, run.points + len(points), last_step, now)
    return last_step


def reassess(
    conn: Connection,
    run: StoredRun,
    last_step: int | None,
    config: AnalysisConfig,
    webhooks: Sequence[str],
    now: float,
) -> list[Reported]:
    """Analyse the whole stored run, move its alerts along, queue their deliveries (not for
    silenced alerts); returns the changes worth reporting (all but starting to wait in
    pending)."""
    writes = stored_runs.load_writes(conn, run.id)
    resumes = stored_runs.load_resumes(conn, run.id)
    current = analyze_writes(run.source, run.name, writes, resumes, config)
    records, events = evaluate(stored_alerts.load_alerts(conn, run.id), current, last_step, now)
    stored_alerts.save_alerts(conn, run.id, records)
    ids = stored_alerts.add_events(conn, events, now)
    reported = [(i, e) for i, e in zip(ids, events) if e.change is not Change.PENDING]
    quiet = stored_alerts.silenced_ids(conn, [e.record.id for _, e in reported])
    stored_alerts.enqueue(conn, [i for i, e in reported if e.record.id not in quiet], list(webhooks), now)
    conn.execute(runs.update().where(runs.c.id == run.id).values(analyzed_at=now, dirty_since=None))
    return [Reported(run.source, e) for _, e in reported]


def mark_dirty(conn: Connection, run: StoredRun, now: float) -> None:
    """New points wait for the deferred analysis (the service does this for busy runs)."""
    conn.execute(
        runs.update().where(runs.c.id == run.id, runs.c.dirty_since.is_(None)).values(dirty_since=now)
    )


def due_for_analysis(run: StoredRun, interval: float, now: float) -> bool:
    """Whether the run (as locked) may be analysed now: not analysed in the last `interval` s."""
    return run.analyzed_at is None or now - run.analyzed_at >= interval

"""The update path's two phases: an analysis made outside the write lock is applied under
the run's lock, never out of order, and one that missed new points leaves the run waiting."""

from __future__ import annotations

import numpy as np
import sqlalchemy as sa

from analyzers.config import AnalysisConfig
from app.ingest.logdir import RunState
from app.ingest.points import Points
from app.store import runs as stored_runs
from app.store.schema import runs
from app.updates import apply, assess, store_points


def add(store, first: int, values: np.ndarray):
    steps = np.arange(first, first + len(values), dtype=np.int64)
    points = Points(("loss",), np.zeros(len(values), np.int32), steps, np.full(len(values), np.nan), values)
    with store.write() as conn:
        run = stored_runs.lock_run(conn, "http", "r", 1.0)
        updated = store_points(conn, run, points, np.zeros(len(values), np.int32), (), RunState(), 1.0, dirty=True)
    return updated


def state(store) -> tuple:
    with store.read() as conn:
        row = conn.execute(sa.select(runs.c.analyzed_points, runs.c.dirty_since)).one()
        kinds = sorted(r[0] for r in conn.execute(sa.text("SELECT kind FROM alerts WHERE state != 'resolved'")))
    return row.analyzed_points, row.dirty_since is not None, kinds


def test_an_older_analysis_finishing_last_is_dropped(store):
    clean = (2 + 3 * np.exp(-np.arange(1000) / 200)) * (1 + np.random.default_rng(0).standard_normal(1000) * 0.01)
    run = add(store, 0, clean)
    with store.read() as conn:
        older = assess(conn, run, AnalysisConfig())
    broken = np.full(100, np.nan)
    run = add(store, 1000, broken)
    with store.read() as conn:
        newer = assess(conn, run, AnalysisConfig())
    with store.write() as conn:
        apply(conn, stored_runs.lock_run(conn, "http", "r", 2.0), newer, [], 2.0)
    assert state(store) == (1100, False, ["nonfinite"])
    with store.write() as conn:
        assert apply(conn, stored_runs.lock_run(conn, "http", "r", 3.0), older, [], 3.0).changes == []
    assert state(store) == (1100, False, ["nonfinite"])  # the NaN alert was not undone


def test_an_analysis_that_missed_new_points_leaves_the_run_waiting(store):
    run = add(store, 0, 2 + np.random.default_rng(1).standard_normal(500) * 0.01)
    with store.read() as conn:
        early = assess(conn, run, AnalysisConfig())
    add(store, 500, np.full(10, 2.0))
    with store.write() as conn:
        apply(conn, stored_runs.lock_run(conn, "http", "r", 2.0), early, [], 2.0)
    analyzed, waiting, _ = state(store)
    assert (analyzed, waiting) == (500, True)

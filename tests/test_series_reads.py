"""Series reads walk a tag's chunks one at a time and downsample as they go: the current
view they yield, window by window, is exactly the documented rule applied to every write,
and a read never needs the whole tag in memory."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzers.series import current_view
from app.downsample import MinMaxSketch, minmax_indices
from app.ingest.points import Points
from app.ingest.restarts import Rollback
from app.ingest.textlogs import MAX_STEP
from app.store import runs as stored_runs
from app.store.db import open_store
from tests.service_helpers import service


def reference_view(batches, resume_to, start, end):
    """The rule of the README, one write at a time: a resume to s opening segment k hides
    every write of a segment below k at step >= s; of a step's unhidden writes the latest
    wins."""
    latest = {}
    for steps, values, segment in batches:
        for s, v in zip(steps, values):
            hidden = any(k > segment and s >= to for k, to in resume_to.items())
            if not hidden:
                latest[s] = v
    return {s: v for s, v in latest.items() if (start is None or s >= start) and (end is None or s <= end)}


def store_batches(conn, run_id, batches):
    for steps, values, segment in batches:
        n = len(steps)
        points = Points(("loss",), np.zeros(n, np.int32), np.array(steps, np.int64), np.full(n, np.nan), np.array(values, np.float64))
        stored_runs.append_points(conn, run_id, points, np.full(n, segment, np.int32))


def streamed(conn, run_id, start, end, resume_to):
    spans = stored_runs.tag_chunks(conn, run_id, "loss", start, end)
    out = {}
    for step, value in stored_runs.current_points(conn, spans, start, end, resume_to):
        assert not set(step.tolist()) & set(out), "a step was yielded twice"
        out.update(zip(step.tolist(), value.tolist()))
    return out


RUN_NUMBERS = itertools.count()
batch = st.tuples(st.lists(st.integers(0, 60), min_size=1, max_size=25), st.integers(0, 3))


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    store = open_store(f"sqlite:///{tmp_path_factory.mktemp('series') / 'store.db'}")
    yield store
    store.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    raw=st.lists(batch, min_size=1, max_size=8),
    resumes=st.dictionaries(st.integers(1, 4), st.integers(0, 60), max_size=3),
    window=st.tuples(st.none() | st.integers(0, 60), st.none() | st.integers(0, 60)),
)
def test_the_streamed_current_view_is_the_rule_applied_to_every_write(small_store, monkeypatch, raw, resumes, window):
    monkeypatch.setattr(stored_runs, "CHUNK_POINTS", 7)  # many chunks, some grown in place
    monkeypatch.setattr(stored_runs, "SMALL_CHUNK", 4)
    monkeypatch.setattr(stored_runs, "SERIES_BATCH", 2)
    segment, batches = 0, []
    for i, (steps, bump) in enumerate(raw):
        segment += bump  # segments only grow, in write order
        batches.append((steps, [float(i * 100 + j) for j in range(len(steps))], segment))
    start, end = window
    with small_store.write() as conn:
        run = stored_runs.lock_run(conn, "t", f"r{next(RUN_NUMBERS)}", 0.0)  # a fresh run per example
        store_batches(conn, run.id, batches)
    with small_store.read() as conn:
        got = streamed(conn, run.id, start, end, resumes)
    assert got == reference_view(batches, resumes, start, end)


def test_a_window_reads_only_the_chunks_that_overlap_it(small_store, monkeypatch):
    monkeypatch.setattr(stored_runs, "CHUNK_POINTS", 100)
    with small_store.write() as conn:
        run = stored_runs.lock_run(conn, "t", "windowed", 0.0)
        store_batches(conn, run.id, [(list(range(1000)), [1.0] * 1000, 0)])
    with small_store.read() as conn:
        spans = stored_runs.tag_chunks(conn, run.id, "loss", 250, 420)
        assert [(s.first_step, s.last_step) for s in spans] == [(200, 299), (300, 399), (400, 499)]
        assert stored_runs.tag_chunks(conn, run.id, "nope", None, None) is None


@settings(max_examples=100, deadline=None)
@given(
    values=st.lists(st.one_of(st.floats(-1e6, 1e6), st.sampled_from([np.nan, np.inf])), min_size=30, max_size=300),
    pieces=st.integers(1, 9),
    max_points=st.integers(8, 40),
    seed=st.integers(0, 1000),
)
def test_the_sketch_fed_in_pieces_in_any_order_keeps_what_it_keeps_fed_whole(values, pieces, max_points, seed):
    value = np.array(values)
    step = np.arange(len(value)) * 3
    whole = minmax_indices(step, value, max_points)
    sketch = MinMaxSketch(int(step[0]), int(step[-1]), max_points)
    order = np.random.default_rng(seed).permutation(len(value))
    for part in np.array_split(order, pieces):
        sketch.add(step[part], step[part], value[part])
    key, kept_step, kept_value = sketch.result()
    assert sketch.count == len(value)
    assert kept_step.tolist() == step[whole].tolist()
    assert np.array_equal(kept_value, value[whole], equal_nan=True)


def test_series_over_rollbacks_and_late_writes_through_the_api(store_url, tmp_path):
    with service(store_url) as client:
        store = client.app.state.store
        with store.write() as conn:
            run = stored_runs.lock_run(conn, "http", "resumed", 0.0)
            store_batches(conn, run.id, [
                (list(range(0, 900)), [2.0] * 900, 0),
                (list(range(500, 1000)), [1.0] * 500, 1),  # resumed at 500
                ([100], [9.0], 1),  # a late rewrite of step 100
            ])
            stored_runs.add_rollbacks(conn, run.id, (Rollback(899, 500, "request", None, 1, False),))
        r = client.get("/v1/runs/resumed/series", params={"tag": "loss", "max_points": 100_000})
        assert r.status_code == 200
        points = dict(r.json()["points"])
        assert r.json()["total"] == 1000 and len(points) == 1000
        assert points[100] == 9.0 and points[499] == 2.0 and points[500] == 1.0 and points[999] == 1.0
        window = client.get("/v1/runs/resumed/series", params={"tag": "loss", "start": 450, "end": 549}).json()
        assert window["total"] == 100 and [p[1] for p in window["points"]] == [2.0] * 50 + [1.0] * 50


def test_a_rollback_that_hides_every_point_of_a_tag_gives_an_empty_series(store_url):
    with service(store_url) as client:
        store = client.app.state.store
        with store.write() as conn:
            run = stored_runs.lock_run(conn, "http", "hidden", 0.0)
            store_batches(conn, run.id, [([5, 6], [1.0, 1.0], 0)])
            stored_runs.add_rollbacks(conn, run.id, (Rollback(6, 0, "request", None, 1, False),))
        r = client.get("/v1/runs/hidden/series", params={"tag": "loss"})
        assert r.status_code == 200
        assert (r.json()["total"], r.json()["points"]) == (0, [])


def test_steps_at_the_int64_limit_read_back_without_a_server_error(store_url):
    """Steps past MAX_STEP are refused on the way in; one stored before that still reads."""
    with service(store_url) as client:
        with client.app.state.store.write() as conn:
            run = stored_runs.lock_run(conn, "http", "huge", 0.0)
            store_batches(conn, run.id, [([0, 2**63 - 1], [1.0, 2.0], 0)])
        r = client.get("/v1/runs/huge/series", params={"tag": "loss"})
        assert r.status_code == 200
        assert r.json()["points"] == [[0, 1.0], [2**63 - 1, 2.0]]


def test_series_bounds_are_checked(store_url):
    with service(store_url) as client:
        client.post("/v1/runs/b/points", json=[{"step": 1, "loss": 1.0}])
        too_far = client.get("/v1/runs/b/series", params={"tag": "loss", "end": MAX_STEP + 1})
        assert too_far.status_code == 422
        assert too_far.json()["error"]["details"][0]["where"] == "query.end"
        assert client.get("/v1/runs/b/series", params={"tag": "loss", "end": MAX_STEP}).status_code == 200
        assert client.get("/v1/runs/b/series", params={"tag": "loss", "start": -MAX_STEP - 1}).status_code == 422
        below_zero = client.get("/v1/runs/b/series", params={"tag": "loss", "start": -50, "end": 10})  # a zoomed chart
        assert below_zero.status_code == 200 and below_zero.json()["points"] == [[1, 1.0]]
        backwards = client.get("/v1/runs/b/series", params={"tag": "loss", "start": 5, "end": 4})
        assert backwards.status_code == 422
        assert backwards.json()["error"]["message"] == "start (5) is after end (4)"



def test_two_rollbacks_hide_what_the_lower_one_hides_in_the_series_and_in_analysis(store_url):
    """A tag not rewritten between two resumes (to 800, then to 500) must lose steps 500-799
    too: the current view judged only the resume right after the tag's last segment."""
    with service(store_url) as client:
        client.post("/v1/runs/twice/points", json=[{"step": s, "loss": 2.0} for s in range(1000)])
        assert client.post("/v1/runs/twice/rollback", json={"to_step": 800}).status_code == 200
        assert client.post("/v1/runs/twice/rollback", json={"to_step": 500}).status_code == 200
        series = client.get("/v1/runs/twice/series", params={"tag": "loss", "max_points": 100_000}).json()
        assert series["total"] == 500 and series["points"][-1][0] == 499
    step, segment = np.arange(1000), np.zeros(1000, np.int32)
    kept = current_view(np.zeros(1000, np.int8), step, segment, {1: 800, 2: 500})
    assert kept.sum() == 500 and step[kept].max() == 499

"""Series reads answered from chunk summaries (app/store/envelope.py) against the read of
every point they replace: the same points where bucket edges fall on block edges, and
otherwise the same drawing (each stretch's extremes within a block's width, ends, spikes and
non-finite markers kept), with few chunks decompressed."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import sqlalchemy as sa
from alembic import command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.downsample import MinMaxSketch
from app.ingest.points import Points
from app.ingest.restarts import Rollback
from app.store import chunks, schema, summaries
from app.store import runs as stored_runs
from app.store.db import _alembic_config, open_store
from app.store.envelope import downsampled_series

RUN_NUMBERS = itertools.count()


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    store = open_store(f"sqlite:///{tmp_path_factory.mktemp('envelope') / 'store.db'}")
    yield store
    store.close()


def store_series(store, step, value, segment=0, run_name=None):
    """One 'loss' write per step (wall time: 1000 + step); returns the run id."""
    with store.write() as conn:
        run = stored_runs.lock_run(conn, "t", run_name or f"r{next(RUN_NUMBERS)}", 0.0)
        append(conn, run.id, step, value, segment)
    return run.id


def append(conn, run_id, step, value, segment):
    n = len(step)
    step = np.asarray(step, np.int64)
    points = Points(("loss",), np.zeros(n, np.int32), step, 1000.0 + step, np.asarray(value, np.float64))
    stored_runs.append_points(conn, run_id, points, np.full(n, segment, np.int32))


def both_reads(store, run_id, start, end, max_points, resume_to=None):
    """(the read from summaries, the sketch of a read of every point as before them)."""
    resume_to = resume_to or {}
    with store.read() as conn:
        spans = stored_runs.tag_chunks(conn, run_id, "loss", start, end)
        got = downsampled_series(conn, spans, start, end, resume_to, max_points)
        first, last = min(s.first_step for s in spans), max(s.last_step for s in spans)
        full = MinMaxSketch(first if start is None else max(first, start), last if end is None else min(last, end), max_points)
        for step, value, wall in stored_runs.current_points(conn, spans, start, end, resume_to, wall_time=True):
            full.add(step, step, value, wall)
    return got, full


def noisy_loss(n, seed, spikes=(), nans=()):
    """A decaying, noisy loss with +50 spikes and NaN stretches ((start, length) pairs)."""
    rng = np.random.default_rng(seed)
    value = 3.0 * np.exp(-np.arange(n) / (n / 3)) + 0.05 * rng.standard_normal(n)
    for at in spikes:
        value[at] += 50.0
    for at, length in nans:
        value[at : at + length] = np.nan
    return value


def assert_identical(got, full):
    a, b = got.result_with_extra(), full.result_with_extra()
    assert a[1].tolist() == b[1].tolist()
    assert np.array_equal(a[2], b[2], equal_nan=True) and np.array_equal(a[3], b[3], equal_nan=True)
    assert (got.count, got.nonfinite) == (full.count, full.nonfinite)


def test_with_bucket_edges_on_block_edges_the_summaries_give_every_point_a_full_read_keeps(small_store, monkeypatch):
    monkeypatch.setattr(stored_runs, "CHUNK_POINTS", 1024)  # 4 blocks of 256
    n = 100 * 256 + 1  # 202 points: 100 fine buckets of exactly one block each
    value = noisy_loss(n, 1, spikes=(300, 301, 5000, 25_599), nans=((7000, 300), (12_345, 1), (20_000, 2)))
    value[9000], value[9001] = np.inf, -np.inf
    run_id = store_series(small_store, np.arange(n), value)
    got, full = both_reads(small_store, run_id, None, None, 202)
    assert (got.decompressed, got.summarized) == (0, 26)  # 25 full chunks and the last point's
    assert_identical(got.sketch, full)
    kept = set(got.sketch.result()[1].tolist())
    assert {5000, 25_599, 12_345, 9000} <= kept  # spikes, a lone NaN, the first of two infinities


def test_a_window_decompresses_the_chunks_at_its_edges_and_those_too_sparse(small_store, monkeypatch):
    monkeypatch.setattr(stored_runs, "CHUNK_POINTS", 1000)
    run_id = store_series(small_store, np.arange(100_000), noisy_loss(100_000, 2))
    got, _ = both_reads(small_store, run_id, 10_500, 60_499, 200)
    assert (got.decompressed, got.summarized) == (2, 49)
    zoomed, full = both_reads(small_store, run_id, 10_500, 15_499, 200)  # 50 steps a bucket: 256-write blocks span 6
    assert (zoomed.decompressed, zoomed.summarized) == (6, 0)
    assert_identical(zoomed.sketch, full)
    few, full = both_reads(small_store, run_id, 0, 149, 200)  # every point is kept
    assert (few.decompressed, few.summarized) == (1, 0)
    assert_identical(few.sketch, full)


def test_rewritten_and_hidden_chunks_are_read_in_full(small_store, monkeypatch):
    monkeypatch.setattr(stored_runs, "CHUNK_POINTS", 1000)
    monkeypatch.setattr(stored_runs, "SMALL_CHUNK", 0)  # every append its own chunk
    with small_store.write() as conn:
        run = stored_runs.lock_run(conn, "t", "rewritten", 0.0)
        append(conn, run.id, np.arange(20_000), noisy_loss(20_000, 3), 0)
        append(conn, run.id, [4500], [99.0], 0)  # a late write of step 4500: chunks 4 and 20 overlap
        append(conn, run.id, np.arange(15_000, 16_000), np.full(1000, 7.0), 1)  # resumed at 15000
        stored_runs.add_rollbacks(conn, run.id, (Rollback(19_999, 15_000, "request", None, 1, False),))
    resume_to = {1: 15_000}
    got, full = both_reads(small_store, run.id, None, None, 100, resume_to)
    # Decompressed: chunk 4 and the late write's chunk (overlapping), chunks 15..19 (hidden
    # from 15000 on) and chunk 20 (the resumed writes, which overlap chunk 15).
    assert (got.decompressed, got.summarized) == (8, 14)
    a = got.sketch.result()
    assert 4500 in a[1].tolist() and a[2][a[1].tolist().index(4500)] == 99.0
    assert got.sketch.count == full.count == 16_000
    assert a[2].max() == 99.0 and not np.any((a[1] >= 15_000) & (a[2] != 7.0))


def test_nonfinite_points_few_enough_to_keep_each_are_read_from_their_chunks(small_store, monkeypatch):
    monkeypatch.setattr(stored_runs, "CHUNK_POINTS", 1000)
    run_id = store_series(small_store, np.arange(50_000), noisy_loss(50_000, 4, nans=((1234, 3), (40_100, 30))))
    got, full = both_reads(small_store, run_id, None, None, 300)  # up to 75 non-finite points are each kept
    assert (got.decompressed, got.summarized) == (2, 48)
    for sketch in (got.sketch, full):
        _, step, value = sketch.result()
        assert step[~np.isfinite(value)].tolist() == [1234, 1235, 1236, *range(40_100, 40_130)]


def test_a_run_of_one_chunk_per_step_range_is_read_from_summaries_on_postgresql_too(store_url, monkeypatch):
    monkeypatch.setattr(stored_runs, "CHUNK_POINTS", 1024)
    store = open_store(store_url)
    n = 100 * 256 + 1
    run_id = store_series(store, np.arange(n), noisy_loss(n, 5, spikes=(777,), nans=((3000, 200),)))
    got, full = both_reads(store, run_id, None, None, 202)
    assert got.decompressed == 0
    assert_identical(got.sketch, full)
    store.close()


series_case = st.fixed_dictionaries({
    "n": st.integers(2_000, 12_000),
    "stride": st.sampled_from([1, 3, 10]),
    "chunk": st.sampled_from([97, 300, 1024]),
    "block": st.sampled_from([16, 64]),
    "max_points": st.integers(8, 120),
    "spikes": st.lists(st.integers(0, 11_999), max_size=8),
    "nans": st.lists(st.tuples(st.integers(0, 11_999), st.integers(1, 400)), max_size=4),
    "infs": st.lists(st.integers(0, 11_999), max_size=4),
    "window": st.tuples(st.none() | st.floats(0, 0.3), st.none() | st.floats(0.6, 1)),
    "seed": st.integers(0, 100),
})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=series_case)
def test_the_summarised_read_draws_what_a_full_read_draws(small_store, monkeypatch, case):
    """Each stretch's kept extremes lie between the full read's and those of it with its
    neighbours; ends, the series' extremes, spikes and non-finite markers are kept."""
    monkeypatch.setattr(stored_runs, "CHUNK_POINTS", case["chunk"])
    monkeypatch.setattr(summaries, "BLOCK", case["block"])
    n = case["n"]
    value = noisy_loss(n, case["seed"], [s for s in case["spikes"] if s < n], [(a, b) for a, b in case["nans"] if a < n])
    value[[i for i in case["infs"] if i < n]] = np.inf
    step = np.arange(n) * case["stride"]
    run_id = store_series(small_store, step, value)
    lo, hi = (None if w is None else int(w * step[-1]) for w in case["window"])
    if lo is not None and hi is not None and lo > hi:
        lo, hi = hi, lo
    got, full = both_reads(small_store, run_id, lo, hi, case["max_points"])
    spikes = [i for i in case["spikes"] if i < n]
    block = [(i // case["chunk"], i % case["chunk"] // case["block"]) for i in spikes]
    alone = {i * case["stride"] for i, b in zip(spikes, block) if block.count(b) == 1 and np.isfinite(value[i])}
    assert_draws_the_same(got.sketch, full, step, value, alone)


def test_a_nonfinite_stretch_across_a_bucket_edge_inside_a_block_marks_both_buckets(small_store, monkeypatch):
    monkeypatch.setattr(stored_runs, "CHUNK_POINTS", 1024)
    step = np.arange(30_000)  # 60 points: 29 buckets of 1034.4 steps; 5173 starts the sixth
    value = noisy_loss(30_000, 6, nans=((5170, 2), (5173, 1), (20_000, 100)))
    run_id = store_series(small_store, step, value)
    got, full = both_reads(small_store, run_id, None, None, 60)
    assert got.summarized == 30 and got.sketch.bucket(np.array([5171, 5173])).tolist() == [4, 5]
    assert_draws_the_same(got.sketch, full, step, value, set())
    kept = got.sketch.result()[1].tolist()
    assert 5170 in kept and 5173 in kept


def test_a_nonfinite_stretch_to_the_end_keeps_the_last_buckets_first_marker_and_the_end(small_store, monkeypatch):
    """Found by the property above: the last chunk's one block straddles the last two
    buckets, and its last non-finite point is the series' end, so a summarised read had one
    point where a full read keeps two (the end, and the bucket's first NaN)."""
    monkeypatch.setattr(stored_runs, "CHUNK_POINTS", 97)
    monkeypatch.setattr(summaries, "BLOCK", 64)
    value = noisy_loss(2000, 3, nans=((1600, 400),))
    run_id = store_series(small_store, np.arange(2000), value)
    got, full = both_reads(small_store, run_id, None, None, 70)
    assert got.summarized > 0
    assert_draws_the_same(got.sketch, full, np.arange(2000), value, set())
    assert 1941 in got.sketch.result()[1].tolist()


def assert_draws_the_same(sketch, full, step, value, spikes):
    """What a drawing of the summarised read shares with one of the full read."""
    max_points = sketch.max_points
    _, g_step, g_value, g_wall = sketch.result_with_extra()
    _, f_step, f_value, _ = full.result_with_extra()
    assert (sketch.count, sketch.nonfinite) == (full.count, full.nonfinite)
    at = np.searchsorted(step, g_step)
    assert np.array_equal(step[at], g_step) and np.array_equal(value[at], g_value, equal_nan=True)  # real points
    assert np.array_equal(g_wall, 1000.0 + g_step)
    if full.count <= max_points:
        assert g_step.tolist() == f_step.tolist()
        return
    assert (g_step[0], g_step[-1]) == (f_step[0], f_step[-1])
    if np.isfinite(f_value).any():
        for pick in (np.nanargmin, np.nanargmax):  # the series' extremes
            assert g_step[pick(np.where(np.isfinite(g_value), g_value, np.nan))] == f_step[pick(np.where(np.isfinite(f_value), f_value, np.nan))]
    assert spikes & set(f_step.tolist()) <= set(g_step.tolist())  # each the highest of its block
    assert np.count_nonzero(~np.isfinite(g_value)) == np.count_nonzero(~np.isfinite(f_value))
    # The stretches the result keeps extremes of: the budget less the non-finite points it
    # chose (an end that is not finite is counted apart), as MinMaxSketch cuts them.
    kept_nonfinite = len(sketch._kept_nonfinite()[0])
    assert kept_nonfinite == len(full._kept_nonfinite()[0])
    groups = (max_points - kept_nonfinite - 2) // 2

    def group_of(s):
        return sketch.bucket(s) * groups // sketch.buckets

    assert set(group_of(g_step[~np.isfinite(g_value)]).tolist()) == set(group_of(f_step[~np.isfinite(f_value)]).tolist())
    for sign in (1, -1):  # highest, then lowest (as the highest of -value)
        mine, exact = np.full(groups + 2, -np.inf), np.full(groups + 2, -np.inf)
        for s, v, table in ((g_step, g_value, mine), (f_step, f_value, exact)):
            ok = np.isfinite(v)
            np.maximum.at(table, group_of(s[ok]) + 1, sign * v[ok])
        around = np.maximum(np.maximum(mine[:-2], mine[1:-1]), mine[2:])
        assert np.all(mine[1:-1] <= exact[1:-1]) and np.all(exact[1:-1] <= around)


@settings(max_examples=100, deadline=None)
@given(
    values=st.lists(st.one_of(st.floats(-5, 5), st.sampled_from([np.nan, np.inf, -np.inf, 1.0])), min_size=1, max_size=200),
    block=st.integers(1, 40),
)
def test_each_block_summary_is_what_its_points_say(values, block):
    value = np.array(values)
    step, wall = np.arange(len(value)) * 2 - 50, np.arange(len(value)) + 0.5
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(summaries, "BLOCK", block)
        got = summaries.unpack_blocks(summaries.summary_columns(step, np.zeros(len(step), np.int32), wall, value)["blocks"])
    assert len(got) == -(-len(value) // block)
    for row, at in zip(got, range(0, len(value), block)):
        v, s, w = value[at : at + block], step[at : at + block], wall[at : at + block]
        finite, bad = np.flatnonzero(np.isfinite(v)), np.flatnonzero(~np.isfinite(v))
        assert (row["first_step"], row["last_step"], row["count"], row["nonfinite"]) == (s[0], s[-1], len(v), len(bad))
        assert (row["first_wall"], row["last_wall"]) == (w[0], w[-1])
        if len(finite):
            low, high = finite[np.argmin(v[finite])], finite[np.argmax(v[finite])]  # the first of equals
            assert (row["min_step"], row["min_value"], row["min_wall"]) == (s[low], v[low], w[low])
            assert (row["max_step"], row["max_value"], row["max_wall"]) == (s[high], v[high], w[high])
        if len(bad):
            assert (row["nf_step"], row["nf_wall"], row["nf_last_step"], row["nf_last_wall"]) == (s[bad[0]], w[bad[0]], s[bad[-1]], w[bad[-1]])
            assert np.array_equal([row["nf_value"], row["nf_last_value"]], v[[bad[0], bad[-1]]], equal_nan=True)


def test_migration_0012_fills_in_the_summaries_of_stored_chunks(store_url):
    """A store at 0011 with more chunks than one backfill batch: each gets the summary its
    points give, as a chunk written today would."""
    engine = sa.create_engine(store_url)
    config = _alembic_config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "0011")
        conn.execute(sa.text("INSERT INTO runs (id, source, name, state, points, updated_at) VALUES (1, 's', 'r', '{}', 0, 0)"))
        conn.execute(sa.text("INSERT INTO tags (id, run_id, name) VALUES (1, 1, 'loss')"))
        rng = np.random.default_rng(0)
        rows, expected = [], []
        for i in range(450):
            step = np.arange(i * 10, i * 10 + 10) if i != 7 else np.array([75, 72, 80])
            value = rng.standard_normal(len(step))
            if i % 3 == 0:
                value[i % len(step)] = np.nan
            segment, wall = np.full(len(step), i % 4, np.int32), 5.0 + step
            rows.append({"tag_id": 1, "count": len(step), "first_step": int(step.min()), "last_step": int(step.max()),
                         "data": chunks.pack(step, segment, wall, value)})
            expected.append(summaries.summary_columns(step, segment, wall, value))
        conn.execute(sa.text("INSERT INTO chunks (tag_id, count, first_step, last_step, data) "
                             "VALUES (:tag_id, :count, :first_step, :last_step, :data)"), rows)
    engine.dispose()
    store = open_store(store_url)
    with store.read() as conn:
        got = conn.execute(sa.text("SELECT s.ordered, s.min_segment, s.nonfinite, s.blocks FROM chunks c "
                                   "JOIN chunk_summaries s ON s.chunk_id = c.id ORDER BY c.id")).all()
    store.close()
    assert [dict(r._mapping) for r in got] == expected
    assert [r.ordered for r in got].count(0) == 1 and sum(r.nonfinite for r in got) == 150


def test_small_appends_that_grow_a_chunk_keep_its_summary_whole(store_url):
    # a training loop posting a few steps at a time grows its tag's last chunk in place: the
    # chunk's summary is rewritten with it, in the same batch of statements
    store = open_store(store_url)
    try:
        value = noisy_loss(900, seed=7, spikes=(450,), nans=((600, 3),))
        run_id = store_series(store, np.arange(0, 100), value[:100], run_name="grown")
        for a in range(100, 900, 7):
            with store.write() as conn:
                append(conn, run_id, np.arange(a, min(a + 7, 900)), value[a : min(a + 7, 900)], 0)
        with store.read() as conn:
            rows = conn.execute(
                sa.select(schema.chunk_summaries.c.ordered, schema.chunk_summaries.c.min_segment,
                          schema.chunk_summaries.c.nonfinite, schema.chunk_summaries.c.blocks,
                          schema.chunks.c.data, schema.chunks.c.count)
                .join(schema.chunks, schema.chunks.c.id == schema.chunk_summaries.c.chunk_id)
                .join(schema.tags, schema.tags.c.id == schema.chunks.c.tag_id)
                .where(schema.tags.c.run_id == run_id)
            ).all()
        assert len(rows) == 1
        ordered, min_segment, nonfinite, blocks, data, count = rows[0]
        assert count == 900
        assert {"ordered": ordered, "min_segment": min_segment, "nonfinite": nonfinite, "blocks": blocks} == \
            summaries.summary_columns(*chunks.unpack(data, count))
    finally:
        store.close()

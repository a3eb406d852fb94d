"""The chunk format at rest (app/store/chunks.py): parts appended without decompressing
the others read back as the same chunk packed whole, format 1 chunks are still read (and
grown), and a grown chunk's summary is the one its writes give whole."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from app.ingest.points import Points
from app.store import chunks, schema, summaries
from app.store import runs as stored_runs

VALUES = st.one_of(st.floats(-5, 5), st.sampled_from([np.nan, np.inf, -np.inf, 1.0, 0.0, -0.0]))


def columns_of(n: int, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    step = np.cumsum(rng.integers(-2, 5, n)).astype(np.int64)
    value = rng.choice([np.nan, np.inf, 1.0, -0.0, 0.5], n) if seed % 2 else rng.standard_normal(n)
    return step, rng.integers(0, 3, n).astype(np.int32), 1.7e9 + rng.random(n), value


def format_1(step, segment, wall, value) -> bytes:
    """A chunk as stores written before parts hold it: one compressed stream of every point."""
    deltas = np.diff(np.asarray(step, np.int64), prepend=np.int64(0))
    planes = [np.ascontiguousarray(np.asarray(a, dtype).view(np.uint8).reshape(-1, np.dtype(dtype).itemsize).T).tobytes()
              for a, dtype in zip((deltas, segment, wall, value), (np.int64, np.int32, np.float64, np.float64))]
    return b"\x01" + zlib.compress(b"".join(planes), 1)


def grown(sizes: list[int], seed: int) -> tuple[bytes, tuple[np.ndarray, ...]]:
    """A chunk grown by appends of these sizes (packed whole where `append` says so), and
    every write it holds."""
    whole = columns_of(sum(sizes), seed)
    data = b""
    at = 0
    for n in sizes:
        part = [c[at : at + n] for c in whole]
        data = (data and chunks.append(data, *part)) or chunks.pack(*[c[: at + n] for c in whole])
        at += n
    return data, whole


def same(got, expected) -> None:
    for g, e in zip(got, expected):
        assert np.asarray(g, e.dtype).tobytes() == e.tobytes()


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 40), min_size=1, max_size=3 * chunks.MAX_PARTS), seed=st.integers(0, 1000))
def test_a_chunk_grown_by_small_appends_reads_back_as_one_packed_whole(sizes, seed):
    data, whole = grown(sizes, seed)
    count = sum(sizes)
    same(chunks.unpack(data, count), whole)
    same(chunks.unpack(data, count), chunks.unpack(chunks.pack(*whole), count))
    assert len(chunks._spans(data)) <= chunks.MAX_PARTS


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 40), min_size=1, max_size=20), seed=st.integers(0, 1000), data=st.data())
def test_the_writes_past_a_position_are_those_of_the_whole_chunk(sizes, seed, data):
    packed, (step, segment, _, value) = grown(sizes, seed)
    skip = data.draw(st.integers(0, sum(sizes)))
    same(chunks.unpack_series(packed, sum(sizes), skip), (step[skip:], segment[skip:], value[skip:]))


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 300).flatmap(lambda n: st.tuples(
    arrays(np.int64, n, elements=st.integers(-(2**62), 2**62)), arrays(np.int32, n), arrays(np.float64, n), arrays(np.float64, n),
)), st.data())
def test_format_1_chunks_are_still_read(columns, data):
    step, segment, wall, value = columns
    old = format_1(step, segment, wall, value)
    same(chunks.unpack(old, len(step)), columns)
    skip = data.draw(st.integers(0, len(step)))
    same(chunks.unpack_series(old, len(step), skip), (step[skip:], segment[skip:], value[skip:]))
    assert chunks.append(old, step, segment, wall, value) is None  # grown only by packing it whole


def test_an_unknown_format_is_an_error():
    with pytest.raises(ValueError, match="unknown chunk format"):
        chunks.unpack(b"\x07abc", 1)


@settings(max_examples=150, deadline=None)
@given(values=st.lists(VALUES, min_size=2, max_size=120), cuts=st.lists(st.integers(1, 119), max_size=6),
       block=st.integers(1, 40), shuffled=st.booleans(), old_format=st.booleans())
def test_a_grown_summary_is_the_summary_of_the_writes_whole(values, cuts, block, shuffled, old_format):
    """Byte for byte: small appends fold into the raw last block, larger ones (and a summary
    stored before the last block was kept raw) are extended from the blocks unpacked."""
    value = np.array(values)
    n = len(value)
    step = np.arange(n, dtype=np.int64) * 3 - 7
    if shuffled:
        step = np.random.default_rng(n).permutation(step)
    wall, segment = 1000.0 + np.arange(n) / 4, (np.arange(n) % 5).astype(np.int32)[::-1].copy()
    bounds = [0, *sorted({c for c in cuts if c < n}), n]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(summaries, "BLOCK", block)
        summary = summaries.summary_columns(step[: bounds[1]], segment[: bounds[1]], wall[: bounds[1]], value[: bounds[1]])
        if old_format:
            summary["blocks"] = b"\x01" + zlib.compress(summaries.unpack_blocks(summary["blocks"]).tobytes(), 1)
        for a, b in zip(bounds[1:], bounds[2:]):
            summary = summaries.grown_columns(summary, step[a:b], segment[a:b], wall[a:b], value[a:b])
        whole = summaries.summary_columns(step, segment, wall, value)
        grown_blocks, whole_blocks = (summaries.unpack_blocks(x["blocks"]) for x in (summary, whole))
    if old_format and len(bounds) == 2:  # never grown: still as it was stored
        summary["blocks"] = whole["blocks"]
    assert summary == whole
    assert grown_blocks.tobytes() == whole_blocks.tobytes()


@pytest.mark.parametrize("sizes", [(1, 8), (33, 120)], ids=["folded one by one", "summarised with numpy"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_small_appends_fold_into_the_last_block_and_compress_only_when_one_fills(seed, sizes, monkeypatch):
    step, segment, wall, value = columns_of(2000, seed)
    sizes = np.random.default_rng(seed).integers(*sizes, 600)
    bounds = [0, *np.cumsum(sizes)[np.cumsum(sizes) < len(step)].tolist(), len(step)]
    first = bounds[1]
    summary = summaries.summary_columns(step[:first], segment[:first], wall[:first], value[:first])
    compressed, compress = [], zlib.compress
    monkeypatch.setattr(zlib, "compress", lambda data, level: compressed.append(1) or compress(data, level))
    for a, b in zip(bounds[1:], bounds[2:]):
        summary = summaries.grown_columns(summary, step[a:b], segment[a:b], wall[a:b], value[a:b])
    assert len(compressed) == len(step) // summaries.BLOCK  # once as each block filled, never per append
    assert summary == summaries.summary_columns(step, segment, wall, value)


def append(store, run_id: int, first: int, n: int) -> None:
    step = np.arange(first, first + n, dtype=np.int64)
    value = np.where(step % 37 == 0, np.nan, np.sin(step / 9.0))
    with store.write() as conn:
        stored_runs.append_points(conn, run_id, Points(("loss",), np.zeros(n, np.int32), step, 5.0 + step, value),
                                  np.zeros(n, np.int32))


def stored_chunks(store, run_id: int) -> list:
    with store.read() as conn:
        return conn.execute(
            sa.select(schema.chunks.c.id, schema.chunks.c.count, schema.chunks.c.first_step, schema.chunks.c.last_step,
                      schema.chunks.c.data, schema.chunk_summaries.c.ordered, schema.chunk_summaries.c.min_segment,
                      schema.chunk_summaries.c.nonfinite, schema.chunk_summaries.c.blocks)
            .join(schema.chunk_summaries, schema.chunk_summaries.c.chunk_id == schema.chunks.c.id)
            .join(schema.tags, schema.tags.c.id == schema.chunks.c.tag_id)
            .where(schema.tags.c.run_id == run_id).order_by(schema.chunks.c.id)
        ).all()


def test_a_stored_chunk_grown_in_parts_holds_what_one_append_of_its_writes_would(store):
    with store.write() as conn:
        grown_id = stored_runs.lock_run(conn, "src", "grown", 1.0).id
        whole_id = stored_runs.lock_run(conn, "src", "whole", 1.0).id
    for first in range(0, 1500, 7):  # parts, packed whole every MAX_PARTS appends, a new chunk past SMALL_CHUNK
        append(store, grown_id, first, 7)
    rows = stored_chunks(store, grown_id)
    assert [r.count for r in rows] == [1029, 476]
    at = 0
    for row in rows:
        with store.write() as conn:  # the same writes stored whole, one chunk each
            step = np.arange(at, at + row.count, dtype=np.int64)
            value = np.where(step % 37 == 0, np.nan, np.sin(step / 9.0))
            stored_runs.append_points(conn, whole_id, Points(("loss",), np.zeros(row.count, np.int32), step,
                                                             5.0 + step, value), np.zeros(row.count, np.int32))
        at += row.count
    for grown_row, whole_row in zip(rows, stored_chunks(store, whole_id)):
        assert grown_row[1:4] == whole_row[1:4] and grown_row[5:] == whole_row[5:]
        same(chunks.unpack(grown_row.data, grown_row.count), chunks.unpack(whole_row.data, whole_row.count))


def test_a_format_1_last_chunk_is_grown_by_packing_it_whole(store):
    with store.write() as conn:
        run_id = stored_runs.lock_run(conn, "src", "old", 1.0).id
    append(store, run_id, 0, 100)
    [row] = stored_chunks(store, run_id)
    with store.write() as conn:  # as a store written before parts holds it
        conn.execute(schema.chunks.update().where(schema.chunks.c.id == row.id)
                     .values(data=format_1(*chunks.unpack(row.data, row.count))))
    append(store, run_id, 100, 10)
    [row] = stored_chunks(store, run_id)
    step, _, wall, value = chunks.unpack(row.data, row.count)
    assert row.data[:1] == b"\x02" and np.array_equal(step, np.arange(110)) and np.array_equal(wall, 5.0 + step)
    assert (row.ordered, row.nonfinite) == (1, 3)
    append(store, run_id, 110, 10)  # then it takes parts
    [row] = stored_chunks(store, run_id)
    assert len(chunks._spans(row.data)) == 2 and row.count == 120

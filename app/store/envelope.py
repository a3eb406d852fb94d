"""A tag's series downsampled for drawing, read mostly from chunk summaries: a zoomed-out
plot of ten million points decompresses the chunks at the window's edges and few others.

The downsampler (`app.downsample.MinMaxSketch`) keeps, of each fine bucket of steps, the
lowest and highest finite point and the first non-finite one, and the series' two ends.  A
block of a chunk's summary (`app.store.summaries`, BLOCK writes) lying inside one bucket
gives exactly those of its points.  A block straddling two buckets gives its extremes and its
first and last non-finite points, each in the bucket of its own step; the other bucket may
miss a lower (higher) point of the block's part, but never one beyond the block's extreme,
which is drawn within a block's width of it, across the bucket's edge.  So:

* each bucket keeps real points, whose extremes lie between the exact ones and those of
  the bucket with its two neighbours; with bucket edges on block edges, the result is the
  exact one, point for point;
* the series' ends and extremes, every point that is the highest (lowest) of its block
  where a full read keeps it, and a non-finite marker in each bucket that has one are kept;
* the count is exact, and when a full read would keep every non-finite point (a quarter of
  the budget or fewer), the chunks holding them are read.

A chunk is answered from its summary when its points are all in the current view (no other
chunk of the window reaches its steps, no resume hides any, it lies inside the window) and
no block of it spans more than two buckets (a zoomed-in read decompresses: there are few
points to read).  Every other chunk is decompressed and walked as `current_points` does.
tests/test_envelope.py checks all of this against a read of every point."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from analyzers.series import hidden_by_resumes
from app.downsample import MinMaxSketch
from app.store.runs import ChunkSpan, current_points
from app.store.schema import chunk_summaries
from app.store.summaries import unpack_blocks

_FETCH = 64  # summaries fetched per query (a few KB each)


@dataclass(frozen=True)
class Downsampled:
    """A downsampled read, and how it was made."""

    sketch: MinMaxSketch
    decompressed: int  # chunks whose points were read
    summarized: int  # chunks answered from their summaries


def downsampled_series(
    conn: Connection, spans: list[ChunkSpan], start: int | None, end: int | None, resume_to: Mapping[int, int],
    max_points: int,
) -> Downsampled:
    """The current view of a tag within [start, end] (its chunks: `spans`, from `tag_chunks`)
    through a MinMaxSketch of `max_points`, steps as keys and wall times as extras."""
    first, last = min((s.first_step for s in spans), default=0), max((s.last_step for s in spans), default=0)
    sketch = MinMaxSketch(first if start is None else max(first, start), last if end is None else min(last, end), max_points)
    summarized = _summarizable(conn, _current_whole(spans, start, end, resume_to), sketch)
    ids = {s.id for s in summarized}
    rest = [s for s in spans if s.id not in ids]
    for step, value, wall in current_points(conn, rest, start, end, resume_to, wall_time=True):
        sketch.add(step, step, value, wall)
    if summarized:
        sketch.add_summary(sum(s.count for s in summarized), sum(s.nonfinite for s in summarized))
        for batch in _block_batches(conn, [s.id for s in summarized]):
            step, value, wall = _standing_points(np.concatenate(list(batch.values())))
            sketch.add_standing(step, step, value, wall)
    return Downsampled(sketch, len(rest), len(summarized))


def _summarizable(conn: Connection, candidates: list[ChunkSpan], sketch: MinMaxSketch) -> list[ChunkSpan]:
    """The chunks of `candidates` to be answered from their summaries."""
    if sum(s.count for s in candidates) <= sketch.max_points:
        return []  # every point is kept: nothing to summarise
    latest = max(candidates, key=lambda s: s.last_step, default=None)
    if latest is not None and latest.nonfinite:
        # A block straddling the last bucket names its last non-finite point, which may be
        # the series' end too: one point where a full read keeps two (the end, and the
        # bucket's first non-finite point).  Read that chunk.
        candidates = [s for s in candidates if s is not latest]
    within = {
        i for batch in _block_batches(conn, [s.id for s in candidates]) for i, b in batch.items()
        if np.all(np.diff(sketch.bucket(_ends(b)), axis=0) <= 1)
    }
    chosen = [s for s in candidates if s.id in within]
    while chosen:
        nonfinite = sum(s.nonfinite for s in chosen)
        if 0 < nonfinite <= sketch.max_points // 4:
            chosen = [s for s in chosen if not s.nonfinite]  # each of them is kept: read them
            continue
        if sum(s.count for s in chosen) <= sketch.max_points:
            chosen = []
        break
    return chosen


def _current_whole(spans: list[ChunkSpan], start: int | None, end: int | None, resume_to: Mapping[int, int]) -> list[ChunkSpan]:
    """The summarised chunks inside [start, end] whose every write is in the current view:
    steps in write order, apart from every other chunk's steps, none hidden by a resume."""
    if not spans:
        return []
    first = np.array([s.first_step for s in spans], np.int64)
    last = np.array([s.last_step for s in spans], np.int64)
    order = np.argsort(first, kind="stable")
    reach_before = np.maximum.accumulate(np.concatenate([[np.iinfo(np.int64).min], last[order][:-1]]))
    next_first = np.concatenate([first[order][1:], [np.iinfo(np.int64).max]])
    apart = np.zeros(len(spans), bool)
    apart[order] = (reach_before < first[order]) & (last[order] < next_first)
    low_segment = np.array([s.min_segment if s.min_segment is not None else -1 for s in spans], np.int64)
    # A write at step <= last of segment >= min_segment is hidden only if this one would be.
    hidden = hidden_by_resumes(last, low_segment, resume_to)
    inside = np.ones(len(spans), bool)
    if start is not None:
        inside &= first >= start
    if end is not None:
        inside &= last <= end
    ok = apart & ~hidden & inside
    return [s for s, good in zip(spans, ok) if good and s.summarized and s.ordered and s.min_segment is not None]


def _block_batches(conn: Connection, ids: list[int]) -> Iterator[dict[int, np.ndarray]]:
    """Chunk id -> its blocks, a few chunks at a time: memory stays flat."""
    for at in range(0, len(ids), _FETCH):
        query = sa.select(chunk_summaries.c.chunk_id, chunk_summaries.c.blocks).where(
            chunk_summaries.c.chunk_id.in_(ids[at : at + _FETCH])
        )
        yield {i: unpack_blocks(data) for i, data in conn.execute(query)}


def _ends(blocks: np.ndarray) -> np.ndarray:
    return np.stack([blocks["first_step"], blocks["last_step"]])


def _standing_points(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(step, value, wall) of every point the blocks name: first, last, extremes, first and
    last non-finite (once each: one point may be named twice)."""
    parts = [(blocks["first_step"], blocks["first_value"], blocks["first_wall"]),
             (blocks["last_step"], blocks["last_value"], blocks["last_wall"])]
    finite, nonfinite = blocks["nonfinite"] < blocks["count"], blocks["nonfinite"] > 0
    for name, has in (("min", finite), ("max", finite), ("nf", nonfinite), ("nf_last", nonfinite)):
        parts.append((blocks[f"{name}_step"][has], blocks[f"{name}_value"][has], blocks[f"{name}_wall"][has]))
    step, value, wall = (np.concatenate([p[i] for p in parts]) for i in range(3))
    _, unique = np.unique(step, return_index=True)
    return step[unique], value[unique], wall[unique]

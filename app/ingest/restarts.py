"""Restarts and rollbacks: segments of a run, and the current view across them.

A run that resumes from an earlier checkpoint writes steps it has written before, in a new
event file or further down the same one, sometimes announced by a `SessionLog.START` whose
step is the purge step.  losswatch keeps every point and tags it with its segment (0 for the
first write, +1 at every rollback).  Its rule, stated once here:

* a rollback starts where any tag's step goes below the highest step that tag reached in the
  current segment, or where a START's step is at or below the highest step of any tag;
* in the current view (`analyzers.series.current_view`) a rollback to step s hides every earlier segment's point at step >= s
  (the abandoned trajectory, as TensorBoard purges orphaned points), and of several writes of
  one (tag, step) the later one wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from app.ingest.points import Points

NO_STEP = np.iinfo(np.int64).min


@dataclass(frozen=True)
class Rollback:
    """A resume from an earlier step: the analyzers look behind it for hidden trouble."""

    from_step: int  # highest step written before the resume
    to_step: int  # first step written after it
    source: str  # the file (or stream) the resumed writes came from
    wall_time: float | None  # when the first resumed write happened
    segment: int  # the segment the rollback opens
    purge: bool  # announced by a SessionLog.START rather than inferred from the steps
    tags: tuple[str, ...] = ()  # the tags it rolls back; () for every tag (what files do)


@dataclass(frozen=True)
class SessionStart:
    """A `SessionLog.START` record, positioned among the points around it."""

    index: int  # number of points of the run read before it
    step: int
    wall_time: float
    source: str


@dataclass(frozen=True)
class SegmentState:
    """What restart detection must remember between incremental reads of a run."""

    segment: int = 0
    max_step: dict[str, int] = field(default_factory=dict)  # per tag, in the current segment


def assign_segments(
    points: Points,
    sources: list[tuple[int, str]],
    starts: Sequence[SessionStart] = (),
    state: SegmentState | None = None,
) -> tuple[np.ndarray, list[Rollback], SegmentState]:
    """Split points read in order into segments.

    `sources` lists (first point index, file) for each file the points came from, in order.
    Returns the segment of every point, the rollbacks found and the state to continue from.
    """
    state = state or SegmentState()
    n = len(points)
    segment = np.empty(n, np.int32)
    max_by_tag = np.full(len(points.tags), NO_STEP, np.int64)
    for name, step in state.max_step.items():
        if name in points.tags:
            max_by_tag[points.tags.index(name)] = step
    carried = {k: v for k, v in state.max_step.items() if k not in points.tags}
    seg = state.segment
    rollbacks: list[Rollback] = []
    pending_starts = sorted(starts, key=lambda s: s.index)
    pos = 0
    while True:
        limit = pending_starts[0].index if pending_starts else n
        back = _first_step_back(points.tag[pos:limit], points.step[pos:limit], max_by_tag)
        if back is not None:
            at = pos + back
            segment[pos:at] = seg
            _raise_maxima(max_by_tag, points.tag[pos:at], points.step[pos:at])
            seg += 1
            rollbacks.append(
                Rollback(
                    from_step=int(max(max_by_tag.max(initial=NO_STEP), max(carried.values(), default=NO_STEP))),
                    to_step=int(points.step[at]),
                    source=_source_of(sources, at),
                    wall_time=_finite_or_none(points.wall_time[at]),
                    segment=seg,
                    purge=False,
                )
            )
            max_by_tag[:] = NO_STEP
            carried = {}
            pos = at
            continue
        segment[pos:limit] = seg
        _raise_maxima(max_by_tag, points.tag[pos:limit], points.step[pos:limit])
        pos = limit
        if not pending_starts:
            break
        start = pending_starts.pop(0)
        highest = max(int(max_by_tag.max(initial=NO_STEP)), max(carried.values(), default=NO_STEP))
        if highest != NO_STEP and start.step <= highest:
            seg += 1
            rollbacks.append(
                Rollback(highest, start.step, start.source, start.wall_time, seg, purge=True)
            )
            max_by_tag[:] = NO_STEP
            carried = {}
    maxima = {**carried}
    maxima.update({points.tags[i]: int(s) for i, s in enumerate(max_by_tag) if s != NO_STEP})
    return segment, rollbacks, SegmentState(segment=seg, max_step=maxima)


def _first_step_back(tag: np.ndarray, step: np.ndarray, max_by_tag: np.ndarray) -> int | None:
    """Index of the first point whose step is below its tag's running maximum, if any."""
    if len(step) == 0:
        return None
    if step[0] >= max_by_tag.max(initial=NO_STEP) and np.all(step[1:] >= step[:-1]):
        return None  # the usual case, settled without sorting: no step of any tag goes back
    order = np.argsort(tag, kind="stable")
    sorted_tag = tag[order]
    sorted_step = step[order]
    bounds = np.flatnonzero(np.diff(sorted_tag)) + 1
    first = None
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(order)]):
        steps = sorted_step[lo:hi]
        running = np.maximum.accumulate(np.r_[max_by_tag[sorted_tag[lo]], steps[:-1]])
        back = np.flatnonzero(steps < running)
        if len(back):
            candidate = int(order[lo + back[0]])
            first = candidate if first is None else min(first, candidate)
    return first


def _raise_maxima(max_by_tag: np.ndarray, tag: np.ndarray, step: np.ndarray) -> None:
    np.maximum.at(max_by_tag, tag, step)


def _source_of(sources: list[tuple[int, str]], index: int) -> str:
    name = sources[0][1] if sources else ""
    for first, source in sources:
        if first > index:
            break
        name = source
    return name


def _finite_or_none(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None

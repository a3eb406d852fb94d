"""Series preparation: from every write of a tag to the sorted current view the detectors
measure, with non-finite values split out and the run's logging interval known."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from analyzers.baseline import median
from analyzers.roles import Role, assign_roles
from analyzers.running_mean import RunningMeanConfig, worked_back


@dataclass(frozen=True)
class Resume:
    """A rollback as the analyzers need it (the reader finds them)."""

    from_step: int
    to_step: int
    segment: int  # the segment the resume opens
    wall_time: float | None = None
    tags: tuple[str, ...] = ()  # the tags it rolls back; () for every tag (a resumed run)


@dataclass(frozen=True, eq=False)
class TagWrites:
    """Every write of one tag, in write order."""

    step: np.ndarray  # int64
    value: np.ndarray  # float64
    segment: np.ndarray  # int32


@dataclass(frozen=True, eq=False)
class Series:
    """One tag's current view, sorted by step.

    `step`/`value` hold every point; `fstep`/`fvalue` only the finite ones, which is what
    statistics are computed on: a NaN never reaches a median.
    """

    tag: str
    role: Role
    step: np.ndarray
    value: np.ndarray
    finite: np.ndarray  # bool mask over step/value
    fstep: np.ndarray
    fvalue: np.ndarray
    interval: int  # typical steps between logged points (1, 10, 500 ...)
    averaged: int = 0  # a train loss logged as its epoch's running mean, its values worked back: the epoch in steps

    def __len__(self) -> int:
        return len(self.step)


@dataclass(frozen=True, eq=False)
class RunSeries:
    series: dict[str, Series]
    writes: dict[str, TagWrites]  # kept for what restarts hide
    resumes: tuple[Resume, ...]

    def with_role(self, role: Role) -> list[Series]:
        return [s for s in self.series.values() if s.role is role]


def hidden_by_resumes(step: np.ndarray, segment: np.ndarray, resume_to: Mapping[int, int]) -> np.ndarray:
    """Mask of the writes a later resume hides: a resume to step s that opens segment k hides
    every write of a segment below k at step >= s.  Each write is judged alone, against
    every later resume of the run (not only those of segments this tag wrote in), so a
    read of part of a tag's writes judges them as a read of all of them would."""
    if not resume_to or not len(step):
        return np.zeros(len(step), bool)
    segments = np.array(sorted(resume_to), np.int64)
    to_step = np.array([resume_to[k] for k in sorted(resume_to)], np.int64)
    lowest_after = np.minimum.accumulate(to_step[::-1])[::-1]  # lowest to_step of resumes k..
    later = np.searchsorted(segments, segment, side="right")  # first resume opening a later segment
    has_later = later < len(segments)
    threshold = lowest_after[np.minimum(later, len(segments) - 1)]
    return has_later & (step >= threshold)


def current_view(tag: np.ndarray, step: np.ndarray, segment: np.ndarray, resume_to: Mapping[int, int]) -> np.ndarray:
    """Mask of the writes a resumed run stands on (writes given in write order).

    A resume to step s (`resume_to`: segment -> s) hides every earlier segment's write at
    step >= s, as TensorBoard purges orphaned points; of several writes of one (tag, step)
    the later wins.
    """
    n = len(step)
    if n == 0:
        return np.zeros(0, bool)
    keep = ~hidden_by_resumes(step, segment, resume_to)
    order = np.lexsort((np.arange(n), step, tag))
    survivors = order[keep[order]]
    if not len(survivors):
        return np.zeros(n, bool)  # a resume before every write hid them all
    same = (tag[survivors][1:] == tag[survivors][:-1]) & (step[survivors][1:] == step[survivors][:-1])
    last_of_key = np.zeros(n, bool)
    last_of_key[survivors[np.append(~same, True)]] = True
    return last_of_key


def resume_steps(resumes: tuple[Resume, ...], tag: str) -> dict[int, int]:
    """segment -> step of the resumes that roll `tag` back: the `resume_to` of `current_view`."""
    return {r.segment: r.to_step for r in resumes if not r.tags or tag in r.tags}


def restart_steps(resumes: tuple[Resume, ...], tag: str) -> list[int]:
    """The steps `tag`'s current view resumes at, sorted: each resume's, but those a later
    resume to an earlier step took back (the points after them are the later segment's)."""
    kept: list[int] = []
    for _, to_step in sorted(resume_steps(resumes, tag).items()):
        kept = [s for s in kept if s < to_step] + [to_step]
    return kept


def logging_interval(steps: np.ndarray) -> int:
    """The typical gap between logged steps: the median positive difference."""
    gaps = np.diff(steps)
    if len(gaps) and gaps.min() == gaps.max():  # every step, or every N: no median to take
        return max(1, int(gaps[0]))
    gaps = gaps[gaps > 0]
    return max(1, int(median(gaps))) if len(gaps) else 1


def prepare_series(tag: str, role: Role, writes: TagWrites, resume_to: Mapping[int, int]) -> Series:
    step, value = writes.step, writes.value
    # Written in order, once each, with no resume after any of it: already the current view.
    settled = not resume_to or (len(step) and writes.segment.min() >= max(resume_to))
    if not (settled and np.all(step[1:] > step[:-1])):
        keep = current_view(np.zeros(len(step), np.int8), step, writes.segment, resume_to)
        step, value = step[keep], value[keep]
        order = np.argsort(step, kind="stable")  # the mask kept write order; sort by step once
        step, value = step[order], value[order]
    finite = np.isfinite(value)
    if finite.all():  # the usual case: the finite view is the series itself, not a copy of it
        return Series(tag, role, step, value, finite, step, value, logging_interval(step))
    return Series(tag, role, step, value, finite, step[finite], value[finite], logging_interval(step))


def prepare_run(
    writes: Mapping[str, TagWrites],
    resumes: tuple[Resume, ...] = (),
    roles: Mapping[str, str | Role] | None = None,
    run: str = "",
    running_mean: RunningMeanConfig = RunningMeanConfig(),
) -> RunSeries:
    """Every tag's current view with its role (`roles` overrides what names suggest; the
    run's name says when it is an eval split logged apart); a train loss logged as its
    epoch's running mean worked back to each batch's own (`analyzers.running_mean`)."""
    assigned = assign_roles(writes, roles, run)
    series = {tag: prepare_series(tag, assigned[tag], w, resume_steps(resumes, tag)) for tag, w in writes.items()}
    for tag, s in series.items():
        if s.role is Role.LOSS:
            series[tag] = _as_batches(s, running_mean, restart_steps(resumes, tag))
    return RunSeries(series=series, writes=dict(writes), resumes=tuple(resumes))


def _as_batches(s: Series, config: RunningMeanConfig, restarts: list[int]) -> Series:
    """A train loss as the detectors should see it: worked back if logged as running means
    (`restarts`: the steps the run resumed at, where its mean starts afresh)."""
    value, period = worked_back(s.step, s.value, config, restarts)
    if value is s.value:
        return s
    finite = np.isfinite(value)
    return Series(s.tag, s.role, s.step, value, finite, s.step[finite], value[finite], s.interval, averaged=period)


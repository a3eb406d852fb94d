"""A train loss logged as the running mean of its epoch so far, told from its curve, and
each logged point's own batches worked back out of it.

Keras logs this (its TensorBoard callback with `update_freq="batch"`, and the logs every
callback gets per batch), and so does a PyTorch loop that writes an `AverageMeter`'s
`.avg`.  The curve is a staircase: at an epoch's first batch it drops (or jumps) to that
batch's loss, its next points swing around the new mean, and late in the epoch it moves by
a few parts in ten thousand a step.  Measured as it is, a single batch's swing at an
epoch's start stands 60 sigmas out of the flat end of the epoch before, and a real jump in
the batches' loss (an LR x10 edit: up to 1.6x) becomes a ramp of +0.005 a step, told as
fast-recovering info spikes (`bench/trained/runs/charlm_epoch_mean_*`).

**Told from the curve.**  Within an epoch the mean after k + 1 batches moves by
(x_k - m_(k-1)) / (k + 1): its steps shrink as 1/k.  At a reset it moves by a whole batch's
difference from the last epoch's mean.  So:

* a *jump* is a step more than `jump` (6) times the median of the `REF_POINTS` (16) steps
  before it, more than `BURST_POINTS` (32) points after the last one (the first points of an
  epoch all move a lot, and a stray jump in an epoch's first points cut it short: a
  synthetic run with 300-step epochs was learned at its fourth reset with 16, its second
  with 32);
* an epoch *settles* when the mean of its steps at points 2-9 is at least `settle` (2) times
  that at points 17-32: 4.4 for a running mean (the sum of 1/k over each band), 1 for a loss
  logged as it is, whose steps keep their size;
* the curve is a running mean once three jumps in a row lie the same number of steps
  apart (the epoch: at least `MIN_EPOCH_POINTS` points) and both epochs between them
  settled.  Both tests are scale-free.  On the char-LM runs logged so (epochs of 150, 200
  and 250 steps) the settling ratios are 2.9-5.7; on the 71 train losses of the reference,
  trained and sample runs logged as they are, and 1,077 generated ones, nothing is taken for
  a running mean (and a loss with a bad batch at the same place of every epoch, whose jumps
  recur exactly, does not settle).

**Worked back.**  With epochs of P steps starting at the step of a reset (`anchor`), a point
at step s has averaged c = s - r + 1 batches, r its epoch's first step; between two points
of one epoch the batches' own mean is (c_b m_b - c_a m_a) / (c_b - c_a), and an epoch's first
point is its own mean.  Exact for batches of equal weight logged at their step (Keras's
global batch counter; a meter logged every N batches gives each point the mean of its N).
A run resumed mid-epoch (a resume the reader found) starts its mean afresh at the step it
resumed at, as Keras's metrics and a new process's meter do.
Once known, the whole curve is worked back, from its first point: a stream that learns it
late asks to be fed again from the start (`feed` says when), as a one-shot analysis works
back the whole curve.  If two epochs in a row stop settling (the run changed its epoch's
length), the curve is taken as logged from the epoch before them on, and a stream that
had passed that step is fed again from there.

A curve whose epochs are shorter than `MIN_EPOCH_POINTS` logged points, or that shows no
epochs in its first `SEARCH_POINTS` points, is left as it is (a stream fed again from its
start holds what it fed: a quarter of a million points bounds it)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import bottleneck as bn
import numpy as np

from analyzers.findings import Finding
from analyzers.stream import StreamState

REF_POINTS = 16  # steps a jump is measured against
BURST_POINTS = 32  # no jump this soon after the last one: an epoch's first points all move a lot, and a stray one would cut an epoch short
EARLY = (2, 9)  # points of an epoch (0: its first) whose steps should be large ...
LATE = (17, 32)  # ... against these, once the mean has settled
MIN_EPOCH_POINTS = LATE[1] + 1
SEARCH_POINTS = 250_000  # no epochs found in this many points: the curve is taken as logged


@dataclass(frozen=True)
class RunningMeanConfig:
    enabled: bool = True  # look for epoch running means on train losses
    jump: float = 6.0  # a reset moves the mean this many times its last 16 steps' median
    settle: float = 2.0  # an epoch's steps at points 2-9 at least this many times those at 17-32


@dataclass(frozen=True)
class MeanState(StreamState):
    seen: int = 0  # finite points seen
    first_step: int = -1  # the curve's first finite point
    last_step: int = -1  # the last finite point, as logged
    last_value: float = math.nan
    steps: np.ndarray = field(default_factory=lambda: np.zeros(0))  # |steps| of the last REF_POINTS finite points
    since: int = -1  # finite points since the current epoch's (or stretch's) first; -1: none yet
    early_sum: float = 0.0  # the current epoch's steps in the EARLY band ...
    early_n: int = 0
    late_sum: float = 0.0  # ... and in the LATE band
    late_n: int = 0
    jumps: tuple[int, ...] = ()  # the steps of the last three jumps (the first point counts as one) ...
    jump_points: tuple[int, ...] = ()  # ... the finite points seen before each ...
    settled: tuple[bool, ...] = ()  # ... and whether the stretch each one closed settled
    period: int = 0  # steps per epoch, once known (0: not a running mean, or not yet)
    anchor: int = 0  # the step of an epoch's first point
    unsettled: int = 0  # epochs in a row that did not settle, once known
    off: bool = False  # taken as logged from here on


_UNKNOWN = np.full(REF_POINTS, np.nan)
GIVEN_UP = MeanState(off=True)  # one state, however the curve was cut


def start() -> MeanState:
    return MeanState()


def feed(state: MeanState, step: np.ndarray, value: np.ndarray, config: RunningMeanConfig = RunningMeanConfig(),
         restarts: Sequence[int] = ()) -> tuple[MeanState, np.ndarray, int | None]:
    """The next points of a train loss (sorted by step, after those fed): the state after
    them, the values the detectors should see, and the first step whose value these points
    change from what earlier feeds gave (None: they change none).  The epochs learned, every
    value from the curve's first point is worked back; the curve given up on, every value
    from the epoch before the first that stopped settling is as logged.  A caller that has
    fed that step feeds the curve again from a state before it.  `restarts`: the steps the
    run resumed at (sorted), where its logger's mean started afresh, as at an epoch's start."""
    if not config.enabled or state.off or not len(step):
        return state, value, None
    finite = np.isfinite(value)
    fs, fv = (step, value) if finite.all() else (step[finite], value[finite])
    if not len(fs):
        return state, value, None
    moved = _moves(state, fv)
    if state.period:
        after, off_at = _follow(state, fs, fv, moved, config)
        return after, _worked_back(state, step, value, finite, fs, fv, off_at, restarts), off_at
    known, at = _search(state, fs, fv, moved, config)
    if at is None:
        return known, value, None
    first = state.first_step if state.seen else int(fs[0])
    after, off_at = _follow(known, fs[at:], fv[at:], moved[at:], config, fresh=True)
    if not after.off:
        after = replace(after, seen=state.seen + len(fv), first_step=first)
    return after, _worked_back(known, step, value, finite, fs, fv, off_at, restarts), first


def worked_back(step: np.ndarray, value: np.ndarray, config: RunningMeanConfig = RunningMeanConfig(),
                restarts: Sequence[int] = ()) -> tuple[np.ndarray, int]:
    """A whole train loss (sorted by step) as the detectors should see it, and its epoch in
    steps (0: taken as logged, at least at its end): what `feed` gives over any split of it,
    each feed made again from where it changed what an earlier one gave."""
    state, out, _ = feed(start(), step, value, config, restarts)
    return out, state.period


def noted(findings: list[Finding], periods: dict[str, int]) -> list[Finding]:
    """Findings, those on a curve worked back from running means saying so (`periods`: tag
    -> its epoch in steps): their values are the batches', not the curve the run shows."""
    if not periods:
        return findings
    return [f if f.tag not in periods else _noted(f, periods[f.tag]) for f in findings]


def _noted(f: Finding, period: int) -> Finding:
    return replace(f, message=f"{f.message} (each batch's loss, worked back from the running mean of {period}-step epochs "
                              "the run logs)", evidence={**f.evidence, "running_mean_epoch": period})


def _moves(state: MeanState, fv: np.ndarray) -> np.ndarray:
    """|value - the finite value before it| at each finite point (NaN for a curve's first)."""
    out = np.empty(len(fv))
    out[0] = abs(fv[0] - state.last_value)
    np.subtract(fv[1:], fv[:-1], out=out[1:])
    np.abs(out[1:], out=out[1:])
    return out


def _search(state: MeanState, fs: np.ndarray, fv: np.ndarray, moved: np.ndarray, config: RunningMeanConfig,
            ) -> tuple[MeanState, int | None]:
    """Look for the epochs in these points: the state after them, or the state before them
    with the epochs known and the index of the point that showed them."""
    before = np.concatenate([_UNKNOWN, state.steps, moved])  # padded: a window never runs past the start
    at = REF_POINTS - 1 + len(state.steps)
    ref = bn.move_median(before, REF_POINTS, min_count=REF_POINTS // 2)[at : at + len(moved)]  # the REF_POINTS moves before each
    with np.errstate(invalid="ignore"):
        candidates = np.flatnonzero((ref > 0) & (moved > config.jump * ref))
    starts = [0] if state.seen == 0 else []
    last = -1 - state.since if state.seen else 0
    for i in candidates.tolist():
        if i - last > BURST_POINTS:
            starts.append(i)
            last = i
    if not starts and state.since >= LATE[1]:  # the usual feed: no jump, past the bands of its stretch
        epochs = _Epochs([], state.since + len(moved), (state.early_sum, state.early_n, state.late_sum, state.late_n))
    else:
        epochs = _epochs(state, moved, starts, config)
    jumps, points, settled = list(state.jumps), list(state.jump_points), list(state.settled)
    for i, closed in zip(starts, epochs.settled):
        jumps, points, settled = (jumps + [int(fs[i])])[-3:], (points + [state.seen + i])[-3:], (settled + [closed is True])[-3:]
        if _regular(jumps, points, settled):
            known = replace(state, period=jumps[2] - jumps[1], anchor=jumps[2], steps=np.zeros(0), jumps=(), jump_points=(), settled=())
            return known, i
    out = _carried(state, fs, fv, moved, epochs, jumps=tuple(jumps), jump_points=tuple(points), settled=tuple(settled))
    return (GIVEN_UP if out.seen >= SEARCH_POINTS else out), None


def _regular(jumps: list[int], points: list[int], settled: list[bool]) -> bool:
    """Three jumps the same number of steps apart, each epoch between them long enough to
    judge, and settled."""
    if len(jumps) < 3:
        return False
    period = jumps[1] - jumps[0]
    return (period > 0 and jumps[2] - jumps[1] == period and min(points[1] - points[0], points[2] - points[1]) >= MIN_EPOCH_POINTS
            and settled[1] and settled[2])


@dataclass(frozen=True)
class _Epochs:
    settled: list[bool | None]  # per start: whether the stretch it closed settled (None: too short to judge)
    since: int  # of the stretch open after the points
    sums: tuple[float, int, float, int]


def _epochs(state: MeanState, moved: np.ndarray, starts: list[int], config: RunningMeanConfig) -> _Epochs:
    """Split the points at `starts` (indices of stretches' first points), the stretch open
    before them carried on from the state: whether each stretch a start closes settled, and
    the stretch left open."""
    n = len(moved)
    index = np.arange(n)
    first = np.full(n, -1)
    first[starts] = starts
    np.maximum.accumulate(first, out=first)
    position = np.where(first >= 0, index - first, state.since + 1 + index)
    if state.since < 0:
        position[first < 0] = -1  # before any stretch: nothing to judge
    label = np.zeros(n, np.int64)
    label[starts] = 1
    np.cumsum(label, out=label)
    bins = len(starts) + 1
    early = (position >= EARLY[0]) & (position <= EARLY[1])
    late = (position >= LATE[0]) & (position <= LATE[1])
    es, ls = _sums(label[early], moved[early], bins), _sums(label[late], moved[late], bins)
    en, ln = np.bincount(label[early], minlength=bins), np.bincount(label[late], minlength=bins)
    es[0] += state.early_sum
    en[0] += state.early_n
    ls[0] += state.late_sum
    ln[0] += state.late_n
    full = (en == EARLY[1] - EARLY[0] + 1) & (ln == LATE[1] - LATE[0] + 1)
    settles = (es / np.maximum(en, 1) >= config.settle * ls / np.maximum(ln, 1)) & (ls > 0)
    return _Epochs([bool(s) if f else None for s, f in zip(settles[: len(starts)], full)], int(position[-1]),
                   (float(es[-1]), int(en[-1]), float(ls[-1]), int(ln[-1])))


def _sums(label: np.ndarray, weight: np.ndarray, bins: int) -> np.ndarray:
    """The weights summed per label, as floats (`np.bincount` of no weights counts in integers)."""
    return np.bincount(label, weight, bins).astype(np.float64, copy=False)


def _carried(state: MeanState, fs: np.ndarray, fv: np.ndarray, moved: np.ndarray, epochs: _Epochs, **changes: Any) -> MeanState:
    """The state after these points, the open stretch's band sums carried (and `changes`)."""
    es, en, ls, ln = epochs.sums
    kept = np.concatenate([state.steps, moved])[-REF_POINTS:] if state.period == 0 else state.steps  # once known: none
    return replace(state, seen=state.seen + len(fv), first_step=state.first_step if state.seen else int(fs[0]),
                   last_step=int(fs[-1]), last_value=float(fv[-1]), steps=kept,
                   since=epochs.since, early_sum=es, early_n=en, late_sum=ls, late_n=ln, **changes)


def _follow(state: MeanState, fs: np.ndarray, fv: np.ndarray, moved: np.ndarray, config: RunningMeanConfig,
            fresh: bool = False) -> tuple[MeanState, int | None]:
    """The state after points of a curve whose epochs are known (`fresh`: the first of them
    is the reset that showed them), each epoch that ends judged.  After two in a row that did
    not settle the curve is given up on, taken as logged from the first step of the epoch
    before them (returned; None: worked back throughout): the run changed its epoch's
    length in or before that one, and a reset away from the known ones, worked back, is
    a batch's step times the batches averaged."""
    epoch = (fs - state.anchor) // state.period
    new_epoch = np.empty(len(fs), bool)
    new_epoch[1:] = epoch[1:] != epoch[:-1]
    new_epoch[0] = fresh or (state.last_step >= 0 and (state.last_step - state.anchor) // state.period != epoch[0])
    starts = np.flatnonzero(new_epoch).tolist()
    if fresh:
        state = replace(state, since=-1, early_sum=0.0, early_n=0, late_sum=0.0, late_n=0)
    epochs = _epochs(state, moved, starts, config)
    unsettled = state.unsettled
    for i, settled in zip(starts, epochs.settled):
        if settled is None:
            continue
        unsettled = 0 if settled else unsettled + 1
        if unsettled >= 2:
            ended = int(_first_steps(fs[i : i + 1], state.anchor, state.period, ())[0])  # the second one's end
            return GIVEN_UP, ended - 3 * state.period
    return _carried(state, fs, fv, moved, epochs, unsettled=unsettled), None


def _worked_back(state: MeanState, step: np.ndarray, value: np.ndarray, finite: np.ndarray, fs: np.ndarray,
                 fv: np.ndarray, off_at: int | None, restarts: Sequence[int]) -> np.ndarray:
    """Each finite point's own batches' mean, given the epochs (`state.last_step`/
    `last_value`: the finite point before these, if any); from step `off_at` on, as logged."""
    period, anchor = state.period, state.anchor
    first = _first_steps(fs, anchor, period, restarts)  # where each point's mean started
    count = (fs - first + 1).astype(np.float64)  # batches averaged
    prev_count = np.empty_like(count)
    prev_value = np.empty_like(fv)
    prev_count[1:], prev_value[1:] = count[:-1], fv[:-1]
    same = np.empty(len(fs), bool)
    same[1:] = first[1:] == first[:-1]
    if state.last_step >= 0 and _first_steps(np.array([state.last_step]), anchor, period, restarts)[0] == first[0]:
        same[0], prev_count[0], prev_value[0] = True, state.last_step - first[0] + 1, state.last_value
    else:
        same[0], prev_count[0], prev_value[0] = False, 0.0, 0.0
    out = np.where(same, (count * fv - prev_count * prev_value) / np.where(same, count - prev_count, 1.0), fv)
    if off_at is not None:
        out[fs >= off_at] = fv[fs >= off_at]
    if finite.all():
        return out
    full = value.copy()
    full[finite] = out
    return full


def _first_steps(steps: np.ndarray, anchor: int, period: int, restarts: Sequence[int]) -> np.ndarray:
    """The step each point's mean started at: its epoch's first, or a resume after it (a run
    resumed mid-epoch starts its mean afresh there)."""
    first = anchor + ((steps - anchor) // period) * period
    if len(restarts):
        at = np.asarray(restarts, np.int64)
        latest = np.searchsorted(at, steps, side="right") - 1
        np.maximum(first, np.where(latest >= 0, at[np.maximum(latest, 0)], first), out=first)
    return first

"""Warm restarts of a learning-rate schedule, so that the loss rise each one causes is not
taken for a spike.

SGDR (PyTorch's `CosineAnnealingWarmRestarts`, the HF Trainer's `cosine_with_restarts`,
timm's cycles) sends the LR from near its floor back up to its peak at every cycle, and the
loss climbs with it for a while: on `tests/curves.py` `restart_curve` (an LR x20 back to its
peak every 300-1000 steps, the loss +8% of its level with it) every restart read as a
fast- or slow-recovering spike, 5 to 19 of them a run, a third of them warnings
(bench/schedules.py).  The schedule is the trainer's own choice and the loss comes back as
the LR anneals: nothing to act on.

A restart is a stretch of LR points rising in a row (one jump, or a warm-up of several
points) in which the LR reaches at least `restart_ratio` (2) times the lowest of the
`restart_points` (4) values before the point, without passing the highest LR the run had
before it.  An LR that goes past its peak (a bug that multiplied it, `charlm_lr_jump_a`
and the other LR jumps of bench/labels) is no restart: the spike it causes is news.  Nor is
the first warm-up, which climbs to new highs.

A loss spike whose onset falls within the restart, the first `follow_points` (5) of its
own logged points after it or the first `follow_steps` (25) steps is the restart's doing
and is not reported, unless it is still divergent a whole cycle after its onset
(`incidents.after_warm_restart`): a loss the schedule has had its cycle to bring down and
did not is news.  A restart's cycle is the steps from where the cycle it ends began (the
previous restart, or the LR's last new high: the end of the first warm-up) to it.  With
10,000-step cycles the loss stays up longer than the spike detector's 1,000-step slow
horizon, and each restart was shown live as a critical divergent spike until the loss
came down.  Over 150 such runs (30 seeds of 5
shapes) the loss's onsets fell 0-5 points after the LR's jump, as a spike's rise takes up
to `rise_points` (5).  A real run answers more slowly: the char-LM at twice the LR without
clipping (`charlm_sgdr_hot_c`, bench/labels trained tuning) climbs over 10-20 steps after
each restart, and its onsets fell 6-8 steps after three of them, each a warning.

An eval loss rises with the train loss after each restart and comes down as the LR
anneals: evaluated every 20 steps over 1,000-step cycles, each restart was a divergence
warning ("eval/loss rose after its best ..., and train/loss rose with it").  A rise whose
best lies in the cycle a restart ended, whose highest comes after the restart, and which is
back within a cycle of it is not reported (`incidents.rise_after_warm_restart`); overfitting
that goes on past a cycle still is.

The detector streams like the others: its findings (one per restart, on the LR tag) are
intermediate, read by that join and never alerted themselves."""

from __future__ import annotations

import math
from dataclasses import dataclass

import bottleneck as bn
import numpy as np

from analyzers.findings import Finding, Kind, Severity
from analyzers.series import Series
from analyzers.stream import StreamState, detect_at_once, finite_points


@dataclass(frozen=True)
class ScheduleConfig:
    restart_ratio: float = 2.0  # a restart takes the LR to at least 2x ...
    restart_points: int = 4  # ... the lowest of its 4 values before, never past its peak so far
    follow_points: int = 5  # a loss spike within 5 of its points after a restart is the restart's doing (its rise_points) ...
    follow_steps: int = 25  # ... or within 25 steps of it: the loss answers an LR jump over tens of optimizer steps


@dataclass(frozen=True)
class RestartState(StreamState):
    peak: float  # the highest LR so far (-inf before any)
    recent: np.ndarray  # the last `restart_points` finite values
    last_step: int  # the step of the last of them (-1 before any)
    cycle_start: int  # where the current cycle began: the last restart, or the LR's last new high (-1 before any)
    start: int  # the step where the current rise began (-1: the LR is not rising)
    low: float  # the value before the current rise
    jumped: bool  # whether the current rise is a restart
    top: float  # the highest value of the current rise
    cycle: int  # if it is a restart, the steps since the cycle it ends began (-1: not one yet)


class WarmRestartDetector:
    """Restarts of the LR schedule (module docstring): closed once the LR stops rising,
    open while it still rises."""

    def __init__(self, config: ScheduleConfig = ScheduleConfig()) -> None:
        self.config = config

    def start(self) -> RestartState:
        return RestartState(-math.inf, np.zeros(0), -1, -1, -1, math.nan, False, math.nan, -1)

    def detect(self, series: Series) -> list[Finding]:
        return detect_at_once(self, series.step, series.value, series.tag)

    def feed(
        self, state: RestartState, step: np.ndarray, value: np.ndarray, tag: str = ""
    ) -> tuple[RestartState, list[Finding], list[Finding]]:
        step, value = finite_points(step, value)
        if not len(value):
            return state, [], self._open(state, tag)
        c = self.config
        before = np.concatenate([state.recent, value])  # the values before each new point start here
        kept = len(state.recent)
        prev = before[kept - 1 : -1] if kept else np.concatenate([[np.nan], value[:-1]])
        rising = value > prev  # NaN (no point before) compares False
        n = len(value)
        peak = np.maximum.accumulate(np.concatenate([[state.peak], value]))[:-1]  # the highest before each point
        highs = step[value > peak]  # where the LR set a new high (its warm-up, or a bug past its peak)
        latest = (float(max(state.peak, value.max())), before[-c.restart_points :].copy(), int(step[-1]))
        if state.start < 0 and not rising.any():  # the usual case: an LR that holds or decays
            return RestartState(*latest, _cycle_start(state.cycle_start, highs, len(highs)), -1, math.nan, False, math.nan, -1), [], []
        with np.errstate(over="ignore"):  # `restart_ratio` x a value near float64's limit is inf, which compares as it should
            needed = c.restart_ratio * _lowest_before(before, kept, c.restart_points)
        jump = rising & (value > 0) & (value <= peak) & (value >= needed)
        closed = []
        cycle_start = state.cycle_start
        rise = (state.start, state.low, state.jumped, state.top, state.cycle)  # the rise going on
        for a, b in _rises(rising, state.start >= 0):
            carried = a == 0 and state.start >= 0
            jumped = (carried and state.jumped) or bool(jump[a:b].any())
            if not jumped and b < n:
                continue  # a rise that restarted nothing, over
            top = float(value[a:b].max()) if b > a else -math.inf
            if carried:
                rise = (state.start, state.low, jumped, max(state.top, top), state.cycle)
            else:
                rise = (int(step[a]), float(prev[a]), jumped, top, -1)
            if jumped and rise[4] < 0:  # a restart: it ends the cycle begun at the last restart or new high before it
                cycle_start = _cycle_start(cycle_start, highs, int(np.searchsorted(highs, rise[0])))
                rise = (*rise[:4], rise[0] - cycle_start if cycle_start >= 0 else 0)
                cycle_start = rise[0]
            if b < n:  # over at the point before b (before this feed's first point when b is 0)
                closed.append(self._finding(tag, *rise[:2], rise[3], rise[4], int(step[b - 1]) if b else state.last_step))
        if not rising[-1]:
            rise = (-1, math.nan, False, math.nan, -1)
        s = RestartState(*latest, _cycle_start(cycle_start, highs, len(highs)), *rise)
        return s, closed, self._open(s, tag)

    def _open(self, s: RestartState, tag: str) -> list[Finding]:
        return [self._finding(tag, s.start, s.low, s.top, s.cycle, None)] if s.start >= 0 and s.jumped else []

    def _finding(self, tag: str, start: int, low: float, top: float, cycle: int, end: int | None) -> Finding:
        return Finding(
            kind=Kind.RESTART, tag=tag, severity=Severity.INFO, start_step=start, end_step=end, ongoing=end is None,
            message=f"{tag} restarted its schedule at step {start}: {low:.3g} -> {top:.3g}",
            remediation="", evidence={"reason": "lr_warm_restart", "from": low, "to": top, "cycle": cycle},
        )


def _cycle_start(current: int, highs: np.ndarray, k: int) -> int:
    """Where the cycle under way began: `current`, or the last of the first `k` new highs
    if later."""
    return max(current, int(highs[k - 1])) if k else current


def _rises(rising: np.ndarray, carried: bool) -> list[tuple[int, int]]:
    """The stretches [a, b) of points rising in a row (b = len: still rising at the last),
    the first from 0 when a rise `carried` on from before the first point."""
    edges = np.diff(np.concatenate([[carried], rising]).astype(np.int8))
    starts, ends = list(np.flatnonzero(edges == 1)), list(np.flatnonzero(edges == -1))
    if carried:
        starts.insert(0, 0)
    ends += [len(rising)] * (len(starts) - len(ends))
    return [(int(a), int(b)) for a, b in zip(starts, ends)]


def _lowest_before(values: np.ndarray, first: int, points: int) -> np.ndarray:
    """At each of `values[first:]`, the lowest of the `points` values before it (inf for
    the first value of all)."""
    padded = np.concatenate([np.full(points, np.inf), values])
    # the minimum of padded[i : i + points] (the `points` before values[i]) stands at i + points - 1
    return bn.move_min(padded, points)[first + points - 1 : len(values) + points - 1]

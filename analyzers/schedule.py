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

A loss spike whose onset falls within the restart or the first `follow_points` (5) of its
own logged points after it is the restart's doing and is not reported, unless it is
divergent: a loss that does not come back from a restart is (`incidents.after_warm_restart`).
Over 150 such runs (30 seeds of 5 shapes) the loss's onsets fell 0-5 points after the LR's
jump, as a spike's rise takes up to `rise_points` (5).

The detector streams like the others: its findings (one per restart, on the LR tag) are
intermediate, read by that join and never alerted themselves."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from analyzers.findings import Finding, Kind, Severity
from analyzers.series import Series
from analyzers.stream import StreamState, detect_at_once, finite_points


@dataclass(frozen=True)
class ScheduleConfig:
    restart_ratio: float = 2.0  # a restart takes the LR to at least 2x ...
    restart_points: int = 4  # ... the lowest of its 4 values before, never past its peak so far
    follow_points: int = 5  # a loss spike within 5 of its points after a restart is the restart's doing (its rise_points)


@dataclass(frozen=True)
class RestartState(StreamState):
    peak: float  # the highest LR so far (-inf before any)
    recent: np.ndarray  # the last `restart_points` finite values
    last_step: int  # the step of the last of them (-1 before any)
    start: int  # the step where the current rise began (-1: the LR is not rising)
    low: float  # the value before the current rise
    jumped: bool  # whether the current rise is a restart
    top: float  # the highest value of the current rise


class WarmRestartDetector:
    """Restarts of the LR schedule (module docstring): closed once the LR stops rising,
    open while it still rises."""

    def __init__(self, config: ScheduleConfig = ScheduleConfig()) -> None:
        self.config = config

    def start(self) -> RestartState:
        return RestartState(-math.inf, np.zeros(0), -1, -1, math.nan, False, math.nan)

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
        latest = (float(max(state.peak, value.max())), before[-c.restart_points :].copy(), int(step[-1]))
        if state.start < 0 and not rising.any():  # the usual case: an LR that holds or decays
            return RestartState(*latest, -1, math.nan, False, math.nan), [], []
        peak = np.maximum.accumulate(np.concatenate([[state.peak], value]))[:-1]  # the highest before each point
        jump = rising & (value > 0) & (value <= peak) & (value >= c.restart_ratio * _lowest_before(before, kept, c.restart_points))
        closed = []
        rise = (state.start, state.low, state.jumped, state.top)  # the rise going on: start, low, jumped, top
        for a, b in _rises(rising, state.start >= 0):
            carried = a == 0 and state.start >= 0
            jumped = (carried and state.jumped) or bool(jump[a:b].any())
            if not jumped and b < n:
                continue  # a rise that restarted nothing, over
            top = float(value[a:b].max()) if b > a else -math.inf
            rise = (state.start, state.low, jumped, max(state.top, top)) if carried else (int(step[a]), float(prev[a]), jumped, top)
            if b < n:  # over at the point before b (before this feed's first point when b is 0)
                start, low, _, top = rise
                closed.append(self._finding(tag, start, low, top, int(step[b - 1]) if b else state.last_step))
        if not rising[-1]:
            rise = (-1, math.nan, False, math.nan)
        s = RestartState(*latest, *rise)
        return s, closed, self._open(s, tag)

    def _open(self, s: RestartState, tag: str) -> list[Finding]:
        return [self._finding(tag, s.start, s.low, s.top, None)] if s.start >= 0 and s.jumped else []

    def _finding(self, tag: str, start: int, low: float, top: float, end: int | None) -> Finding:
        return Finding(
            kind=Kind.RESTART, tag=tag, severity=Severity.INFO, start_step=start, end_step=end, ongoing=end is None,
            message=f"{tag} restarted its schedule at step {start}: {low:.3g} -> {top:.3g}",
            remediation="", evidence={"reason": "lr_warm_restart", "from": low, "to": top},
        )


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
    windows = np.lib.stride_tricks.sliding_window_view(padded, points)  # windows[i]: the `points` before values[i]
    return windows[first : len(values)].min(axis=1)

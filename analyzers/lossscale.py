"""fp16 dynamic loss-scale collapse: the scale halves at every overflow (a skipped step)
and doubles after a run of clean steps.  Halving again and again, or sitting at its floor,
means the run overflows faster than the scaler can absorb (OPT's scale hit its minimum and
training ground to a halt; a 104B run's scale showed trouble ~1.3k steps before it
diverged).

* Peak: the running maximum of the scale once it has calibrated.  A scaler starts high and
  halves at once until a step fits (DeepSpeed: 65536 -> 4096 in the first 21 steps of
  reference-runs-2/ds_gpt2_ptb_fp16; Megatron starts at 2^32): the leading drops before the
  scale first holds or grows are that calibration, not a collapse.
* Collapse: the scale `collapse_factor` (64, six halvings) below its peak, or at or below
  `floor` (1) for `floor_points` (2) points in a row after being above it (critical).  A
  healthy sawtooth moves one halving below its peak (sample_runs/fp16_overflow: 524288 <->
  262144); fp16_overflow's collapse reached 8192 (64x) at step 1725 and the floor at 1931.
* Onset: the first point after the scale last stood (held or grew) within one halving of
  its peak.  One halving below the peak is the healthy sawtooth, where a scaler may sit for hundreds of
  steps (fp16_overflow: 262144 from the skip at 1293 to 1522, then down at every few steps
  from 1523; a char-LM's GradScaler one halving below its peak for 59 steps before its
  collapse at 1101, bench/trained charlm_fp16_collapse_b): the collapse begins where the
  scale leaves that band, and no earlier than the first halving of the descent that
  reached the collapse: halvings with fewer than `hold_points` (128) points between them.
  A scale that held 128 points without a halving was not collapsing then (fp16_overflow's
  descent halved every 27-88 steps after holding 230; a scale kept two halvings down for
  800 steps by two ordinary skips collapses where it starts halving again, tests/
  test_detectors.py).  The collapse lasts until the scale is back at its peak; it is
  ongoing while the scale is 64x below it or at the floor.  Its drops are counted from the
  last point at the peak.

Streaming state: the previous value, the peak, the largest value seen, where the scale
left its one-halving band, where its descent began, the floor run, the drops since the peak and the
open collapse.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from analyzers.findings import Finding, Kind, Severity
from analyzers.series import Series
from analyzers.stream import StreamState, detect_at_once, finite_points, run_lengths


@dataclass(frozen=True)
class LossScaleConfig:
    collapse_factor: float = 2.0**6  # fell this many times below its running peak
    floor: float = 1.0  # at or below this the scaler has nothing left to give
    floor_points: int = 2  # points in a row at the floor before it counts as stuck
    hold_points: int = 128  # a scale that held this many points without a halving was not collapsing


@dataclass(frozen=True)
class Collapse(StreamState):
    onset_step: int
    top: float  # the peak it fell from
    low_step: int
    low: float
    drops: int  # drops from the peak to the low
    stuck: bool  # sat at the floor
    last_step: int  # the last point seen, or where it was back at its peak
    ongoing: bool


@dataclass(frozen=True)
class LossScaleState(StreamState):
    prev: float | None  # the last finite value
    calibrating: bool  # no point has held or grown yet
    peak: float | None  # the running peak since calibration
    biggest: float | None  # the largest value, calibration included
    slid_step: int | None  # the first point after the last one that stood within a halving of the peak (None: it stood)
    descent_step: int | None  # the first drop of the latest run of drops less than hold_points apart
    since_drop: int  # points after the last drop
    drops: int  # drops since the last point at the peak
    floor_run: int  # points in a row at or below the floor
    open: Collapse | None


class LossScaleDetector:
    def __init__(self, config: LossScaleConfig = LossScaleConfig()) -> None:
        self.config = config

    def detect(self, series: Series) -> list[Finding]:
        return detect_at_once(self, series.step, series.value, series.tag)

    def start(self) -> LossScaleState:
        return LossScaleState(
            prev=None, calibrating=True, peak=None, biggest=None, slid_step=None, descent_step=None, since_drop=0,
            drops=0, floor_run=0, open=None,
        )

    def feed(
        self, state: LossScaleState, step: np.ndarray, value: np.ndarray, tag: str = ""
    ) -> tuple[LossScaleState, list[Finding], list[Finding]]:
        t, x = finite_points(step, value)
        if not len(x):
            return state, [], [self._finding(tag, state.open)] if state.open else []
        c = self.config
        with np.errstate(invalid="ignore", over="ignore"):
            peak, ref, calibrating = self._peaks(state, x)
            at_ref = x >= ref
            near_ref = x * 2 >= ref
            collapsed = (x * c.collapse_factor <= peak) & (x < peak)  # a scale of 0 has not fallen from 0
            low = x <= c.floor
        marks = _Marks(state, x, t, at_ref, near_ref, c.hold_points)
        floor_run = run_lengths(low, state.floor_run) if state.floor_run or low.any() else np.zeros(len(x), np.int64)
        stuck = floor_run >= c.floor_points
        if stuck.any():  # at the floor, after being above it
            above = x > c.floor
            first_above = int(np.argmax(above)) if above.any() else len(x)
            stuck &= (state.biggest is not None and state.biggest > c.floor) | (np.arange(len(x)) >= first_above)
        bad = collapsed | stuck
        current, closed = state.open, []
        if current is not None or bad.any():
            current, closed = self._collapses(current, x, t, ref, marks, bad, at_ref & ~bad, stuck)
        if current is not None:
            current = replace(current, ongoing=bool(collapsed[-1] or low[-1]))
        new_state = LossScaleState(
            prev=float(x[-1]),
            calibrating=calibrating,
            peak=None if np.isnan(peak[-1]) else float(peak[-1]),
            biggest=float(x.max()) if state.biggest is None else max(state.biggest, float(x.max())),
            slid_step=marks.slid_after(),
            descent_step=marks.descent(len(x) - 1),
            since_drop=marks.since_drop(),
            drops=marks.since(len(x) - 1),
            floor_run=int(floor_run[-1]),
            open=current,
        )
        return (
            new_state,
            [self._finding(tag, e) for e in closed],
            [self._finding(tag, current)] if current else [],
        )

    @staticmethod
    def _peaks(state: LossScaleState, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
        """The running peak at each point (NaN while calibrating); what a point is compared
        with to tell whether it is back at the top (the peak, or while calibrating the
        largest value so far); and whether the scale is still calibrating after these points."""
        n = len(x)
        if not state.calibrating:
            peak = np.maximum.accumulate(np.maximum(x, state.peak))
            return peak, peak, False
        before = np.nan if state.prev is None else state.prev
        holds = np.empty(n, bool)
        holds[0] = x[0] >= before
        holds[1:] = x[1:] >= x[:-1]
        h = int(np.argmax(holds)) if holds.any() else n  # the first point that holds or grows
        start = max(h - 1, 0) if h < n else n
        peak = np.full(n, np.nan)
        peak[start:] = np.maximum.accumulate(np.maximum(x[start:], x[h - 1] if h else before))
        ref = peak.copy()
        # up to the first point that holds, a point is back at the top only against the largest
        # value so far: the point before it turns out to be the peak only once the next one is
        # seen, and a stream that saw that point in an earlier piece could not revise it
        ref[:h] = np.maximum.accumulate(np.maximum(x[:h], -np.inf if state.biggest is None else state.biggest))
        return peak, ref, h == n

    @staticmethod
    def _collapses(
        current: Collapse | None,
        x: np.ndarray,
        t: np.ndarray,
        ref: np.ndarray,
        marks: _Marks,
        bad: np.ndarray,
        back: np.ndarray,
        stuck: np.ndarray,
    ) -> tuple[Collapse | None, list[Collapse]]:
        """Collapses open where the scale is collapsed and close where it is back at its peak."""
        closed = []
        pos, n = 0, len(x)
        while pos < n:
            if current is None:
                opens = np.flatnonzero(bad[pos:])
                if not len(opens):
                    break
                pos += int(opens[0])
                current = Collapse(
                    onset_step=marks.onset(pos), top=float(ref[pos]), low_step=int(t[pos]), low=float(x[pos]),
                    drops=marks.since(pos), stuck=False, last_step=int(t[pos]), ongoing=True,
                )
            ends = np.flatnonzero(back[pos:])
            end = pos + int(ends[0]) if len(ends) else n
            if end > pos:
                lowest = pos + int(np.argmin(x[pos:end]))
                if x[lowest] < current.low:
                    current = replace(current, low_step=int(t[lowest]), low=float(x[lowest]), drops=marks.since(lowest))
                current = replace(current, stuck=current.stuck or bool(stuck[pos:end].any()), last_step=int(t[end - 1]))
            if end == n:
                break
            closed.append(replace(current, last_step=int(t[end]), ongoing=False))
            current, pos = None, end
        return current, closed

    def _finding(self, tag: str, e: Collapse) -> Finding:
        where = f"its floor {e.low:g}" if e.stuck else f"{e.low:g}"
        worth = f", {math.log2(e.top / e.low):.0f} halvings' worth" if e.low > 0 else ""  # none to 0
        return Finding(
            kind=Kind.LOSS_SCALE_COLLAPSE,
            tag=tag,
            severity=Severity.CRITICAL if e.stuck else Severity.WARNING,
            start_step=e.onset_step,
            peak_step=e.low_step,
            end_step=e.last_step,
            peak_value=e.low,
            baseline=e.top,
            ratio=e.low / e.top if e.top else None,
            ongoing=e.ongoing,
            message=(
                f"{tag} fell from {e.top:g} to {where} by step {e.low_step} "
                f"({e.drops} drops{worth}): "
                "fp16 overflows on most steps"
            ),
            remediation=(
                "fp16 is overflowing: train in bf16 if the hardware has it, or keep the overflowing "
                "op (often attention softmax or a large activation) in fp32; lower the learning rate "
                f"and roll back to before step {e.onset_step} if the loss is already affected."
            ),
            evidence={"drops": e.drops, "stuck_at_floor": e.stuck},
        )


class _Marks:
    """Where the scale was last at its peak or within a halving of it, and how often it
    dropped since, at any point of one feed (looked up only where a collapse needs them)."""

    def __init__(
        self, state: LossScaleState, x: np.ndarray, t: np.ndarray, at_ref: np.ndarray, near_ref: np.ndarray, hold: int
    ) -> None:
        self.state, self.t, self.n = state, t, len(x)
        self.refs = np.flatnonzero(at_ref)
        first_drop = state.prev is not None and x[0] < state.prev
        self.drops = np.flatnonzero(x[1:] < x[:-1]) + 1
        if first_drop:
            self.drops = np.insert(self.drops, 0, 0)
        stood = near_ref.copy()  # held or grew within a halving of the peak
        stood[self.drops] = False
        self.stood = np.flatnonzero(stood)
        # where each drop's descent began: a drop more than `hold` points after the one
        # before (or the first ever) begins one
        before = self.drops[0] + state.since_drop + 1 if state.descent_step is not None and len(self.drops) else hold + 1
        gaps = np.diff(self.drops, prepend=self.drops[0] - before) if len(self.drops) else self.drops
        begins = np.maximum.accumulate(np.where(gaps > hold, np.arange(len(self.drops)), -1))
        self.began = np.where(begins >= 0, t[self.drops[np.maximum(begins, 0)]], -1)

    @staticmethod
    def _last(marks: np.ndarray, i: int) -> int:
        j = int(np.searchsorted(marks, i, side="right")) - 1
        return int(marks[j]) if j >= 0 else -1

    def slid(self, i: int) -> int:
        """The first point after the last one where the scale stood within a halving of the
        peak (held or grew there: a halving into the band may be the descent's first), up to
        point i."""
        last = self._last(self.stood, i)
        if last >= 0:
            return int(self.t[min(last + 1, i)])
        return self.state.slid_step if self.state.slid_step is not None else int(self.t[0])

    def slid_after(self) -> int | None:
        """`slid` at the end of the feed, None if the last point stood within the band."""
        return None if len(self.stood) and self.stood[-1] == self.n - 1 else self.slid(self.n - 1)

    def descent(self, i: int) -> int | None:
        """The step where the descent holding the last drop up to point i began (None: no drop yet)."""
        j = int(np.searchsorted(self.drops, i, side="right")) - 1
        if j < 0 or self.began[j] < 0:
            return self.state.descent_step
        return int(self.began[j])

    def onset(self, i: int) -> int:
        """Where a collapse seen at point i began: where the scale left its one-halving band,
        or later where its descent began."""
        descent = self.descent(i)
        return max(self.slid(i), descent) if descent is not None else self.slid(i)

    def since_drop(self) -> int:
        """Points after the last drop, at the end of the feed."""
        if len(self.drops):
            return self.n - 1 - int(self.drops[-1])
        return self.state.since_drop + self.n

    def since(self, i: int) -> int:
        """Drops after the last point at the peak, up to point i."""
        last = self._last(self.refs, i)
        upto = int(np.searchsorted(self.drops, i, side="right"))
        if last >= 0:
            return upto - int(np.searchsorted(self.drops, last, side="right"))
        return self.state.drops + upto

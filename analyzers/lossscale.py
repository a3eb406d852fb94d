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
* Onset: the first halving of the descent that reached the collapse.  Walking back from
  the halving that made it, an earlier halving belongs to the descent while the gap after
  it is under `hold_points` (128) points and under `spacing` (2) times the descent's usual
  gap (the median of its last six).  A scaler overflows now and then as it grows (one
  halving, then a few hundred clean points); a descent halves every few points.  The
  curves: a char-LM's GradScaler halved once 59 steps before its collapse, then every 1-3
  steps from 1101 (bench/trained charlm_fp16_collapse_b): the onset is 1101.
  fp16_overflow held 230 steps after a skip at 1293, then halved every 27-88 steps from
  1523: 1523.  A drift that overflows every 10-50 points (tests/curves.py `plant_fp16`)
  collapses from its first skip in 11 of 12 curves with a spacing of 2, in 9 with 3 to 8;
  the one left has a sawtooth skip 36 points before the drift, inside the drift's own
  cadence, which no rule on the curve can tell apart.  The collapse lasts until the scale
  is back at its peak; it is ongoing while the scale is 64x below it or at the floor.  Its
  drops are counted from the last point at the peak.

Streaming state: the previous value, the peak, the largest value seen, the last
`RECENT_DROPS` halvings (point index and step), the floor run, the drops since the peak
and the open collapse.
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
    hold_points: int = 128  # a halving this many points before the next is not part of a descent ...
    spacing: float = 2.0  # ... nor one twice the descent's usual gap before it


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
    seen: int  # finite points fed
    recent_at: np.ndarray  # the last RECENT_DROPS drops: their point indices ...
    recent_steps: np.ndarray  # ... and steps
    drops: int  # drops since the last point at the peak
    floor_run: int  # points in a row at or below the floor
    open: Collapse | None


RECENT_DROPS = 16  # halvings kept to find where a descent began


class LossScaleDetector:
    def __init__(self, config: LossScaleConfig = LossScaleConfig()) -> None:
        self.config = config

    def detect(self, series: Series) -> list[Finding]:
        return detect_at_once(self, series.step, series.value, series.tag)

    def start(self) -> LossScaleState:
        return LossScaleState(
            prev=None, calibrating=True, peak=None, biggest=None, seen=0,
            recent_at=np.zeros(0, np.int64), recent_steps=np.zeros(0, np.int64), drops=0, floor_run=0, open=None,
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
            collapsed = (x * c.collapse_factor <= peak) & (x < peak)  # a scale of 0 has not fallen from 0
            low = x <= c.floor
        marks = _Marks(state, x, t, at_ref, c)
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
            seen=state.seen + len(x),
            recent_at=marks.recent_at[-RECENT_DROPS:],
            recent_steps=marks.recent_steps[-RECENT_DROPS:],
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
    """Where the scale was last at its peak, how often it dropped since, and where the
    descent leading to a point began, at any point of one feed (looked up only where a
    collapse needs them)."""

    def __init__(self, state: LossScaleState, x: np.ndarray, t: np.ndarray, at_ref: np.ndarray, config: LossScaleConfig) -> None:
        self.state, self.t, self.config = state, t, config
        self.refs = np.flatnonzero(at_ref)
        first_drop = state.prev is not None and x[0] < state.prev
        self.drops = np.flatnonzero(x[1:] < x[:-1]) + 1
        if first_drop:
            self.drops = np.insert(self.drops, 0, 0)
        self.recent_at = np.concatenate([state.recent_at, state.seen + self.drops])
        self.recent_steps = np.concatenate([state.recent_steps, t[self.drops]])

    @staticmethod
    def _last(marks: np.ndarray, i: int) -> int:
        j = int(np.searchsorted(marks, i, side="right")) - 1
        return int(marks[j]) if j >= 0 else -1

    def onset(self, i: int) -> int:
        """The step of the first halving of the descent up to point i (i itself if none)."""
        at = self.recent_at[: int(np.searchsorted(self.recent_at, self.state.seen + i, side="right"))][-RECENT_DROPS:]
        if not len(at):
            return int(self.t[i])
        gaps = np.diff(at)
        usual = float(np.median(gaps[-6:])) if len(gaps) else 0.0
        joins = gaps < min(self.config.hold_points, self.config.spacing * usual)
        first = len(at) - 1
        while first > 0 and joins[first - 1]:
            first -= 1
        return int(self.recent_steps[int(np.searchsorted(self.recent_at, at[first]))])

    def since(self, i: int) -> int:
        """Drops after the last point at the peak, up to point i."""
        last = self._last(self.refs, i)
        upto = int(np.searchsorted(self.drops, i, side="right"))
        if last >= 0:
            return upto - int(np.searchsorted(self.drops, last, side="right"))
        return self.state.drops + upto

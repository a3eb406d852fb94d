"""fp16 dynamic loss-scale collapse: the scale halves at every overflow (a skipped step)
and doubles after a run of clean steps.  Halving again and again, or sitting at its floor,
means the run overflows faster than the scaler can absorb (OPT's scale hit its minimum and
training ground to a halt; a 104B run's scale showed trouble ~1.3k steps before it
diverged)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from analyzers.findings import Finding, Kind, Severity
from analyzers.series import Series


@dataclass(frozen=True)
class LossScaleConfig:
    collapse_factor: float = 2.0**6  # fell this many times below its running maximum
    floor: float = 1.0  # at or below this the scaler has nothing left to give
    floor_points: int = 2  # points at the floor before it counts as stuck


class LossScaleDetector:
    def __init__(self, config: LossScaleConfig = LossScaleConfig()) -> None:
        self.config = config

    def detect(self, series: Series) -> list[Finding]:
        v, s = series.fvalue, series.fstep
        if len(v) < 2:
            return []
        c = self.config
        peak = np.maximum.accumulate(v)
        with np.errstate(divide="ignore", invalid="ignore"):
            collapsed = np.flatnonzero(v * c.collapse_factor <= peak)
        at_floor = np.flatnonzero(v <= c.floor)
        stuck = len(at_floor) >= c.floor_points and at_floor[0] > 0 and v[0] > c.floor
        if not len(collapsed) and not stuck:
            return []
        low = int(np.argmin(v))
        top = int(np.argmax(v[: low + 1]))
        halvings = int(np.sum(np.diff(v[top : low + 1]) < 0))
        first_drop = _first_permanent_drop(v, top, low)
        fall = float(v[top] / v[low]) if v[low] > 0 else math.inf
        severity = Severity.CRITICAL if stuck else Severity.WARNING
        where = f"its floor {float(v[low]):g}" if stuck else f"{float(v[low]):g}"
        return [
            Finding(
                kind=Kind.LOSS_SCALE_COLLAPSE,
                tag=series.tag,
                severity=severity,
                start_step=int(s[first_drop]),
                peak_step=int(s[low]),
                end_step=int(s[-1]),
                peak_value=float(v[low]),
                baseline=float(v[top]),
                ratio=float(v[low] / v[top]) if v[top] else None,
                ongoing=bool(v[-1] <= c.floor or v[-1] * c.collapse_factor <= v.max()),
                message=(
                    f"{series.tag} fell from {float(v[top]):g} to {where} by step {int(s[low])} "
                    f"({halvings} drops, {math.log2(fall) if math.isfinite(fall) else math.inf:.0f} halvings' worth): "
                    "fp16 overflows on most steps"
                ),
                remediation=(
                    "fp16 is overflowing: train in bf16 if the hardware has it, or keep the overflowing "
                    "op (often attention softmax or a large activation) in fp32; lower the learning rate "
                    f"and roll back to before step {int(s[first_drop])} if the loss is already affected."
                ),
                evidence={"drops": halvings, "stuck_at_floor": bool(stuck)},
            )
        ]


def _first_permanent_drop(v: np.ndarray, top: int, low: int) -> int:
    """Where the collapse starts: the first drop after which the scale never again reaches
    the value it fell from (the overflows before it were absorbed, as designed)."""
    later_max = np.maximum.accumulate(v[::-1])[::-1]  # later_max[i] = max(v[i:])
    before, after = v[top:low], v[top + 1 : low + 1]
    permanent = np.flatnonzero((after < before) & (later_max[top + 1 : low + 1] < before))
    return top + 1 + int(permanent[0]) if len(permanent) else low

"""Grad-norm explosions (a jump of orders of magnitude over the norm's own baseline) and
grad norms that are not really being logged (stuck at 0 or at one repeated value)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from analyzers.baseline import BaselineConfig, trailing_baseline
from analyzers.findings import Finding, Kind, Severity
from analyzers.series import Series


@dataclass(frozen=True)
class GradNormConfig:
    ratio: float = 10.0  # an explosion is at least this many times the baseline
    stuck_points: int = 50  # this many identical values in a row: not really logged
    baseline: BaselineConfig = BaselineConfig()


class GradNormDetector:
    def __init__(self, config: GradNormConfig = GradNormConfig()) -> None:
        self.config = config

    def detect(self, series: Series) -> list[Finding]:
        return self.explosions(series) + self.stuck(series)

    def explosions(self, series: Series) -> list[Finding]:
        v, s = series.fvalue, series.fstep
        if len(v) <= self.config.baseline.min_points:
            return []
        level = trailing_baseline(v, self.config.baseline).level
        with np.errstate(invalid="ignore"):
            over = (level > 0) & (v >= self.config.ratio * level)
        findings = []
        for first, last in _runs(over):
            base = float(level[first])
            peak = first + int(np.argmax(v[first : last + 1]))
            ratio = float(v[peak]) / base
            findings.append(
                Finding(
                    kind=Kind.GRAD_NORM_EXPLOSION,
                    tag=series.tag,
                    severity=Severity.WARNING,
                    start_step=int(s[first]),
                    peak_step=int(s[peak]),
                    end_step=int(s[min(last + 1, len(s) - 1)]),
                    peak_value=float(v[peak]),
                    baseline=base,
                    ratio=ratio,
                    ongoing=last == len(v) - 1,
                    message=(
                        f"{series.tag} exploded at step {int(s[first])}: {base:.3g} -> {float(v[peak]):.3g} "
                        f"({ratio:.3g}x, {math.log10(ratio):.1f} orders of magnitude)"
                    ),
                    remediation=(
                        "Look at the loss over the next steps: an explosion usually leads a loss spike. "
                        "If it recurs, clip gradients (max norm about 1.0) or lower the learning rate, "
                        f"and inspect the batches just before step {int(s[first])}."
                    ),
                    evidence={"orders_of_magnitude": math.log10(ratio), "points": int(last - first + 1)},
                )
            )
        return findings

    def stuck(self, series: Series) -> list[Finding]:
        v, s = series.fvalue, series.fstep
        findings = []
        same = np.append(False, v[1:] == v[:-1])
        for first, last in _runs(same):
            first -= 1  # the run of equal values starts one before the first repeat
            if last - first + 1 < self.config.stuck_points:
                continue
            value = float(v[first])
            what = "0" if value == 0 else f"{value:.6g}"
            findings.append(
                Finding(
                    kind=Kind.GRAD_NORM_STUCK,
                    tag=series.tag,
                    severity=Severity.WARNING,
                    start_step=int(s[first]),
                    end_step=int(s[last]),
                    peak_value=value,
                    ongoing=last == len(v) - 1,
                    message=f"{series.tag} is stuck at {what} for {last - first + 1} points (steps {int(s[first])}-{int(s[last])})",
                    remediation=(
                        "A grad norm that never changes is not being measured, or the optimizer is skipping "
                        "steps: check where it is logged (before clipping, after the backward pass) and the "
                        "skipped-step counter."
                    ),
                    evidence={"points": int(last - first + 1)},
                )
            )
        return findings


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) index of each run of True values."""
    if not len(mask):
        return []
    edges = np.diff(np.concatenate(([0], mask.astype(np.int8), [0])))
    return list(zip(np.flatnonzero(edges == 1).tolist(), (np.flatnonzero(edges == -1) - 1).tolist()))

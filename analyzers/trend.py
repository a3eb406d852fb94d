"""Slow patterns, seen on the smoothed trend rather than point by point: divergence
without a spike (the loss turns upward and keeps rising) and plateaus (no progress over a
window long relative to the run)."""

from __future__ import annotations

from dataclasses import dataclass

import bottleneck as bn
import numpy as np

from analyzers.baseline import DIFF_MAD_TO_SIGMA
from analyzers.findings import Finding, Kind, Severity
from analyzers.series import Series


@dataclass(frozen=True)
class TrendConfig:
    blocks: int = 100  # the trend is the median of each of this many blocks of points
    min_points: int = 50
    divergence_rise: float = 0.2  # risen 20% above the trend's minimum ...
    divergence_z: float = 6.0  # ... and far beyond noise ...
    rising_share: float = 0.6  # ... with most block-to-block moves since the minimum upward
    plateau_share: float = 0.3  # the last 30% of the run ...
    plateau_min_points: int = 500  # a plateau is long: IDEFICS waited ~10k steps
    plateau_tolerance: float = 0.01  # ... improved by less than 1%
    stalled_lr: float = 0.01  # LR below 1% of its peak through a plateau: a stalled schedule


@dataclass(frozen=True, eq=False)
class Trend:
    step: np.ndarray  # the middle step of each block
    level: np.ndarray  # each block's median
    noise: float  # the noise of one block median


def smoothed(series: Series, blocks: int) -> Trend:
    v, s = series.fvalue, series.fstep
    size = max(1, len(v) // blocks)
    count = len(v) // size
    start = len(v) - count * size  # the newest points always count; drop the oldest remainder
    level = np.median(v[start:].reshape(count, size), axis=1)
    step = s[start + size // 2 :: size][:count]
    point_noise = np.median(np.abs(np.diff(v))) * DIFF_MAD_TO_SIGMA if len(v) > 1 else 0.0
    return Trend(step, level, float(point_noise) / np.sqrt(size))


class DivergenceDetector:
    """The trend rose well above its lowest point and has not come back: still rising, or
    settled at a higher level (the loss "starts to come down but settles higher")."""

    def __init__(self, config: TrendConfig = TrendConfig()) -> None:
        self.config = config

    def detect(self, series: Series) -> list[Finding]:
        c = self.config
        if len(series.fvalue) < c.min_points:
            return []
        t = smoothed(series, c.blocks)
        low = int(np.argmin(t.level))
        since = t.level[low:]
        if len(since) < 4:
            return []
        base, now, top = float(t.level[low]), float(t.level[-1]), float(since.max())
        rise = now - base
        if not (
            rise > 0
            and rise >= c.divergence_rise * abs(base)
            and rise >= c.divergence_z * t.noise
            and rise >= 0.5 * (top - base)  # not on its way back down
        ):
            return []
        start = int(t.step[low])
        rising = float(np.mean(np.diff(since) > 0)) >= c.rising_share and now >= top - 0.1 * rise
        how = "keeps climbing" if rising else "has stayed up"
        return [
            Finding(
                kind=Kind.DIVERGENCE,
                tag=series.tag,
                severity=Severity.CRITICAL,
                start_step=start,
                peak_step=int(t.step[-1]),
                peak_value=now,
                baseline=base,
                ratio=now / base if base > 0 else None,
                ongoing=True,
                message=(
                    f"{series.tag} has been rising since step {start}: its trend went "
                    f"{base:.4g} -> {now:.4g} and {how} (divergence)"
                ),
                remediation=(
                    f"Roll back to a checkpoint from before step {start} and change the recipe, not just the "
                    "seed: lower the learning rate, check the init std, use bf16 rather than fp16, Adam "
                    "beta2 = 0.95, and the data mixture at that point. Restarts alone only delay it."
                ),
                evidence={"still_rising": rising, "noise": t.noise},
            )
        ]


class PlateauDetector:
    def __init__(self, config: TrendConfig = TrendConfig()) -> None:
        self.config = config

    def detect(self, series: Series, lr: Series | None = None) -> list[Finding]:
        c = self.config
        n = len(series.fvalue)
        window = max(int(c.plateau_share * n), c.plateau_min_points)
        if n < 2 * window:
            return []
        t = smoothed(series, c.blocks)
        first = int(np.searchsorted(t.step, series.fstep[n - window]))
        if len(t.level) - first < 6:
            return []
        edge = max(1, (len(t.level) - first) // 10)
        before, after = float(np.median(t.level[first : first + edge])), float(np.median(t.level[-edge:]))
        progress = before - after
        # no progress: less than the tolerance, or than what noise alone moves two such medians
        tolerance = max(c.plateau_tolerance * abs(before), 3 * t.noise * np.sqrt(2 / edge))
        if abs(progress) >= tolerance:
            return []  # still improving, or rising (the divergence detector's business)
        window_start = int(series.fstep[n - window])
        start = min(window_start, int(t.step[_flat_since(t.level, after, tolerance, edge)]))
        stalled = _lr_share(lr, window_start)
        severity = Severity.WARNING if stalled is not None and stalled <= c.stalled_lr else Severity.INFO
        message = f"{series.tag} has not improved since step {start}: {float(t.level[first]):.4g} -> {after:.4g} over {int(series.fstep[-1]) - start} steps"
        if stalled is not None:
            message += f"; the learning rate there is {stalled:.2%} of its peak"
        return [
            Finding(
                kind=Kind.PLATEAU,
                tag=series.tag,
                severity=severity,
                start_step=start,
                end_step=int(series.fstep[-1]),
                peak_value=after,
                baseline=before,
                ongoing=True,
                message=message,
                remediation=(
                    "The learning rate has all but stopped: check the scheduler (a decay that ended early, "
                    "a resume that lost its state)."
                    if severity is Severity.WARNING
                    else "If the run is meant to keep improving, stop it early or change the schedule; "
                    "IDEFICS stopped a run after about 10k steps of no progress."
                ),
                evidence={"progress": progress, **({"lr_share": stalled} if stalled is not None else {})},
            )
        ]


def _flat_since(level: np.ndarray, end: float, tolerance: float, edge: int) -> int:
    """The earliest block from which the trend (its rolling median over `edge` blocks)
    never left the band around where it ends."""
    smooth = bn.move_median(level, edge, min_count=1)
    outside = np.flatnonzero(np.abs(smooth - end) >= tolerance)
    return int(outside[-1]) + 1 if len(outside) else 0


def _lr_share(lr: Series | None, step: int) -> float | None:
    """The learning rate from `step` on, as a share of its peak (the highest it gets there)."""
    if lr is None or not len(lr.fvalue) or lr.fvalue.max() <= 0:
        return None
    later = lr.fvalue[lr.fstep >= step]
    return float(later.max() / lr.fvalue.max()) if len(later) else None

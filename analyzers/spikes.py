"""Loss spikes: where they start and peak, and how they end.

A spike starts at the first point far above the baseline: both `min_ratio` times the level
(1.4: the smallest spike in the public logbooks is IDEFICS' 1.9x, and heavy-tailed batch
noise of a few percent throws 1.3x blips) and `z` robust sigmas above it, so neither a
noisy nor a quiet curve fools it; and it must be sudden, most of its height gained within
`rise_points` points, or it is a climb, which the trend detectors judge.  It ends
when the loss is back within the noise band of the level it left: the median of the next
`recovery_window` steps' points (a noisy minibatch loss dips into the band long before its
mean is back), or with coarse logging `recovery_points` points in a row.  How long that took, in training steps, classifies it:

* fast_recovering: back within `fast_steps` (BLOOM-176B's spike came back in ~36 steps);
* slow_recovering: back within `slow_steps` (IDEFICS-80B took ~200, a 13B run ~500);
* divergent: not back within `slow_steps`, or settled at a higher level (the 104B run: 14
  -> 7 and flat), or still rising, or turned non-finite;
* pending: none of the above can be told yet (a live run).

With coarse logging a horizon is never shorter than a few logged points: a spike that is
one point in a run logging every 500 steps is fast if the next point is back.
"""

from __future__ import annotations

from dataclasses import dataclass

import bottleneck as bn
import numpy as np

from analyzers.baseline import DIFF_MAD_TO_SIGMA, Baseline, BaselineConfig, trailing_baseline
from analyzers.findings import Finding, Kind, Severity, SpikeClass
from analyzers.series import Series


@dataclass(frozen=True)
class SpikeConfig:
    min_ratio: float = 1.4  # peak at least 40% above the level ...
    z: float = 6.0  # ... and 6 robust sigmas above it
    recovery_z: float = 3.0  # back within 3 sigmas of the pre-spike level ...
    recovery_tolerance: float = 0.05  # ... or within 5% of it
    recovery_window: int = 25  # steps whose median must be back (at most this many points)
    recovery_points: int = 2  # coarse logging: that many points in a row
    fast_steps: int = 100
    slow_steps: int = 1000
    settle_steps: int = 300  # no progress back over this long: settled higher
    min_points_per_horizon: int = 2  # coarse logging: a horizon spans at least this many points
    rise_points: int = 5  # a spike gains most of its height within this many points; slower is a trend
    baseline: BaselineConfig = BaselineConfig()


@dataclass(frozen=True)
class Spike:
    """Indices into the series' finite points, and how the spike ended."""

    onset: int
    peak: int
    recovery: int | None
    level: float
    sigma: float
    classification: SpikeClass
    why: str  # for divergent and pending: what was seen
    resume: int  # where to look for the next spike


_SEVERITY = {
    SpikeClass.FAST_RECOVERING: Severity.INFO,
    SpikeClass.SLOW_RECOVERING: Severity.WARNING,
    SpikeClass.DIVERGENT: Severity.CRITICAL,
    SpikeClass.PENDING: Severity.WARNING,
}


class LossSpikeDetector:
    def __init__(self, config: SpikeConfig = SpikeConfig()) -> None:
        self.config = config

    def detect(self, series: Series) -> list[Finding]:
        return [self._finding(series, spike) for spike in self.spikes(series)]

    def spikes(self, series: Series) -> list[Spike]:
        """Every spike of a series, in step order."""
        c = self.config
        v = series.fvalue
        if len(v) < c.baseline.min_points + 1:
            return []
        base = trailing_baseline(v, c.baseline)
        threshold = base.level + np.maximum(c.z * base.sigma, (c.min_ratio - 1) * np.abs(base.level))
        with np.errstate(invalid="ignore"):
            candidates = np.flatnonzero((v > threshold) & self._sudden(v, base.level))
        found: list[Spike] = []
        resume_at = 0
        for onset in candidates:
            if onset < resume_at:
                continue
            spike = self._follow(series, base, int(onset))
            found.append(spike)
            resume_at = spike.resume
        return found

    def _sudden(self, v: np.ndarray, level: np.ndarray) -> np.ndarray:
        """Points that gained at least half their height over the level within the last
        `rise_points` points: what tells a spike from a slow climb."""
        k = self.config.rise_points
        lowest = bn.move_min(v, k + 1, min_count=1)
        with np.errstate(invalid="ignore"):
            return v - lowest >= 0.5 * (v - level)

    def _follow(self, series: Series, base: Baseline, onset: int) -> Spike:
        """Track one spike from its onset to its recovery (or the end of the data)."""
        c = self.config
        v, s = series.fvalue, series.fstep
        level, sigma = float(base.level[onset]), float(base.sigma[onset])
        width = max(1, min(c.recovery_window, c.recovery_window // series.interval))
        # the noise of a median of `width` points is sigma * sqrt(pi / 2 / width)
        spread = c.recovery_z * sigma * np.sqrt(np.pi / 2 / width)
        band = level + max(spread, c.recovery_tolerance * abs(level), 2 * float(base.quantum[onset]))
        slow_horizon = self._horizon(c.slow_steps, series.interval)
        end = int(np.searchsorted(s, s[onset] + slow_horizon, side="right"))
        back = _first_back(v[onset + 1 : end + width - 1], band, width, c.recovery_points)
        if back is not None and onset + 1 + back < end:
            recovery = onset + 1 + back
            peak = onset + int(np.argmax(v[onset:recovery]))
            fast = s[recovery] - s[onset] <= self._horizon(c.fast_steps, series.interval)
            kind = SpikeClass.FAST_RECOVERING if fast else SpikeClass.SLOW_RECOVERING
            return Spike(onset, peak, recovery, level, sigma, kind, "", recovery)
        peak = onset + int(np.argmax(v[onset:end]))
        kind, why = self._unrecovered(series, onset, peak, end, band)
        # past the horizon the trailing level has moved to wherever the loss went
        return Spike(onset, peak, None, level, sigma, kind, why, end)

    def _unrecovered(self, series: Series, onset: int, peak: int, end: int, band: float) -> tuple[SpikeClass, str]:
        c = self.config
        v, s = series.fvalue, series.fstep
        after = series.step[~series.finite]
        if np.any(after >= s[onset]):
            return SpikeClass.DIVERGENT, f"turned non-finite at step {int(after[after >= s[onset]][0])}"
        if end < len(s):
            return SpikeClass.DIVERGENT, f"not back within {c.slow_steps} steps"
        settle = self._horizon(c.settle_steps, series.interval)
        if s[-1] - s[peak] < settle:
            return SpikeClass.PENDING, "too few steps since the peak to tell yet"
        recent = v[np.searchsorted(s, s[-1] - settle) :]
        half = max(len(recent) // 2, 1)
        earlier, later = float(np.median(recent[:half])), float(np.median(recent[half:]))
        progress, remaining = earlier - later, later - band
        # 3 sd of the difference of two medians of `half` points
        spread = float(np.median(np.abs(np.diff(recent)))) * DIFF_MAD_TO_SIGMA if len(recent) > 2 else 0.0
        noise = 3 * spread * np.sqrt(np.pi / half)
        if remaining > 0 and progress < -noise:
            return SpikeClass.DIVERGENT, "still rising"
        # at the pace of the last `settle` steps, would it be back before the slow horizon?
        left = max(self._horizon(c.slow_steps, series.interval) - (s[-1] - s[onset]), settle)
        if remaining > 0 and progress + noise < remaining * settle / left:
            return SpikeClass.DIVERGENT, f"settled at {later:.4g}, above the {band:.4g} it left"
        return SpikeClass.PENDING, "coming down, not back yet"

    def _horizon(self, steps: int, interval: int) -> int:
        return max(steps, self.config.min_points_per_horizon * interval)

    def _finding(self, series: Series, spike: Spike) -> Finding:
        v, s = series.fvalue, series.fstep
        onset, peak = int(s[spike.onset]), int(s[spike.peak])
        peak_value = float(v[spike.peak])
        ratio = peak_value / spike.level if spike.level > 0 else None
        end = spike.recovery if spike.recovery is not None else len(v) - 1
        recovery_steps = int(s[spike.recovery]) - onset if spike.recovery is not None else None
        area = float(np.sum(np.clip(v[spike.onset : end + 1] - spike.level, 0, None) * _gaps(s, spike.onset, end)))
        return Finding(
            kind=Kind.LOSS_SPIKE,
            tag=series.tag,
            severity=_SEVERITY[spike.classification],
            start_step=onset,
            peak_step=peak,
            end_step=int(s[spike.recovery]) if spike.recovery is not None else None,
            recovery_steps=recovery_steps,
            peak_value=peak_value,
            baseline=spike.level,
            ratio=ratio,
            classification=spike.classification,
            ongoing=spike.recovery is None,
            message=_message(series.tag, spike, onset, peak_value, ratio, recovery_steps),
            remediation=_remediation(spike.classification, onset),
            evidence={
                "sigma": spike.sigma,
                "excess_area": area,
                "points": int(end - spike.onset + 1),
                "rise": "instant" if spike.peak - spike.onset <= 2 else "gradual",
                "interval": series.interval,
                **({"outcome": spike.why} if spike.why else {}),
            },
        )


def _first_back(after: np.ndarray, band: float, width: int, points: int) -> int | None:
    """First index from which the loss is back in the band: the median of `width` points
    from there, or (width 1, coarse logging) `points` points in a row."""
    if width == 1:
        return _first_run(after <= band, points)
    if len(after) < width:
        return None
    ahead = bn.move_median(after, width)[width - 1 :]  # ahead[j] = median(after[j : j + width])
    hits = np.flatnonzero(ahead <= band)
    return int(hits[0]) + width // 2 if len(hits) else None  # where that median stands


def _first_run(mask: np.ndarray, length: int) -> int | None:
    """Index of the first run of `length` True values in `mask`."""
    if length <= 1:
        hits = np.flatnonzero(mask)
        return int(hits[0]) if len(hits) else None
    if len(mask) < length:
        return None
    window = np.convolve(mask.astype(np.int32), np.ones(length, np.int32), mode="valid")
    hits = np.flatnonzero(window == length)
    return int(hits[0]) if len(hits) else None


def _gaps(steps: np.ndarray, first: int, last: int) -> np.ndarray:
    """Steps each point stands for, so that area is in loss x steps whatever the logging."""
    span = steps[first : last + 2]
    gaps = np.diff(span).astype(float)
    return gaps if len(gaps) == last - first + 1 else np.append(gaps, gaps[-1] if len(gaps) else 1.0)


def _message(tag: str, spike: Spike, onset: int, peak_value: float, ratio: float | None, recovery: int | None) -> str:
    size = f"{ratio:.2g}x baseline" if ratio is not None else f"{peak_value - spike.level:+.3g} over baseline"
    head = f"{tag} spiked at step {onset}: {spike.level:.4g} -> {peak_value:.4g} ({size})"
    if spike.classification is SpikeClass.FAST_RECOVERING:
        return f"{head}, back in {recovery} steps (fast-recovering)"
    if spike.classification is SpikeClass.SLOW_RECOVERING:
        return f"{head}, back only after {recovery} steps (slow-recovering)"
    if spike.classification is SpikeClass.DIVERGENT:
        return f"{head} and did not recover: {spike.why} (divergent)"
    return f"{head}; not back yet (pending)"


def _remediation(kind: SpikeClass, onset: int) -> str:
    before = max(0, onset - 100)
    if kind is SpikeClass.FAST_RECOVERING:
        return (
            f"No action needed: training recovered. Note step {onset} and inspect the batches "
            "just before it if spikes recur."
        )
    if kind is SpikeClass.SLOW_RECOVERING:
        return (
            f"Keep a checkpoint from before step {onset} (step {before} or earlier) and watch the "
            "rolling mean; if spikes recur, lower the learning rate by 25%, then 50%."
        )
    if kind is SpikeClass.DIVERGENT:
        return (
            f"Roll back to a checkpoint from before the onset (PaLM went ~100 steps back: step "
            f"{before} or earlier), skip the next 200-500 batches, or lower the learning rate "
            "(OPT: -10%, then to 2/3). Rolling back too little is a common second failure."
        )
    return f"Keep the checkpoint from before step {onset} (step {before} or earlier) until the loss is back."

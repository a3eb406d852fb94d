"""The one baseline every detector measures against: what a point was expected to be,
knowing only the points before it, and how far from it noise and rounding alone can go.
Every quantity at point k depends on a bounded stretch of points before k only (at most
`memory(config)` of them), so the same numbers come out of one pass over a run and of a
stream of appends.

* level: the median of the `window` (32) points before each point, moved along the recent
  slope when the curve is rising.  A trailing median follows warmup, decay and LR step drops
  (lagging on the safe side: above a falling curve); on a rising curve it would lag below,
  so a slow climb would pass for a spike without the slope.  Since it ends before the
  point, a spike never raises its own baseline.
* following: down a falling curve, the median of the last `follow_points` (16) points when
  lower than the level: it lags the fall by 8 points, not 16, and is not thrown about by a
  slope read off noise or an LR drop's fall, as carrying the level along the slope would be.
  The spike detector's one-point rule measures against it, unless the curve has `turned_up`:
  the median of its last 8 points back over the level, where a fall turns to climb
  (`charlm_lr_ramp_coarse_k`, bench/labels trained: a loss logged every 20 steps, smooth,
  climbing 1.5% a point from its floor as an LR ramp lifts it, stood 6.7 sigmas of its second
  differences over the 16-point median of its floor 10 points into the climb: a "spike"
  that explained away the divergence it was part of).
* center and sigma: the median of the residuals (value - level) over the `noise_window`
  (128) points before, and 1.4826 x their median absolute deviation from it: the run's own
  robust spread around its level, minibatch noise included (on the speedrun 1.5B logs a
  median 12% over a centred-median MAD; the spread of point-to-point differences used
  before read its heavy-tailed noise 20-40% wider, hiding 12-sigma spikes).  Taking the
  spread around the center, not around zero, keeps the lag of a falling curve out of it
  (the word-LM GRU logged every 200 batches: its spike is 8 sigmas out this way, 2.6 the
  other).  Both end before the point, so a spike never widens the band it is measured by;
  medians of 128 points ignore the few points of an earlier spike.  Both need
  `2 * min_points` values, so nothing is measured against them before a run's 40th point.
* local sigma: the same spread read off second differences (a value less the mean of its
  two neighbours), in which a trend of any slope cancels.  Down a steep early fall the
  spread around one center also holds how far the level's lag changes within 128 points
  (0.85 against a true 0.05, at the 80th point of a pretraining loss logged every 5 steps);
  this does not, though on a smooth curve it holds little but the curve's bend.
* quantum: the spacing of representable values near the level at the precision the values
  are stored in (bf16 losses move in steps of 0.0078 near 1.5; the precision is what most of
  the last `noise_window` values needed), or the step of the decimal grid they were printed
  on, whichever is coarser (a logger that rounds to 3 decimals moves in steps of 0.001:
  a smooth loss climbing 0.001 a step, so rounded, has residuals of exactly zero but for
  the last bits of a double, and every third step read as a 10^12-sigma spike).  Sigma is
  never below the quantum, so rounding never raises an alert.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import bottleneck as bn
import numpy as np

# median(|d|) of N(0, 2 s^2) differences is 0.6745 * sqrt(2) * s
DIFF_MAD_TO_SIGMA = 1.0 / (0.6744897501960817 * np.sqrt(2.0))
# median(|x - median|) of N(0, s^2) is 0.6745 * s
MAD_TO_SIGMA = 1.0 / 0.6744897501960817


@dataclass(frozen=True)
class BaselineConfig:
    window: int = 32  # points in the trailing median
    min_points: int = 8  # no baseline before this many points
    noise_window: int = 128  # points whose residuals give the center and sigma
    follow_points: int = 16  # the following level: the median of this many points, down a falling curve


class Baseline:
    """The baseline of finite `values` (sorted by step).  The level is computed at once,
    the rest when first asked for.  Arrays as long as the run are made in place where the
    arithmetic allows: on a 250k-point tag each temporary is 2 MB of fresh pages."""

    def __init__(self, values: np.ndarray, config: BaselineConfig = BaselineConfig()) -> None:
        self.values, self.config = values, config
        level, falling, newer = _rising_median(values, config)
        self.level = _shift(level)  # NaN where too few earlier points
        self._falling = _shift(falling, False)
        self._newer = newer  # the median of the newer half window, as `following` takes it when that is its width

    @cached_property
    def following(self) -> np.ndarray:
        """The level, but down a falling curve the median of the last `follow_points`
        points when lower (module docstring)."""
        if not self._falling.any():
            return self.level
        k = self.config.follow_points
        newer = self._newer if k == max(self.config.window // 2, 1) else _move_median(self.values, k, min(self.config.min_points, k))
        recent = _shift(newer)
        out = self.level.copy()
        out[self._falling] = np.fmin(out[self._falling], recent[self._falling])
        return out

    def turned_up(self, at: np.ndarray) -> np.ndarray:
        """Whether the curve had climbed back over its level just before each point at `at`:
        the median of the `window // 4` points before it above the level.  At the bottom of a
        fall that turns to climb, the newer half window still lies under the whole one, so the
        curve reads as falling (and its following level as the one to measure against) for a
        quarter window more (module docstring).  Asked of a few points only: a moving median
        over the whole run would cost 5% of the analysis."""
        k = max(self.config.window // 4, 1)
        rows = self.values[np.maximum(at[:, None] - 1 - np.arange(k), 0)]
        return row_medians(rows) > self.level[at]

    @cached_property
    def quantum(self) -> np.ndarray:
        """The rounding step near the level (module docstring)."""
        bits = value_bits(self.values)
        window = self.config.noise_window
        return np.fmax(quantum(self.level, precision_bits(bits, window)), decimal_step(self.values, bits, window))

    @cached_property
    def residual(self) -> np.ndarray:
        """value - level at each point (NaN where the level is unknown)."""
        return self.values - self.level

    @cached_property
    def center(self) -> np.ndarray:
        """The typical residual (value - level) over the `noise_window` points before each
        point: how far the trailing level lags the curve (below zero on a falling one)."""
        return _shift(_move_median(self.residual, self.config.noise_window, 2 * self.config.min_points))

    @cached_property
    def sigma(self) -> np.ndarray:
        """1.4826 x the median absolute deviation of the residuals from the center over the
        `noise_window` points before each point (NaN until `2 * min_points` are known),
        never below the quantum.  Deviations of exactly zero are skipped: on a coarse grid (a
        loss rounded to a few digits) most values repeat, and the spread is the grid's step,
        not zero."""
        window = self.config.noise_window
        deviation = np.subtract(self.residual, self.center)
        np.abs(deviation, out=deviation)
        known = _known_before(np.isfinite(deviation), window, 2 * self.config.min_points)
        deviation[deviation == 0] = np.nan  # NaN stays NaN: only finite deviations above zero count
        spread = _shift(_move_median(deviation, window, 1))
        spread *= MAD_TO_SIGMA
        np.fmax(spread, self.quantum, out=spread)
        spread[~known] = np.nan
        return spread

    @cached_property
    def local_sigma(self) -> np.ndarray:
        """The noise read off second differences over the `noise_window` points before each
        point whose neighbours are known (module docstring), never below the quantum; NaN
        until `2 * min_points` are known."""
        v = self.values
        second = np.full(len(v), np.nan)
        if len(v) > 2:
            second[2:] = v[1:-1] - (v[:-2] + v[2:]) / 2  # at j - 1, known at j
        np.abs(second, out=second)
        spread = _shift(_move_median(second, self.config.noise_window, 2 * self.config.min_points))
        spread *= MAD_TO_SIGMA / np.sqrt(1.5)  # the variance of a second difference is 1.5 sigma^2
        known = np.isfinite(spread)
        np.fmax(spread, self.quantum, out=spread)
        spread[~known] = np.nan
        return spread


def median(values: np.ndarray) -> np.float64:
    """`np.median` of a 1-d array, the same number (NaN when any value is), without what
    `np.median` imports on first use: numpy.ma, 20-35 ms of a fresh process's first scan."""
    a = np.asarray(values).ravel()
    n = len(a)
    if not n:
        return np.float64(np.nan)
    h = n // 2
    inexact = a.dtype.kind in "fc"
    part = np.partition(a, [h - 1, h, n - 1] if n % 2 == 0 else [h, n - 1]) if inexact else np.partition(a, [h - 1, h] if n % 2 == 0 else h)
    if inexact and np.isnan(part[-1]):
        return np.float64(np.nan)
    return np.float64(part[h]) if n % 2 else (np.float64(part[h - 1]) + np.float64(part[h])) / 2


def row_medians(rows: np.ndarray) -> np.ndarray:
    """`np.median(rows, axis=1)` of a 2-d float array, the same numbers (NaN for a row with
    any), without the numpy.ma import `median` avoids."""
    n = rows.shape[1]
    h = n // 2
    part = np.partition(rows, [h - 1, h, n - 1] if n % 2 == 0 else [h, n - 1], axis=1)
    out = part[:, h] if n % 2 else (part[:, h - 1] + part[:, h]) / 2
    out[np.isnan(part[:, -1])] = np.nan
    return out


def memory(config: BaselineConfig) -> int:
    """Points before a point that its baseline depends on."""
    return config.window + 2 * config.noise_window


def value_bits(values: np.ndarray) -> np.ndarray:
    """Mantissa bits each value needs: 7 (bf16), 10 (fp16), 23 (fp32) or 52."""
    as32 = values.astype(np.float32)
    exact = as32 == values
    bits = np.full(len(values), 52, np.int8)
    if not exact.any():  # float64 values (a JSON or CSV log): nothing narrower to look for
        return bits
    bits[exact] = 23
    with np.errstate(over="ignore"):
        bits[exact & (as32.astype(np.float16).astype(np.float32) == as32)] = 10
    bits[exact & ((as32.view(np.uint32) & 0xFFFF) == 0)] = 7
    return bits


def precision_bits(bits: np.ndarray, window: int) -> np.ndarray | int:
    """The precision values needing these `value_bits` are stored at, at each point: the
    fewest bits that hold at least half of the last `window` values (a few off-grid values,
    like a spike's, do not change it); one number when every value needs the same."""
    return _most_hold(bits, (23, 10, 7), 52, window)


MAX_DECIMALS = 6  # finer grids than 10^-6 are no rounding a loss logger does


def value_decimals(values: np.ndarray, bits: np.ndarray) -> np.ndarray:
    """The fewest decimals (0 to `MAX_DECIMALS`) each value was printed with, as far as its
    precision (`value_bits`) tells: a float32 of 2.139 is 2.13899994, within its own rounding
    of 2.139 (within 4 ulps: a double's own arithmetic adds a few).  A grid is only told
    apart where it is 64 ulps or coarser, so a value is on one by chance at most once in 8
    (a float32 near 2 shows 4 decimals at most, a bf16 one none); zeros, off every grid and
    those (`MAX_DECIMALS` + 1) tell nothing."""
    out = np.full(len(values), MAX_DECIMALS + 1, np.int8)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        rounding = np.abs(values) * np.exp2(-bits.astype(np.float64))  # about one ulp at the value's precision
        finest = np.minimum(np.floor(-np.log10(64 * rounding)), MAX_DECIMALS)  # the finest grid told apart
        at = np.flatnonzero((values != 0) & (finest >= 0))  # NaN, inf and zero: no verdict
        decimals = finest[at].astype(np.int8)
        while len(at):  # a value off its finest grid is on no coarser one: most leave at once
            scale = 10.0 ** decimals.astype(np.float64)
            scaled = values[at] * scale
            on = np.abs(scaled - np.rint(scaled)) <= 4 * scale * rounding[at]
            at, decimals = at[on], decimals[on]
            out[at] = decimals
            coarser = decimals > 0
            at, decimals = at[coarser], decimals[coarser] - 1
    return out


def decimal_step(values: np.ndarray, bits: np.ndarray, window: int) -> np.ndarray | float:
    """The step of the decimal grid the values were printed on, at each point: 10^-d for the
    fewest decimals d that hold at least half of the last `window` values (the rule of
    `precision_bits`), 0 where none does."""
    decimals = np.asarray(_most_hold(value_decimals(values, bits), range(MAX_DECIMALS, -1, -1), MAX_DECIMALS + 1, window))
    steps = _DECIMAL_STEPS[decimals]
    return steps if steps.ndim else float(steps)


_DECIMAL_STEPS = np.array([10.0**-d for d in range(MAX_DECIMALS + 1)] + [0.0])  # by decimals; none: 0


def _most_hold(needs: np.ndarray, grades: Sequence[int], loosest: int, window: int) -> np.ndarray | int:
    """At each point, the tightest of `grades` (from loose to tight) that at least half of
    the last `window` values need no more than, else `loosest`; one number when every value
    needs the same.  Counts over a window: exact however the stream was cut."""
    if not len(needs) or (needs == needs[0]).all():  # the usual case
        return int(needs[0]) if len(needs) else needs.astype(np.int64)
    out = np.full(len(needs), loosest)
    seen = np.minimum(np.arange(1, len(needs) + 1), window)
    present = np.bincount(needs, minlength=loosest + 1) > 0  # a grade no value needs holds where a tighter one needed does
    for grade in grades:
        if present[grade]:
            holds = 2 * _window_count(needs <= grade, window) >= seen
            if not holds.any():
                break  # nor does any tighter one
            out[holds] = grade
    return out


def quantum(level: np.ndarray, bits: np.ndarray | int) -> np.ndarray:
    """Spacing of representable numbers near `level` at `bits` of mantissa: 2 ** (the
    exponent of |level| - bits), read from the float's own exponent field; 0 where the
    level is unknown, zero or subnormal."""
    power = np.abs(level).view(np.int64)
    power >>= 52
    power -= 1023  # the exponent; NaN and inf: 1024; 0 and subnormal: -1023
    known = power > -1023
    known &= power < 1024
    power -= bits
    known &= power > -1023
    power += 1023
    power <<= 52
    power[~known] = 0
    return power.view(np.float64)


def trailing_baseline(values: np.ndarray, config: BaselineConfig = BaselineConfig()) -> Baseline:
    """Baseline of finite `values` (sorted by step)."""
    return Baseline(values, config)


def _shift(a: np.ndarray, first: float | bool = np.nan) -> np.ndarray:
    """a[k - 1] at k: what was known just before each point, `first` at the first (in
    place: `a` is an array of the caller's own)."""
    if len(a):
        a[1:] = a[:-1]  # one dimension, same direction: numpy copies overlapping data as memmove does
        a[0] = first
    return a


def _known_before(mask: np.ndarray, window: int, least: int) -> np.ndarray:
    """Whether at least `least` of the `window` points before each point are True."""
    n = len(mask)
    total = np.cumsum(mask, dtype=np.int64)
    known = np.zeros(n, bool)
    first = min(window, n - 1)  # points whose window starts at the first point
    if first > 0:
        known[1 : first + 1] = total[:first] >= least
    if n > window + 1:
        known[window + 1 :] = total[window:-1] - total[: -window - 1] >= least
    return known


def _window_count(mask: np.ndarray, window: int) -> np.ndarray:
    """How many of the last `window` points (the point included) are True."""
    total = np.cumsum(mask, dtype=np.int64)
    out = total.copy()
    out[window:] -= total[:-window]
    return out


def _move_median(a: np.ndarray, window: int, least: int) -> np.ndarray:
    """Trailing median of `window` points (NaN ones skipped), with at least `least` values;
    the same numbers however short the array."""
    if len(a) >= window:
        return bn.move_median(a, window, min_count=least)
    padded = np.concatenate([np.full(window - len(a), np.nan), a])
    return bn.move_median(padded, window, min_count=least)[window - len(a) :]


def _rising_median(values: np.ndarray, config: BaselineConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The median of the last `window` points, extrapolated along a rising slope to the
    point after them (the one it is the level of); where the slope falls; and the median
    of the newer half window (the following level takes it too: one pass of the slowest
    step, not two).

    The slope comes from the medians of the whole window and of its newer half, whose
    centres lie a quarter window apart."""
    window = config.window
    half = max(window // 2, 1)
    whole = _move_median(values, window, min(config.min_points, window))
    newer = _move_median(values, half, min(config.min_points, half))
    slope = newer.copy()
    # whole + max(slope, 0) * (window + 1) / 2, with slope = (newer - whole) / (window / 4): from
    # the window's middle to the point after its newest, the one it is the level of
    slope -= whole
    slope /= window / 4
    falling = slope < 0
    np.clip(slope, 0, None, out=slope)
    slope *= (window + 1) / 2
    slope += whole
    return slope, falling, newer

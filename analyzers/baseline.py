"""The one baseline every detector measures against: what a point was expected to be,
knowing only the points before it, and how far from it noise and rounding alone can go.

* level: the median of the `window` points before each point, moved along the recent slope
  when the curve is rising.  A trailing median follows warmup, decay and LR step drops
  (lagging on the safe side: above a falling curve); on a rising curve it would lag below,
  so a slow climb would pass for a spike without the slope.  Since it ends before the
  point, a spike never raises its own baseline.
* sigma: the robust spread of point-to-point differences, per block of points and taken
  from earlier blocks, so a spike does not widen the band it is measured by.  Differences
  cancel the trend, so a steep warmup does not pass for noise.
* quantum: the spacing of representable values near the level (bf16 losses move in steps of
  0.0078 near 1.5): sigma is never below it, so rounding never raises an alert.
"""

from __future__ import annotations

from dataclasses import dataclass

import bottleneck as bn
import numpy as np

# median(|d|) of N(0, 2 s^2) differences is 0.6745 * sqrt(2) * s
DIFF_MAD_TO_SIGMA = 1.0 / (0.6744897501960817 * np.sqrt(2.0))


@dataclass(frozen=True)
class BaselineConfig:
    window: int = 32  # points in the trailing median
    min_points: int = 8  # no baseline before this many points
    noise_block: int = 32  # points per noise estimate
    noise_history: int = 4  # earlier blocks whose median sets a block's sigma


@dataclass(frozen=True, eq=False)
class Baseline:
    level: np.ndarray  # NaN where too few earlier points
    sigma: np.ndarray
    quantum: np.ndarray


def mantissa_bits(values: np.ndarray) -> int:
    """Precision the values were stored at: 7 (bf16), 10 (fp16), 23 (fp32) or 52."""
    if len(values) == 0:
        return 52
    as32 = values.astype(np.float32)
    if not np.array_equal(as32, values):
        return 52
    if not np.any(as32.view(np.uint32) & 0xFFFF):
        return 7
    with np.errstate(over="ignore"):
        if np.array_equal(as32.astype(np.float16).astype(np.float32), as32):
            return 10
    return 23


def quantum(level: np.ndarray, bits: int) -> np.ndarray:
    """Spacing of representable numbers near `level` at `bits` of mantissa."""
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.floor(np.log2(np.abs(level)))
    q = np.exp2(exponent - bits)
    return np.where(np.isfinite(q), q, 0.0)


def trailing_baseline(values: np.ndarray, config: BaselineConfig = BaselineConfig()) -> Baseline:
    """Baseline of finite `values` (sorted by step)."""
    n = len(values)
    level = np.full(n, np.nan)
    if n > 1:
        level[1:] = _rising_median(values, config)[:-1]
    q = quantum(level, mantissa_bits(values))
    sigma = np.maximum(_noise(values, config), q)
    return Baseline(level=level, sigma=sigma, quantum=q)


def _rising_median(values: np.ndarray, config: BaselineConfig) -> np.ndarray:
    """Median of the last `window` points, extrapolated to the newest along a rising slope.

    The slope comes from the medians of the whole window and of its newer half, whose
    centres lie a quarter window apart."""
    window = min(config.window, len(values))
    half = max(window // 2, 1)
    whole = bn.move_median(values, window, min_count=min(config.min_points, window))
    newer = bn.move_median(values, half, min_count=min(config.min_points, half))
    slope = (newer - whole) / (window / 4)
    return whole + np.clip(slope, 0, None) * ((window - 1) / 2)


def _noise(values: np.ndarray, config: BaselineConfig) -> np.ndarray:
    n = len(values)
    if n < 3:
        return np.zeros(n)
    size = config.noise_block
    steps = np.abs(np.diff(values, prepend=values[0]))
    blocks = -(-n // size)
    padded = np.full(blocks * size, np.nan)
    padded[:n] = steps
    padded[0] = np.nan  # the first point has no difference
    per_block = bn.nanmedian(padded.reshape(blocks, size), axis=1) * DIFF_MAD_TO_SIGMA
    earlier = np.empty(blocks)
    earlier[0] = per_block[0]
    if blocks > 1:
        earlier[1:] = bn.move_median(per_block, min(config.noise_history, blocks), min_count=1)[:-1]
    return np.nan_to_num(np.repeat(earlier, size)[:n])

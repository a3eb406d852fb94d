"""The spike detector's baseline and noise band of one tag, for the web UI's loss chart: the
same trailing median and sigma `losswatch plot` draws (`analyzers.baseline`), computed over
the whole current view (a trailing median needs every earlier point), then thinned."""

from __future__ import annotations

import numpy as np

from analyzers.baseline import BaselineConfig, trailing_baseline

BAND_SIGMAS = 3.0  # the band is baseline +/- 3 sigma, as in the PNG


def band_points(
    steps: np.ndarray, values: np.ndarray, config: BaselineConfig, start: int | None, end: int | None, max_points: int,
) -> list[tuple[int, float | None, float | None]]:
    """[step, baseline, sigma] at an even stride of at most `max_points` of the finite points
    between `start` and `end` (null where too few earlier points are known).  A trailing median
    has no spikes to lose, so a stride is enough."""
    order = np.argsort(steps, kind="stable")
    steps, values = steps[order], values[order]
    finite = np.isfinite(values)
    steps, values = steps[finite], values[finite]
    if len(steps) == 0:
        return []
    base = trailing_baseline(values, config)
    inside = np.flatnonzero((steps >= (steps[0] if start is None else start)) & (steps <= (steps[-1] if end is None else end)))
    if len(inside) == 0:
        return []
    keep = inside[np.unique(np.linspace(0, len(inside) - 1, max_points).astype(np.int64))]
    level, sigma = base.level[keep], base.sigma[keep]
    return [(int(s), float(b) if np.isfinite(b) else None, float(g) if np.isfinite(g) else None)
            for s, b, g in zip(steps[keep], level, sigma)]

"""The spike detector's baseline and noise band of one tag, for the web UI's loss chart: the
same trailing median and sigma `losswatch plot` draws (`analyzers.baseline`), computed over
the whole current view (a trailing median needs every earlier point), then thinned.  On a
train loss logged as its epoch's running mean they are those of the curve the detectors
see, each batch's loss worked back (`analyzers.running_mean`), and that curve comes with
them: a band around the logged staircase would say nothing about the alerts."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from analyzers.baseline import BaselineConfig, trailing_baseline
from analyzers.config import AnalysisConfig
from analyzers.roles import Role, assign_roles
from analyzers.running_mean import worked_back
from app.downsample import minmax_indices

BAND_SIGMAS = 3.0  # the band is baseline +/- 3 sigma, as in the PNG


def band_points(
    steps: np.ndarray, values: np.ndarray, config: BaselineConfig, start: int | None, end: int | None, max_points: int,
) -> list[tuple[int, float | None, float | None]]:
    """[step, baseline, sigma] at an even stride of at most `max_points` of the finite points
    between `start` and `end` (both null where too few earlier points are known for a sigma:
    the spike detector measures nothing against them there, as `losswatch plot` draws).  A
    trailing median has no spikes to lose, so a stride is enough."""
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
    known = np.isfinite(level) & np.isfinite(sigma)
    return [(int(s), float(b) if k else None, float(g) if k else None) for s, b, g, k in zip(steps[keep], level, sigma, known)]


def as_detected(
    run: str, tag: str, steps: np.ndarray, values: np.ndarray, config: AnalysisConfig, restarts: Sequence[int],
) -> tuple[np.ndarray, np.ndarray, int]:
    """The tag's current view sorted by step, as the detectors see it, and the epoch in steps
    when that is worked back from running means (0: as logged).  `config`: the run's own."""
    order = np.argsort(steps, kind="stable")
    steps, values = steps[order], values[order]
    if assign_roles([tag], config.roles, run)[tag] is not Role.LOSS:
        return steps, values, 0
    batches, period = worked_back(steps, values, config.running_mean, restarts)
    return steps, batches, period


def drawn(steps: np.ndarray, values: np.ndarray, start: int | None, end: int | None, max_points: int) -> list[tuple[int, float]]:
    """[step, value] of the finite points between `start` and `end`, at most `max_points`
    of them, each stretch keeping its lowest and highest (a spike survives)."""
    keep = np.isfinite(values) & (steps >= (-np.inf if start is None else start)) & (steps <= (np.inf if end is None else end))
    steps, values = steps[keep], values[keep]
    if not len(steps):
        return []
    shown = minmax_indices(steps, values, max_points)
    return [(int(s), float(v)) for s, v in zip(steps[shown], values[shown])]

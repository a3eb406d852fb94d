"""When a chart's y-axis is logarithmic: one rule for `losswatch plot`'s panels and the web
UI's charts (the series API says `log_axis`), so a run looks the same in both."""

from __future__ import annotations

import numpy as np

LOG_RANGE = 100.0  # positive values spanning more than 2 orders of magnitude get a log axis ...
LOG_PEAK = 20.0  # ... and so do those peaking 20x over their median (a linear axis would flatten the rest)


def wants_log(values: np.ndarray) -> bool:
    """Positive values over more than two orders of magnitude (a collapsing loss scale), or
    a few peaks far over the rest (a 45x loss spike): on a linear axis everything but the
    largest values would sit flat on the floor.  `values` are the finite ones."""
    if len(values) == 0 or values.min() <= 0:
        return False
    top = values.max()
    return bool(top / values.min() > LOG_RANGE or top / np.median(values) > LOG_PEAK)

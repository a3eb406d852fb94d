"""The one shape every source's scalars take after the ingest boundary.

Points are parallel numpy arrays, never a Python object per point: a million-step run costs
tens of megabytes, not hundreds.  Tags are interned: `tag` indexes `tags`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class Points:
    """Scalar points of one run in the order they were written.

    `wall_time` is NaN where the source recorded none.  Values are float64: float32 sources
    (`simple_value`) convert exactly, and NaN/Inf are kept as they were written.
    """

    tags: tuple[str, ...]
    tag: np.ndarray  # int32 index into tags
    step: np.ndarray  # int64
    wall_time: np.ndarray  # float64
    value: np.ndarray  # float64

    def __len__(self) -> int:
        return len(self.step)

    @classmethod
    def empty(cls, tags: tuple[str, ...] = ()) -> Points:
        return cls(
            tags=tags,
            tag=np.empty(0, np.int32),
            step=np.empty(0, np.int64),
            wall_time=np.empty(0, np.float64),
            value=np.empty(0, np.float64),
        )


def json_number(x: float) -> float | str:
    """A value for JSON, which has no NaN or Infinity: those become the strings the JSON
    inputs accept back ("NaN", "Infinity", "-Infinity")."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return float(x)

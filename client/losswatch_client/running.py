"""Each batch's own value, worked back from running means of the epoch so far.

Keras hands `on_train_batch_end` "aggregated metric results up until this batch": its loss is
the mean of the epoch's batches so far, reset when an epoch starts.  Posted as it is, a
spike in batch k of an epoch is divided by k, and a jump in the batches' losses shows as a
slow ramp (the losswatch README, *Log each step's own loss, not a running mean*).  Two
successive means give back what lies between them:

    mean of batches (a, b]  =  ((b + 1) * m_b - (a + 1) * m_a) / (b - a)

for 0-based batch indices a < b (a = -1, m = 0 at the epoch's start): the batch's own loss
when the callback runs every batch, the mean of the N batches since the last call with
Keras's `steps_per_execution=N`.  Exact for batches of equal size (Keras weighs its loss by
each batch's samples, so an epoch's short last batch comes out slightly off), to within the
means' own float32 rounding times b."""

from __future__ import annotations

import math
from typing import Dict, Mapping, Tuple


class EpochMeans:
    """Running means of the epoch so far in, the mean of the batches each call covers out."""

    def __init__(self) -> None:
        self._last: Dict[str, Tuple[int, float]] = {}  # key -> (batch index, running mean there)

    def start_epoch(self) -> None:
        """The means start again (Keras resets its metrics at each epoch's start)."""
        self._last.clear()

    def batch(self, index: int, means: Mapping[str, float]) -> Dict[str, float]:
        """The mean of the batches since the last call (or since the epoch began) up to
        batch `index`, for each key of `means`.  A key whose index did not move gives
        nothing; a non-finite mean (a NaN batch makes the rest of the epoch's mean NaN) is
        given as it is, and so is the first finite one after it, which nothing can take
        apart."""
        out: Dict[str, float] = {}
        for key, value in means.items():
            mean = float(value)
            before, then = self._last.get(key, (-1, 0.0))
            if index <= before:
                continue
            self._last[key] = (index, mean)
            if not (math.isfinite(mean) and math.isfinite(then)):
                out[key] = mean
                continue
            out[key] = ((index + 1) * mean - (before + 1) * then) / (index - before)
        return out

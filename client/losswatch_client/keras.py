"""A Keras 3 callback (any backend): `model.fit(..., callbacks=[LosswatchCallback()])`.

What Keras hands a callback is not what it trains on, and the callback posts it knowing that:

* the losses in `on_train_batch_end`'s logs (`loss`, and each output's `*_loss`) are means
  of the epoch's batches so far; the callback posts each batch's own loss, worked back from
  two successive means (`losswatch_client.running.EpochMeans`), at the global step
  (`epoch * steps_per_epoch + batch` when Keras knows the epoch's length, so a fit resumed
  with `initial_epoch` carries on at the right step; else the batches this fit has run);
* the validation losses (`val_loss`, `val_*_loss`) from `on_epoch_end` go to `eval/...`
  at the epoch's last step, and the optimizer's learning rate to `train/lr` with each batch.

The guard (`guard="stop"`, the default here) sets `model.stop_training`: Keras ends `fit`
after the batch, and the callbacks' `on_train_end` run as usual."""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, Mapping, Optional

import keras

from losswatch_client.running import EpochMeans
from losswatch_client.settings import RUN_VAR
from losswatch_client.watcher import Watcher

log = logging.getLogger("losswatch_client")


class LosswatchCallback(keras.callbacks.Callback):
    """Posts each batch's loss to losswatch and stops training when the guard says so.

    `url`, `run` and `token` as for `Watcher` (and its environment variables); the run
    defaults to LOSSWATCH_RUN, else "keras".  `watcher=` uses one you made; other keyword
    arguments go to `Watcher`."""

    def __init__(
        self,
        url: Optional[str] = None,
        run: Optional[str] = None,
        token: Optional[str] = None,
        *,
        watcher: Optional[Watcher] = None,
        guard: str = "stop",
        **options: Any,
    ) -> None:
        super().__init__()
        self.watcher = watcher
        self._make = dict(url=url, run=run, token=token, guard=guard, **options)
        self._means = EpochMeans()
        self._first_step = 0  # the global step of the epoch's first batch
        self._batches = 0  # the global step after the last batch: where an epoch without a known length starts
        self.stopped_at: Optional[int] = None  # the global step the guard stopped training at

    def on_train_begin(self, logs: Optional[Mapping[str, Any]] = None) -> None:
        if self.watcher is None:
            options = dict(self._make)
            options["run"] = options["run"] or os.environ.get(RUN_VAR) or "keras"
            self.watcher = Watcher(**options)

    def on_epoch_begin(self, epoch: int, logs: Optional[Mapping[str, Any]] = None) -> None:
        self._means.start_epoch()
        per_epoch = self.params.get("steps")
        self._first_step = epoch * per_epoch if per_epoch else self._batches

    def on_train_batch_end(self, batch: int, logs: Optional[Mapping[str, Any]] = None) -> None:
        step = self._first_step + batch
        self._batches = step + 1
        if self.watcher is None:
            return
        losses = {key: value for key, value in (logs or {}).items() if _is_loss(key)}
        values: Dict[str, float] = {f"train/{key}": v for key, v in self._means.batch(batch, losses).items()}
        rate = self._learning_rate()
        if rate is not None:
            values["train/lr"] = rate
        if values:
            self.watcher.log_dict(step, values)
        if self.watcher.should_stop and self.stopped_at is None:
            self.stopped_at = step
            self.model.stop_training = True
            decision = self.watcher.decision
            why = decision.describe() if decision is not None else "the guard stopped training"
            log.warning("losswatch: stopping training at step %d: %s", step, why)

    def on_epoch_end(self, epoch: int, logs: Optional[Mapping[str, Any]] = None) -> None:
        evals = {f"eval/{key[len('val_'):]}": float(v) for key, v in (logs or {}).items()
                 if key.startswith("val_") and _is_loss(key[len("val_"):])}
        if self.watcher is not None and evals:
            self.watcher.log_dict(self._batches - 1, evals)

    def on_train_end(self, logs: Optional[Mapping[str, Any]] = None) -> None:
        """`fit` returned (the guard's stop included): mark the run finished.  The watcher
        stays open: a second `fit` posts on, as running again."""
        if self.watcher is not None:
            self.watcher.finish()

    def _learning_rate(self) -> Optional[float]:
        optimizer = getattr(self.model, "optimizer", None)
        rate = getattr(optimizer, "learning_rate", None)
        if rate is None:
            return None
        try:
            return float(rate)  # a variable, or a schedule's value now: a scalar tensor of any backend
        except (TypeError, ValueError):
            return None


def _is_loss(key: str) -> bool:
    """The losses Keras tracks as means: the total `loss` and each output's `<name>_loss`."""
    return key == "loss" or key.endswith("_loss")

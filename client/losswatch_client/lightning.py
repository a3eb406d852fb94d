"""PyTorch Lightning: a logger that posts to losswatch, and a callback for its guard.

    logger = LosswatchLogger(run="gpt-small")
    trainer = Trainer(logger=[logger, CSVLogger(...)], callbacks=[LosswatchGuard(logger)])

The logger posts what the model logs with `self.log(...)` at the trainer's global step, from
rank 0 only.  The guard callback sets `trainer.should_stop` once losswatch reports an alert
it acts on; Lightning then ends the epoch loop cleanly (checkpoints and `on_train_end` run as
usual).  The decision is shared by every rank through the strategy, so all stop together."""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, Mapping, Optional

try:
    import lightning.pytorch as pl
    from lightning.pytorch.loggers.logger import Logger, rank_zero_experiment
    from lightning.pytorch.utilities import rank_zero_only
except ImportError:  # the older distribution name
    import pytorch_lightning as pl
    from pytorch_lightning.loggers.logger import Logger, rank_zero_experiment
    from pytorch_lightning.utilities import rank_zero_only

from losswatch_client.settings import RUN_VAR
from losswatch_client.watcher import Watcher

log = logging.getLogger("losswatch_client")


class LosswatchLogger(Logger):
    """`url`, `run` and `token` as for `Watcher` (and its environment variables); `guard`
    defaults to "stop" here (add `LosswatchGuard(logger)` to the callbacks to act on it)."""

    def __init__(
        self, url: Optional[str] = None, run: Optional[str] = None, token: Optional[str] = None, *, guard: str = "stop", **options: Any
    ) -> None:
        super().__init__()
        self._options = dict(url=url, run=run or os.environ.get(RUN_VAR) or "lightning", token=token, guard=guard, **options)
        self._watcher: Optional[Watcher] = None

    @property
    def name(self) -> str:
        return "losswatch"

    @property
    def version(self) -> str:
        return self._options["run"]

    @property
    @rank_zero_experiment
    def experiment(self) -> Watcher:
        """The watcher (made on first use, on rank 0 only)."""
        if self._watcher is None:
            self._watcher = Watcher(**self._options)
        return self._watcher

    @property
    def watcher(self) -> Optional[Watcher]:
        """The watcher if this process made one (rank 0), else None."""
        return self._watcher

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: Optional[int] = None) -> None:
        values = {k: v for k, v in metrics.items() if k != "epoch"}
        if values:
            self.experiment.log_dict(0 if step is None else int(step), values)

    @rank_zero_only
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        """losswatch keeps losses, not hyperparameters: nothing to send."""

    @rank_zero_only
    def finalize(self, status: str) -> None:
        """"success": the fit (or test) ended normally, so the run is marked finished; on
        "failed" only flush: a crashed run is what the stale alert is for.  The watcher stays
        open for a later `fit()`/`test()`, whose points make the run running again."""
        if self._watcher is None:
            return
        if status == "success":
            self._watcher.finish()
        else:
            self._watcher.flush()

    def __getstate__(self) -> Dict[str, Any]:
        state = self.__dict__.copy()
        state["_watcher"] = None  # a spawned process makes its own (rank 0 only)
        return state


class LosswatchGuard(pl.Callback):
    """Stops the trainer when the logger's guard decided so (`trainer.should_stop`)."""

    def __init__(self, logger: Optional[LosswatchLogger] = None) -> None:
        self.logger = logger
        self.stopped_at: Optional[int] = None  # the global step the guard stopped training at

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.logger is None:
            found = [lg for lg in trainer.loggers if isinstance(lg, LosswatchLogger)]
            if not found:
                raise ValueError("LosswatchGuard needs a LosswatchLogger: pass it, or add one to Trainer(logger=[...])")
            self.logger = found[0]

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any, **kwargs: Any) -> None:
        watcher = self.logger.watcher if self.logger is not None else None
        stop = watcher is not None and watcher.should_stop
        stop = trainer.strategy.reduce_boolean_decision(stop, all=False)  # any rank: all stop
        if stop and self.stopped_at is None:
            self.stopped_at = trainer.global_step
            trainer.should_stop = True
            decision = watcher.decision if watcher is not None else None
            why = decision.describe() if decision is not None else "rank 0's guard stopped training"
            log.warning("losswatch: stopping at step %d: %s", trainer.global_step, why)

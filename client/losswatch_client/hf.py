"""A Hugging Face `TrainerCallback`: `Trainer(..., callbacks=[LosswatchCallback()])`.

What the Trainer logs is not what it trains on, and the callback posts it knowing that:

* the `loss` it logs is the mean over the last `logging_steps` steps, posted at the last of
  them: a one-step spike is diluted by that window (`logging_steps=1` shows every step; the
  detectors count in logged points, so they work either way);
* with `logging_nan_inf_filter=True` (its default) a NaN or Inf loss is replaced by the mean
  of the finite ones, so the loss never shows it; the `grad_norm` (logged when
  `max_grad_norm > 0`, the default) does, and losswatch flags a NaN grad norm beside a
  finite loss as a hidden NaN.  Both are posted, with `learning_rate` and `eval_loss`.

The guard (`guard="stop"`, the default here) asks the Trainer to save a checkpoint and stop
(`control.should_save`, `control.should_training_stop`); under several processes every rank
learns the decision at the same step, so none is left waiting in a collective."""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, Optional

from transformers import TrainerCallback

from losswatch_client.settings import RUN_VAR
from losswatch_client.watcher import Watcher

log = logging.getLogger("losswatch_client")

FORWARDED = ("loss", "grad_norm", "learning_rate", "eval_loss")


class LosswatchCallback(TrainerCallback):
    """Posts the Trainer's logs to losswatch and stops training when the guard says so.

    `url`, `run` and `token` as for `Watcher` (and its environment variables); the run
    defaults to LOSSWATCH_RUN, else the Trainer's `run_name`.  `watcher=` uses one you made;
    other keyword arguments go to `Watcher`."""

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
        self.watcher = watcher
        self._make = dict(url=url, run=run, token=token, guard=guard, **options)
        self.stopped_at: Optional[int] = None  # the global step the guard stopped training at

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        if self.watcher is None and state.is_world_process_zero:
            options = dict(self._make)
            options["run"] = options["run"] or os.environ.get(RUN_VAR) or args.run_name or os.path.basename(args.output_dir)
            self.watcher = Watcher(**options)

    def on_log(self, args, state, control, logs: Optional[Dict[str, float]] = None, **kwargs) -> None:
        if self.watcher is None or not logs:
            return
        values = {k: logs[k] for k in FORWARDED if k in logs}
        if values:
            self.watcher.log_dict(state.global_step, values)

    def on_step_end(self, args, state, control, **kwargs) -> None:
        stop = self.watcher is not None and self.watcher.should_stop
        if args.world_size > 1:
            stop = _anyone(stop)
        if stop and self.stopped_at is None:
            self.stopped_at = state.global_step
            control.should_save = True
            control.should_training_stop = True
            decision = self.watcher.decision if self.watcher is not None else None
            why = decision.describe() if decision is not None else "rank 0's guard stopped training"
            log.warning("losswatch: saving a checkpoint and stopping at step %d: %s", state.global_step, why)

    def on_train_end(self, args, state, control, **kwargs) -> None:
        """Training ended without an exception (the guard's stop included): mark the run
        finished.  The watcher stays open: a second `train()` posts on, as running again."""
        if self.watcher is not None:
            self.watcher.finish()


def _anyone(flag: bool) -> bool:
    """Whether any rank's guard stopped: a MAX all-reduce, so all ranks stop together."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return flag
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    tensor = torch.tensor([1 if flag else 0], device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item())

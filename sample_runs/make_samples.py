"""Real tiny training runs that show the failure patterns losswatch looks for.

Every run here is an actual training loop (torch, CPU, one thread, seeded): a small MLP
(32 -> 128 -> 128 -> 10, ReLU) trained with AdamW on a synthetic 10-class problem (inputs
N(0, 1), labels from a fixed random "teacher" network plus Gumbel noise), batch 128, clipping
the total gradient norm at 1.0.  The pattern of each run is caused by what is done to that
loop (a corrupted batch, an LR multiplier, ...), never drawn by hand.  Each run logs with
torch.utils.tensorboard's SummaryWriter (simple_value), every step:

    train/loss        the minibatch loss of that step (before the update)
    train/grad_norm   the total gradient norm before clipping (inf/NaN when it overflowed)
    train/lr          the learning rate used by that step
    train/loss_scale  the dynamic loss scale used by that step (fp16_overflow only)

This script is run by hand and its output is committed; the project's tests only read it.
Regenerate from the repository root with the writer venv (never the project's .venv):

    python3 -m venv /tmp/writers
    /tmp/writers/bin/pip install torch==2.13.0 tensorboardX tensorboard numpy
    /tmp/writers/bin/python sample_runs/make_samples.py           # write all, then check
    /tmp/writers/bin/python sample_runs/make_samples.py --check   # only read back and print

(written with torch 2.13.0+cpu, tensorboard 2.21.0, protobuf 7.36.2, numpy 2.4.6).

Outputs, beside this file: one TensorBoard run directory per pattern (README.md has the
table), `json/bad_batch.json` (the bad_batch run as a canonical JSON loss stream) and
`hf_trainer/trainer_state.json` (the lr_burst run as a Hugging Face Trainer would have logged
it: every 10 steps, with evals).  The curves are the same on every re-run (seeded, one thread).
Wall times are simulated (0.1 s per step from a fixed start; a resume starts 10 minutes after
the crash) and each writer's file name and file_version wall time are fixed (the clock is
frozen while the writer is built, and the file renamed after close), so re-running gives
byte-identical files on the same machine and library versions.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from unittest import mock

import numpy as np

HERE = Path(__file__).resolve().parent
HOST = "losswatch-samples"
STAGING: list[Path] = [HERE]  # where the runs are written; generate() points it at a temp dir
STEP_SECONDS = 0.1

# The training setup every run shares.
PEAK_LR = 2e-3
WARMUP = 100
MIN_LR_FRACTION = 0.1
BATCH = 128
CLIP = 1.0
N_TRAIN, N_EVAL, DIM, CLASSES = 409_600, 4096, 32, 10  # one pass: no sample is seen twice
STEPS_PER_EPOCH = N_TRAIN // BATCH

RUNS = ["clean", "bad_batch", "lr_burst", "lr_too_high", "fp16_overflow", "resume", "stalled_lr"]


def f32(x: float) -> float:
    """The value as the event file holds it (simple_value is float32)."""
    return float(np.float32(x))


# --------------------------------------------------------------------------- training


def make_data(seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N_TRAIN + N_EVAL, DIM, generator=g)
    w1 = torch.randn(DIM, 64, generator=g) / math.sqrt(DIM)
    w2 = torch.randn(64, CLASSES, generator=g) * 1.5
    logits = torch.tanh(x @ w1 * 2) @ w2
    gumbel = -torch.log(-torch.log(torch.rand(logits.shape, generator=g)))
    y = (logits + 0.5 * gumbel).argmax(1)
    return x[:N_TRAIN], y[:N_TRAIN], x[N_TRAIN:], y[N_TRAIN:]


def warmup_cosine(total: int, peak_fraction: float = 1.0) -> Callable[[int], float]:
    """LambdaLR factor: linear warmup over WARMUP steps, cosine to MIN_LR_FRACTION at `total`."""

    def factor(k: int) -> float:
        if k < WARMUP:
            return peak_fraction * (k + 1) / WARMUP
        t = min(1.0, (k - WARMUP) / max(1, total - WARMUP))
        return peak_fraction * (MIN_LR_FRACTION + (1 - MIN_LR_FRACTION) * 0.5 * (1 + math.cos(math.pi * t)))

    return factor


class DynamicLossScaler:
    """The standard dynamic loss-scaling algorithm (as torch.amp.GradScaler / apex / DeepSpeed).

    Multiply the loss by `scale` before backward; if any gradient is inf/NaN skip the step and
    halve the scale (never below `min_scale`); after `growth_interval` clean steps in a row
    double it.
    """

    def __init__(self, init_scale=2.0**16, growth_interval=250, min_scale=1.0) -> None:
        self.scale = init_scale
        self.growth_interval = growth_interval
        self.min_scale = min_scale
        self.good_steps = 0

    def update(self, found_inf: bool) -> None:
        if found_inf:
            self.scale = max(self.min_scale, self.scale * 0.5)
            self.good_steps = 0
        else:
            self.good_steps += 1
            if self.good_steps == self.growth_interval:
                self.scale *= 2.0
                self.good_steps = 0


@dataclass
class StepRecord:
    step: int
    loss: float
    grad_norm: float
    lr: float
    loss_scale: float | None = None
    skipped: bool = False


class Trainer:
    """One training process: model, AdamW, LambdaLR schedule and the data order, all seeded."""

    def __init__(self, data, lr_lambda: Callable[[int], float], seed: int = 0, fp16: bool = False) -> None:
        import torch
        from torch import nn

        self.torch = torch
        self.x, self.y, self.x_eval, self.y_eval = data
        torch.manual_seed(seed)
        self.model = nn.Sequential(
            nn.Linear(DIM, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, CLASSES)
        )
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=PEAK_LR, weight_decay=0.01)
        self.lr_lambda = lr_lambda
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lr_lambda)
        self.gen = torch.Generator().manual_seed(seed + 1)
        self.perm = torch.randperm(N_TRAIN, generator=self.gen)
        self.pos = 0
        self.scaler = DynamicLossScaler() if fp16 else None

    # -- data
    def next_batch(self):
        if self.pos + BATCH > N_TRAIN:
            self.perm = self.torch.randperm(N_TRAIN, generator=self.gen)
            self.pos = 0
        idx = self.perm[self.pos : self.pos + BATCH]
        self.pos += BATCH
        return self.x[idx], self.y[idx]

    # -- forward
    def logits(self, x):
        if self.scaler is None:
            return self.model(x)
        # Mixed precision: fp32 master weights, the whole forward (and so backward) in float16,
        # as autocast would run it on a GPU.  Activations and the scaled gradients live in
        # float16, so anything past 65504 really becomes inf.
        import torch.nn.functional as F

        h = x.half()
        linears = [m for m in self.model if isinstance(m, self.torch.nn.Linear)]
        for i, layer in enumerate(linears):
            h = F.linear(h, layer.weight.half(), layer.bias.half())
            if i < len(linears) - 1:
                h = F.relu(h)
        return h.float()  # the loss is computed in float32, as autocast does for cross_entropy

    def train_step(self, step: int, corrupt: Callable | None = None) -> StepRecord:
        import torch.nn.functional as F

        torch = self.torch
        x, y = self.next_batch()
        if corrupt is not None:
            x, y = corrupt(step, x, y)
        lr = self.opt.param_groups[0]["lr"]
        loss = F.cross_entropy(self.logits(x), y)
        self.opt.zero_grad(set_to_none=True)
        params = list(self.model.parameters())
        if self.scaler is None:
            loss.backward()
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, CLIP))
            self.opt.step()
            record = StepRecord(step, loss.item(), grad_norm, lr)
        else:
            scale = self.scaler.scale
            (loss * scale).backward()
            grads = [p.grad for p in params]
            found_inf = not all(bool(torch.isfinite(g).all()) for g in grads)
            for g in grads:
                g.div_(scale)
            grad_norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))
            if not found_inf:
                torch.nn.utils.clip_grad_norm_(params, CLIP)
                self.opt.step()
            self.scaler.update(found_inf)
            record = StepRecord(step, loss.item(), grad_norm, lr, loss_scale=scale, skipped=found_inf)
        self.sched.step()
        return record

    def eval_loss(self) -> float:
        import torch.nn.functional as F

        with self.torch.no_grad():
            return float(F.cross_entropy(self.model(self.x_eval), self.y_eval))

    # -- checkpoints
    def checkpoint(self) -> dict:
        return {
            "model": copy.deepcopy(self.model.state_dict()),
            "optimizer": copy.deepcopy(self.opt.state_dict()),
            "scheduler": copy.deepcopy(self.sched.state_dict()),
            "gen": self.gen.get_state(),
            "perm": self.perm.clone(),
            "pos": self.pos,
        }

    def restore(self, ckpt: dict, with_scheduler: bool) -> None:
        self.model.load_state_dict(ckpt["model"])
        self.opt.load_state_dict(ckpt["optimizer"])
        self.gen.set_state(ckpt["gen"])
        self.perm, self.pos = ckpt["perm"].clone(), ckpt["pos"]
        if with_scheduler:
            self.sched.load_state_dict(ckpt["scheduler"])
        else:  # a fresh scheduler: step count 0, so the LR goes back into warmup
            self.sched = self.torch.optim.lr_scheduler.LambdaLR(self.opt, self.lr_lambda)


# --------------------------------------------------------------------------- writing


@contextlib.contextmanager
def frozen_clock(t: float):
    with mock.patch("time.time", return_value=t):
        yield


class RunWriter:
    """torch SummaryWriter for one event file, with simulated wall times and a fixed name."""

    def __init__(self, log_dir: Path, start_time: float) -> None:
        from torch.utils.tensorboard import SummaryWriter

        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = log_dir
        self.before = set(os.listdir(log_dir))
        self.start_time = start_time
        with frozen_clock(start_time):
            self.w = SummaryWriter(log_dir=str(log_dir))
        self.name = f"events.out.tfevents.{int(start_time):010d}.{HOST}.4242.0"

    def log(self, rec: StepRecord, wall_time: float) -> None:
        self.w.add_scalar("train/loss", rec.loss, rec.step, walltime=wall_time)
        self.w.add_scalar("train/grad_norm", rec.grad_norm, rec.step, walltime=wall_time)
        self.w.add_scalar("train/lr", rec.lr, rec.step, walltime=wall_time)
        if rec.loss_scale is not None:
            self.w.add_scalar("train/loss_scale", rec.loss_scale, rec.step, walltime=wall_time)

    def close(self) -> Path:
        self.w.close()
        new = [n for n in os.listdir(self.log_dir) if n not in self.before and n.startswith("events.out.tfevents.")]
        assert len(new) == 1, new
        os.replace(self.log_dir / new[0], self.log_dir / self.name)
        return self.log_dir / self.name


@dataclass
class RunResult:
    name: str
    what: str
    where: str
    window: list[int]  # steps to show in the README around the pattern
    records: list[list[StepRecord]] = field(default_factory=list)  # one list per event file
    files: list[str] = field(default_factory=list)
    wall_times: list[list[float]] = field(default_factory=list)
    evals: list[tuple[int, float]] = field(default_factory=list)
    final_eval: float | None = None
    next_lr: float | None = None  # the scheduler's LR after the last step
    notes: dict = field(default_factory=dict)


def run_simple(
    name: str,
    index: int,
    data,
    total: int,
    what: str,
    where: str,
    window: list[int],
    lr_lambda: Callable[[int], float],
    corrupt: Callable | None = None,
    fp16: bool = False,
    stop: Callable[[list[StepRecord]], bool] | None = None,
) -> RunResult:
    res = RunResult(name, what, where, window)
    trainer = Trainer(data, lr_lambda, fp16=fp16)
    t0 = 1_710_000_000.0 + 100_000.0 * index
    writer = RunWriter(STAGING[0] / name, t0)
    recs, walls = [], []
    for step in range(total):
        rec = trainer.train_step(step, corrupt)
        wt = t0 + STEP_SECONDS * (step + 1)
        writer.log(rec, wt)
        recs.append(rec)
        walls.append(wt)
        if (step + 1) % 500 == 0:
            res.evals.append((step + 1, trainer.eval_loss()))
        if stop is not None and stop(recs):
            res.notes["stopped_after_step"] = step
            break
    res.files.append(writer.close().relative_to(STAGING[0]).as_posix())
    res.records.append(recs)
    res.wall_times.append(walls)
    res.final_eval = trainer.eval_loss()
    res.next_lr = trainer.opt.param_groups[0]["lr"]
    return res


def run_resume(index: int, data, what: str, where: str, window: list[int],
               total: int, crash_after: int, ckpt_step: int) -> RunResult:
    res = RunResult("resume", what, where, window)
    lam = warmup_cosine(total)
    trainer = Trainer(data, lam)
    t0 = 1_710_000_000.0 + 100_000.0 * index
    writer = RunWriter(STAGING[0] / "resume", t0)
    recs, walls, ckpts = [], [], {}
    for step in range(crash_after):
        if step % 500 == 0 and step > 0:
            ckpts[step] = trainer.checkpoint()  # state before step `step` runs
        rec = trainer.train_step(step)
        wt = t0 + STEP_SECONDS * (step + 1)
        writer.log(rec, wt)
        recs.append(rec)
        walls.append(wt)
    res.files.append(writer.close().relative_to(STAGING[0]).as_posix())
    res.records.append(recs)
    res.wall_times.append(walls)
    # The process dies after step crash_after - 1.  A new process resumes from the checkpoint at
    # ckpt_step: model, optimizer and data order come back, the LR scheduler's state does not.
    t1 = walls[-1] + 600.0
    trainer2 = Trainer(data, lam)
    trainer2.restore(ckpts[ckpt_step], with_scheduler=False)
    writer = RunWriter(STAGING[0] / "resume", t1)
    recs, walls = [], []
    for i, step in enumerate(range(ckpt_step, total)):
        rec = trainer2.train_step(step)
        wt = t1 + STEP_SECONDS * (i + 1)
        writer.log(rec, wt)
        recs.append(rec)
        walls.append(wt)
    res.files.append(writer.close().relative_to(STAGING[0]).as_posix())
    res.records.append(recs)
    res.wall_times.append(walls)
    res.final_eval = trainer2.eval_loss()
    res.notes.update(crash_after_step=crash_after - 1, checkpoint_step=ckpt_step, resumed_steps=[ckpt_step, total - 1])
    return res


def make_runs() -> list[RunResult]:
    import torch

    torch.set_num_threads(1)
    data = make_data()
    results = []

    total = 3000
    results.append(run_simple(
        "clean", 0, data, total,
        what=f"Normal run: AdamW, peak LR {PEAK_LR:g}, {WARMUP}-step linear warmup, cosine decay to "
             f"{MIN_LR_FRACTION:g}x peak at step {total}.",
        where="",
        window=[0, 50, 100, 200, 500, 1000, 1500, 2000, 2500, 2999],
        lr_lambda=warmup_cosine(total)))

    bad_steps = (1500, 1501)

    def corrupt_batch(step, x, y):
        if step in bad_steps:  # a corrupted shard: features x10 and labels shuffled
            g = torch.Generator().manual_seed(step)
            return x * 10.0, y[torch.randperm(len(y), generator=g)]
        return x, y

    results.append(run_simple(
        "bad_batch", 1, data, total,
        what="Clean setup; at steps 1500 and 1501 the batch is corrupted (inputs x10, labels "
             "shuffled).  Gradient clipping (1.0) limits the damage.",
        where="",
        window=[1495, 1498, 1499, 1500, 1501, 1502, 1503, 1505, 1510, 1520, 1550],
        lr_lambda=warmup_cosine(total), corrupt=corrupt_batch))
    results[-1].notes["bad_steps"] = list(bad_steps)

    burst = (1200, 1220, 30.0)
    base = warmup_cosine(total)
    results.append(run_simple(
        "lr_burst", 2, data, total,
        what=f"Clean setup; the LR is multiplied by {burst[2]:g} for steps {burst[0]}-{burst[1] - 1} "
             "(e.g. a bad schedule edit or a warm restart with the wrong peak).",
        where="",
        window=[1195, 1199, 1200, 1201, 1202, 1205, 1210, 1219, 1220, 1230, 1250, 1300, 1400, 1500, 1700],
        lr_lambda=lambda k: base(k) * (burst[2] if burst[0] <= k < burst[1] else 1.0)))
    results[-1].notes["burst_steps"] = [burst[0], burst[1] - 1]
    results[-1].notes["burst_factor"] = burst[2]

    high = 100.0
    total_high = 2000
    results.append(run_simple(
        "lr_too_high", 3, data, total_high,
        what=f"Clean setup but peak LR {PEAK_LR * high:g} ({high:g}x): the loss falls early in the "
             "warmup, then diverges as the LR ramps up; the ReLU network dies and the loss settles "
             "at the 'predict the class frequencies' level, never recovering as the LR decays.",
        where="",
        window=[0, 10, 20, 40, 60, 80, 100, 150, 200, 500, 1000, 1999],
        lr_lambda=warmup_cosine(total_high, peak_fraction=high)))

    drift_start, drift_rate = 1500, 100

    def drift(step, x, y):
        # From drift_start the input pipeline's normalization goes stale on a drifting stream:
        # the features grow 10x every `drift_rate` steps.  In float16 this ends in overflow.
        if step >= drift_start:
            return x * 10.0 ** ((step - drift_start) / drift_rate), y
        return x, y

    def at_floor_too_long(recs: list[StepRecord]) -> bool:
        # Like DeepSpeed's "Current loss scale already at minimum": give up after 50 steps there.
        tail = recs[-50:]
        return len(tail) == 50 and all(r.skipped and r.loss_scale == 1.0 for r in tail)

    torch.set_flush_denormal(True)  # float16 on CPU is very slow with denormals; deterministic
    try:
        results.append(run_simple(
            "fp16_overflow", 4, data, 2500,
            what="Mixed precision: fp32 master weights, float16 forward/backward, dynamic loss "
                 "scaling (init 65536, x2 after 250 clean steps, /2 and skip the step on inf/NaN "
                 "gradients, floor 1).  From step 1500 the inputs drift up 10x per 100 steps "
                 "(stale normalization), activations grow until float16 overflows.",
            where="",
            window=[],
            lr_lambda=warmup_cosine(3000), corrupt=drift, fp16=True, stop=at_floor_too_long))
    finally:
        torch.set_flush_denormal(False)
    fp = results[-1]
    recs = fp.records[0]
    first_nan = next(r.step for r in recs if not math.isfinite(r.loss))
    floor_at = next(r.step for r in recs if r.loss_scale == 1.0)
    halvings = [r.step for r in recs if r.skipped]
    fp.notes.update(drift_start=drift_start, first_nonfinite_loss_step=first_nan,
                    scale_reaches_floor_step=floor_at,
                    skipped_steps_before_nan=[s for s in halvings if s < first_nan])
    fp.window = sorted({1499, 1540, *[s for s in halvings if s < first_nan][-4:],
                        *range(first_nan - 2, floor_at + 2), recs[-1].step})

    results.append(run_resume(
        5, data,
        what="Clean setup, checkpoints every 500 steps.  The process dies after step 1999; a new "
             "process (second event file) resumes from the step-1500 checkpoint: model, optimizer "
             "and data order restored, but the LR scheduler state is lost, so the LR restarts its "
             "100-step warmup and cosine schedule from scratch.",
        where="",
        window=[1499, 1500, 1501, 1550, 1599, 1650, 1700, 1800, 1999, 2500, 2999],
        total=3000, crash_after=2000, ckpt_step=1500))

    stall = 200
    results.append(run_simple(
        "stalled_lr", 6, data, total,
        what=f"Clean setup; from step {stall} the LR is set to 1e-9 (a scheduler bug), so the "
             "model stops learning.",
        where="",
        window=[100, 150, 199, 200, 201, 300, 500, 1000, 1500, 2000, 2500, 2999],
        lr_lambda=lambda k: base(k) if k < stall else 1e-9 / PEAK_LR))
    results[-1].notes["stall_step"] = stall
    describe(results)
    return results


def _mean(recs: list[StepRecord], a: int, b: int) -> float:
    vals = [r.loss for r in recs if a <= r.step <= b and math.isfinite(r.loss)]
    return sum(vals) / len(vals)


def _std(recs: list[StepRecord], a: int, b: int) -> float:
    vals = np.array([r.loss for r in recs if a <= r.step <= b and math.isfinite(r.loss)])
    return float(vals.std())


def describe(results: list[RunResult]) -> None:
    """Write each run's `where` from what actually happened in it (the README's numbers)."""
    by = {r.name: r for r in results}
    g = lambda x: f"{f32(x):.3g}"  # noqa: E731

    r = by["clean"]
    (recs,) = r.records
    r.where = (f"none: the loss falls smoothly (100-step means {g(_mean(recs, 0, 99))} at 0-99, "
               f"{g(_mean(recs, 1000, 1099))} at 1000-1099, {g(_mean(recs, 2900, 2999))} at "
               f"2900-2999); minibatch noise only")

    r = by["bad_batch"]
    (recs,) = r.records
    a, b = r.notes["bad_steps"]
    pre = _mean(recs, a - 50, a - 1)
    r.where = (f"spike at steps {a}-{b}: loss {g(recs[a].loss)}, {g(recs[b].loss)} (grad_norm "
               f"{g(recs[a].grad_norm)}, {g(recs[b].grad_norm)}) against a mean of {g(pre)} over "
               f"{a - 50}-{a - 1}; step {b + 1} is back at {g(recs[b + 1].loss)} and the mean over "
               f"{b + 1}-{b + 50} is {g(_mean(recs, b + 1, b + 50))}")

    r = by["lr_burst"]
    (recs,) = r.records
    a, b = r.notes["burst_steps"]
    pre = _mean(recs, a - 50, a - 1)
    peak = max(recs[a : b + 11], key=lambda x: x.loss)
    back = next(s for s in range(b + 50, len(recs)) if _mean(recs, s - 49, s) <= 1.05 * pre)
    r.notes["recovered_at_step"] = back
    r.where = (f"LR x{r.notes['burst_factor']:g} at steps {a}-{b}; the loss goes from a mean of "
               f"{g(pre)} over {a - 50}-{a - 1} to {g(peak.loss)} at step {peak.step}, is "
               f"{g(recs[b + 1].loss)} at step {b + 1}, and its 50-step mean is back within 5% of "
               f"the pre-burst mean only at step {back} ({back - b} steps after the burst)")

    r = by["lr_too_high"]
    (recs,) = r.records
    best = min(recs[:300], key=lambda x: x.loss)
    high_from = next(s for s in range(best.step + 49, len(recs)) if _mean(recs, s - 49, s) > 2.0)
    r.window = sorted(set(r.window) | {best.step})
    r.notes.update(best_step=best.step, mean_above_2_from_step=high_from)
    r.where = (f"best loss {g(best.loss)} at step {best.step} (LR {g(best.lr)}); from there the "
               f"loss rises: its 50-step mean is above 2.0 from step {high_from} (LR "
               f"{g(recs[high_from].lr)}) and stays there (mean {g(_mean(recs, 1000, 1999))} over "
               f"1000-1999, against {g(_mean(by['clean'].records[0], 1000, 1999))} for clean)")

    r = by["fp16_overflow"]
    (recs,) = r.records
    n = r.notes
    d = n["drift_start"]
    pre_skips = [s for s in n["skipped_steps_before_nan"] if s < d]
    drift_skips = [s for s in n["skipped_steps_before_nan"] if s >= d]
    top = max(x.loss_scale for x in recs[:d])
    r.where = (f"normal scale sawtooth before the drift (65536 up to {top:g}, overflow skips at "
               f"steps {', '.join(map(str, pre_skips))}); from step {d} the loss rises "
               f"({g(recs[d - 1].loss)} at {d - 1}, {g(_mean(recs, d + 300, d + 349))} mean over "
               f"{d + 300}-{d + 349}) with {len(drift_skips)} overflow skips halving the scale to "
               f"{recs[n['first_nonfinite_loss_step']].loss_scale:g}; first NaN loss at step "
               f"{n['first_nonfinite_loss_step']} (float16 forward overflow); the scale reaches "
               f"the floor 1 at step {n['scale_reaches_floor_step']}; from then on every step "
               f"overflows and is skipped, the run aborts after step {n['stopped_after_step']}")

    r = by["resume"]
    first, second = r.records
    ck = r.notes["checkpoint_step"]
    r.where = (f"file 2 goes back from step {first[-1].step} to {ck}; its step-{ck} loss equals "
               f"file 1's ({g(second[0].loss)}: same weights, same batch); LR {g(second[0].lr)} at "
               f"step {ck} instead of {g(first[ck].lr)}, back up to {g(second[99].lr)} at step "
               f"{ck + 99} where the lost schedule had {g(first[ck + 99].lr)}")

    r = by["stalled_lr"]
    (recs,) = r.records
    st = r.notes["stall_step"]
    clean = by["clean"].records[0]
    r.where = (f"plateau from step {st}: loss mean {g(_mean(recs, st, st + 599))} over {st}-{st + 599} and "
               f"{g(_mean(recs, 2400, 2999))} over 2400-2999 (std {g(_std(recs, st, 2999))}, "
               f"noise only) while the clean run goes {g(_mean(clean, st, st + 599))} -> "
               f"{g(_mean(clean, 2400, 2999))}")


# --------------------------------------------------------------------------- derived files


def jnum(x: float):
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def write_json_stream(res: RunResult, path: Path) -> None:
    """The canonical JSON loss stream: every point of the run in write order, values as written."""
    lines = []
    for recs, walls in zip(res.records, res.wall_times):
        for rec, wt in zip(recs, walls):
            for tag, v in (("train/loss", rec.loss), ("train/grad_norm", rec.grad_norm), ("train/lr", rec.lr)):
                lines.append(json.dumps({"step": rec.step, "tag": tag, "value": jnum(f32(v)), "wall_time": wt}))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"run": ' + json.dumps(res.name) + ', "points": [\n' + ",\n".join(lines) + "\n]}\n")


def write_trainer_state(res: RunResult, path: Path, logging_steps: int = 10) -> None:
    """What transformers.Trainer would have written for this run (trainer_state.json).

    Trainer's conventions: `step` counts optimizer steps from 1, `loss` is the mean training
    loss since the previous log rounded to 4 digits, `grad_norm` the pre-clipping norm of the
    step that logs, `learning_rate` the scheduler's LR after that step (the next step's LR).
    Runtimes are from the simulated clock.
    """
    (recs,) = res.records
    history = []
    n = len(recs)
    eval_by_step = dict(res.evals)
    for k in range(logging_steps, n + 1, logging_steps):
        window = recs[k - logging_steps : k]
        entry = {
            "epoch": k / STEPS_PER_EPOCH,
            "grad_norm": window[-1].grad_norm,
            "learning_rate": recs[k].lr if k < n else res.next_lr,
            "loss": round(sum(r.loss for r in window) / logging_steps, 4),
            "step": k,
        }
        history.append(entry)
        if k in eval_by_step:
            history.append({
                "epoch": k / STEPS_PER_EPOCH,
                "eval_loss": eval_by_step[k],
                "eval_runtime": 0.05,
                "eval_samples_per_second": N_EVAL / 0.05,
                "eval_steps_per_second": (N_EVAL / BATCH) / 0.05,
                "step": k,
            })
    if n not in eval_by_step:
        history.append({"epoch": n / STEPS_PER_EPOCH, "eval_loss": res.final_eval, "eval_runtime": 0.05,
                        "eval_samples_per_second": N_EVAL / 0.05,
                        "eval_steps_per_second": (N_EVAL / BATCH) / 0.05, "step": n})
    params = DIM * 128 + 128 + 128 * 128 + 128 + 128 * CLASSES + CLASSES
    flos = float(6 * params * BATCH * n)
    runtime = n * STEP_SECONDS
    history.append({
        "epoch": n / STEPS_PER_EPOCH,
        "step": n,
        "total_flos": flos,
        "train_loss": sum(r.loss for r in recs) / n,
        "train_runtime": runtime,
        "train_samples_per_second": round(n * BATCH / runtime, 3),
        "train_steps_per_second": round(n / runtime, 3),
    })
    state = {
        "best_global_step": None,
        "best_metric": None,
        "best_model_checkpoint": None,
        "epoch": n / STEPS_PER_EPOCH,
        "eval_steps": 500,
        "global_step": n,
        "is_hyper_param_search": False,
        "is_local_process_zero": True,
        "is_world_process_zero": True,
        "log_history": history,
        "logging_steps": logging_steps,
        "max_steps": n,
        "num_input_tokens_seen": 0,
        "num_train_epochs": math.ceil(n / STEPS_PER_EPOCH),
        "save_steps": 500,
        "stateful_callbacks": {
            "TrainerControl": {
                "args": {"should_epoch_stop": False, "should_evaluate": False, "should_log": False,
                         "should_save": True, "should_training_stop": True},
                "attributes": {},
            }
        },
        "total_flos": flos,
        "train_batch_size": BATCH,
        "trial_name": None,
        "trial_params": None,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state, indent=2, allow_nan=False) + "\n")


def fmt(x: float) -> str:
    x = f32(x)
    if not math.isfinite(x):
        return {True: "NaN"}.get(math.isnan(x), "inf" if x > 0 else "-inf")
    return f"{x:.4g}"


def write_readme(results: list[RunResult], path: Path) -> None:
    lines = [
        "# sample_runs",
        "",
        "Real event files from real tiny training runs (torch, CPU), written by",
        "`torch.utils.tensorboard.SummaryWriter` (simple_value) and generated by",
        "[`make_samples.py`](make_samples.py), which also wrote this file.  Regenerate from the",
        "repository root with the writer venv (torch must never go into the project's `.venv`):",
        "",
        "```",
        "python3 -m venv /tmp/writers",
        "/tmp/writers/bin/pip install torch==2.13.0 tensorboardX tensorboard numpy",
        "/tmp/writers/bin/python sample_runs/make_samples.py",
        "```",
        "",
        f"Every run: MLP 32-128-128-10 (ReLU), AdamW (weight decay 0.01), batch {BATCH}, gradient "
        f"clipping at {CLIP:g}, synthetic 10-class data ({N_TRAIN} train / {N_EVAL} eval samples), "
        f"peak LR {PEAK_LR:g} with {WARMUP}-step warmup and cosine decay unless said otherwise; "
        "seeded and single-threaded, so re-running gives the same curves.  Tags, logged every step "
        "from step 0: `train/loss` (minibatch loss before the update), `train/grad_norm` (total "
        "norm before clipping), `train/lr` (LR used by the step), and `train/loss_scale` in "
        "`fp16_overflow`.  Wall times are simulated: 0.1 s per step.",
        "",
        "| run | what was done | where the pattern is | steps | final eval loss |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in results:
        steps = " + ".join(f"{recs[0].step}-{recs[-1].step}" for recs in r.records)
        lines.append(f"| `{r.name}/` | {r.what} | {r.where} | {steps} | {r.final_eval:.4f} |")
    lines += ["", "## Values around each pattern", "",
              "`train/loss` (and the other tags) at chosen steps, as written (float32).", ""]
    for r in results:
        lines.append(f"### {r.name}")
        lines.append("")
        if r.notes:
            lines.append("Notes: " + ", ".join(f"{k} = {v}" for k, v in r.notes.items()))
            lines.append("")
        has_scale = r.records[0][0].loss_scale is not None
        head = "| file | step | loss | grad_norm | lr |" + (" loss_scale | skipped |" if has_scale else "")
        lines.append(head)
        lines.append("|" + " --- |" * (head.count("|") - 1))
        for fi, recs in enumerate(r.records):
            by_step = {rec.step: rec for rec in recs}
            for s in r.window:
                rec = by_step.get(s)
                if rec is None:
                    continue
                row = f"| {fi + 1} | {s} | {fmt(rec.loss)} | {fmt(rec.grad_norm)} | {fmt(rec.lr)} |"
                if has_scale:
                    row += f" {rec.loss_scale:g} | {'yes' if rec.skipped else ''} |"
                lines.append(row)
        lines.append("")
    lines += [
        "## Other formats",
        "",
        "* `json/bad_batch.json`: the `bad_batch` run as a canonical JSON loss stream "
        "`{\"run\", \"points\": [{\"step\", \"tag\", \"value\", \"wall_time\"}]}` in write order; "
        "values are the float32 values in the event file, non-finite values would be the strings "
        "\"NaN\" / \"Infinity\" / \"-Infinity\".",
        "* `hf_trainer/trainer_state.json`: the `lr_burst` run as a Hugging Face Trainer "
        "`trainer_state.json`: `log_history` every 10 steps (`step` = optimizer steps done, "
        "`loss` = mean of the last 10 minibatch losses rounded to 4 digits, `grad_norm`, "
        "`learning_rate`, `epoch`), eval entries every 500 steps (real eval losses on the held-out "
        "set), and the final training summary entry.  Runtimes in it are simulated.",
        "",
    ]
    path.write_text("\n".join(lines))


def generate() -> None:
    # The runs are written to a staging folder outside the repository and moved in at the end,
    # so the work tree never holds a half-written run (writers name files by host and pid
    # until they are closed and renamed).
    STAGING[0] = Path(tempfile.mkdtemp(prefix="losswatch-samples-"))
    try:
        results = make_runs()
        for name in RUNS + ["json", "hf_trainer"]:
            if (HERE / name).exists():
                shutil.rmtree(HERE / name)
        for name in RUNS:
            shutil.move(str(STAGING[0] / name), str(HERE / name))
    finally:
        shutil.rmtree(STAGING[0], ignore_errors=True)
    by_name = {r.name: r for r in results}
    write_json_stream(by_name["bad_batch"], HERE / "json" / "bad_batch.json")
    write_trainer_state(by_name["lr_burst"], HERE / "hf_trainer" / "trainer_state.json")
    write_readme(results, HERE / "README.md")
    summary = {
        r.name: {"files": r.files, "notes": r.notes, "final_eval": r.final_eval, "evals": r.evals}
        for r in results
    }
    print(json.dumps(summary, indent=1, default=str))


# --------------------------------------------------------------------------- check


def check() -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for name in RUNS:
        acc = EventAccumulator(str(HERE / name), size_guidance={"scalars": 0, "tensors": 0})
        acc.Reload()
        tags = acc.Tags()["scalars"]
        files = sorted(p.name for p in (HERE / name).glob("events.out.tfevents.*"))
        sizes = [(HERE / name / f).stat().st_size for f in files]
        print(f"== {name}: files={list(zip(files, sizes))}")
        print("   counts:", {t: len(acc.Scalars(t)) for t in tags})
        loss = acc.Scalars("train/loss")
        vals = np.array([e.value for e in loss])
        steps = np.array([e.step for e in loss])
        print(f"   loss: first={vals[0]:.4g} min={np.nanmin(vals):.4g} last={vals[-1]:.4g} "
              f"nonfinite={int((~np.isfinite(vals)).sum())} steps {steps.min()}..{steps.max()}")
    doc = json.loads((HERE / "json" / "bad_batch.json").read_text())
    print("json/bad_batch.json:", doc["run"], len(doc["points"]), "points")
    st = json.loads((HERE / "hf_trainer" / "trainer_state.json").read_text())
    print("hf_trainer/trainer_state.json:", len(st["log_history"]), "log_history entries, last:",
          st["log_history"][-2], st["log_history"][-1])
    total = sum(p.stat().st_size for p in HERE.rglob("*") if p.is_file())
    print(f"sample_runs total {total} bytes")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="only read the runs back and print")
    args = ap.parse_args()
    if not args.check:
        generate()
    check()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Real tiny training runs, each with one thing done to it on purpose, for the labelled
corpus (bench/labels/trained_runs.json): restarts and fp16 loss-scale collapse, which no
public log in ../shared shows, and more of the other kinds on a model unlike the sample
runs' MLP.

A character-level transformer language model (2 pre-norm layers, width 64, 4 heads,
context 48, batch 24) trained with AdamW on the licence texts in /usr/share/common-licenses
(about 200 KB of English prose), logged every step with torch's SummaryWriter.  Seeded and
single-threaded: re-running writes the same curves.  Run from the repository root with a
writer virtualenv (torch never goes into the project's .venv):

    python3 -m venv /tmp/writers
    /tmp/writers/bin/pip install torch==2.13.0 tensorboard numpy
    /tmp/writers/bin/python bench/trained/make_trained.py [NAME...]

Progress goes to stderr; each run's event files go to bench/trained/runs/<name>/.  What
was done to each run is its plan below (and its `about` in the labels, which say what the
curves show).
"""

from __future__ import annotations

import copy
import math
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.tensorboard import SummaryWriter

OUT = Path(__file__).resolve().parent / "runs"
LICENSES = Path("/usr/share/common-licenses")
TEXTS = ("GPL-2", "LGPL-2.1", "MPL-1.1", "GFDL-1.3", "LGPL-2", "GFDL-1.2", "MPL-2.0", "Apache-2.0", "Artistic", "GPL-3")
CONTEXT, BATCH, WIDTH = 48, 24, 64
SECONDS_PER_STEP = 0.5  # simulated wall time


@dataclass
class Plan:
    name: str
    about: str
    seed: int
    steps: int = 2000
    peak_lr: float = 3e-3
    warmup: int = 100
    clip: float | None = 1.0
    fp16: bool = False
    lr_factor: Callable[[int], float] = lambda step: 1.0  # what a bug or an edit did to the LR
    corrupt: Callable[[int, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None
    crash_after: int | None = None  # the process dies after this step ...
    resume_from: int | None = None  # ... and a new one resumes from this checkpoint
    schedule_lost: bool = False  # the resume restarts the LR schedule from step 0
    train_chars: int | None = None  # train on only this many characters (overfitting)
    eval_every: int | None = None
    restart_every: int | None = None  # SGDR: the cosine restarts from the peak every this many steps after warmup
    epoch_steps: int | None = None  # Keras's logging: the loss logged is the mean of the epoch's batches so far
    log_every: int | None = None  # HF Trainer's logging_steps: the mean loss of the batches since the last log


class CharLM(nn.Module):
    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, WIDTH)
        self.position = nn.Parameter(torch.randn(CONTEXT, WIDTH) * 0.02)
        layer = nn.TransformerEncoderLayer(WIDTH, 4, 4 * WIDTH, dropout=0.0, batch_first=True, norm_first=True)
        self.layers = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(CONTEXT), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x) + self.position[: x.shape[1]]
        return self.head(self.norm(self.layers(h, mask=self.mask, is_causal=True)))


def corpus() -> tuple[np.ndarray, np.ndarray, int]:
    """The training text (all but the last licence) and the evaluation text (GPL-3), as
    byte ids over the bytes that occur."""
    train = b"\n".join((LICENSES / name).read_bytes() for name in TEXTS[:-1])
    held = (LICENSES / TEXTS[-1]).read_bytes()
    alphabet = sorted(set(train) | set(held))
    table = np.zeros(256, np.int64)
    table[alphabet] = np.arange(len(alphabet))
    return table[np.frombuffer(train, np.uint8)], table[np.frombuffer(held, np.uint8)], len(alphabet)


def batch(text: np.ndarray, seed: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch of a step: a function of seed and step only, so a resume sees the same data."""
    starts = np.random.default_rng([seed, step]).integers(0, len(text) - CONTEXT - 1, BATCH)
    window = np.stack([text[s : s + CONTEXT + 1] for s in starts])
    return torch.from_numpy(window[:, :-1]), torch.from_numpy(window[:, 1:])


def scheduled_lr(plan: Plan, step: int) -> float:
    if step < plan.warmup:
        return plan.peak_lr * (step + 1) / plan.warmup
    if plan.restart_every:  # `CosineAnnealingWarmRestarts`: to 5% of the peak, then back to the peak at once
        into = (step - plan.warmup) % plan.restart_every / plan.restart_every
        return plan.peak_lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * into)))
    progress = (step - plan.warmup) / max(1, plan.steps - plan.warmup)
    return plan.peak_lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def train(plan: Plan) -> None:
    torch.manual_seed(plan.seed)
    train_text, eval_text, vocab = corpus()
    if plan.train_chars:
        train_text = train_text[: plan.train_chars]
    model = CharLM(vocab)
    opt = torch.optim.AdamW(model.parameters(), lr=plan.peak_lr, weight_decay=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16, growth_interval=200) if plan.fp16 else None
    folder = OUT / plan.name
    shutil.rmtree(folder, ignore_errors=True)
    writer = SummaryWriter(str(folder))
    checkpoints: dict[int, dict] = {}
    schedule_origin, wall, step = 0, 1.7e9, 0
    epoch_losses: list[float] = []
    since_log: list[float] = []
    while step < plan.steps:
        if step % 500 == 0:
            checkpoints[step] = copy.deepcopy({"model": model.state_dict(), "opt": opt.state_dict(),
                                               "scaler": scaler.state_dict() if scaler else None})
        lr = scheduled_lr(plan, step - schedule_origin) * plan.lr_factor(step)
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = batch(train_text, plan.seed, step)
        if plan.corrupt:
            x, y = plan.corrupt(step, x, y)
        with torch.autocast("cpu", dtype=torch.float16, enabled=plan.fp16):
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.unscale_(opt)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), plan.clip or math.inf)
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        wall += SECONDS_PER_STEP
        logged = loss.item()
        if plan.epoch_steps:  # a Keras metric: reset at each epoch's start, then the running mean
            if step % plan.epoch_steps == 0:
                epoch_losses = []
            epoch_losses.append(logged)
            logged = sum(epoch_losses) / len(epoch_losses)
        since_log.append(logged)
        if not plan.log_every or (step + 1) % plan.log_every == 0:  # the step's grad norm and LR, as HF logs them
            writer.add_scalar("train/loss", sum(since_log) / len(since_log), step, walltime=wall)
            writer.add_scalar("train/grad_norm", grad_norm.item(), step, walltime=wall)
            writer.add_scalar("train/lr", lr, step, walltime=wall)
            if scaler:
                writer.add_scalar("train/loss_scale", scaler.get_scale(), step, walltime=wall)
            since_log = []
        if (plan.eval_every or plan.epoch_steps) and (step + 1) % (plan.eval_every or plan.epoch_steps) == 0:
            writer.add_scalar("eval/loss", evaluate(model, eval_text, vocab), step, walltime=wall)
        if step == plan.crash_after:
            writer.close()  # the process dies; a new one starts a new event file
            saved = checkpoints[plan.resume_from]
            model.load_state_dict(saved["model"])
            opt.load_state_dict(saved["opt"])
            if scaler:
                scaler.load_state_dict(saved["scaler"])
            if plan.schedule_lost:
                schedule_origin = plan.resume_from
            step, wall = plan.resume_from, wall + 300
            plan.crash_after = None
            writer = SummaryWriter(str(folder))
            progress(f"{plan.name}: resumed at step {step}")
            continue
        if step % 250 == 0:
            progress(f"{plan.name}: step {step} loss {loss.item():.3f}")
        step += 1
    writer.close()


@torch.no_grad()
def evaluate(model: CharLM, text: np.ndarray, vocab: int) -> float:
    x, y = batch(text, 0, 0)
    return F.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1)).item()


def garbage(at: set[int]) -> Callable[[int, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """A corrupted batch at the given steps: the inputs reversed and the targets replaced by
    random byte ids (a reader that lost its framing)."""

    def corrupt(step: int, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if step not in at:
            return x, y
        g = torch.Generator().manual_seed(step)
        return x.flip(1), torch.randint(0, int(y.max()) + 1, y.shape, generator=g)

    return corrupt


def window(start: int, end: int, factor: float) -> Callable[[int], float]:
    return lambda step: factor if start <= step < end else 1.0


def from_step(start: int, factor: float) -> Callable[[int], float]:
    """The LR multiplied by `factor` from `start` to the end (an edit or a bug that stays)."""
    return window(start, math.inf, factor)


def ramp(start: int, per_100: float) -> Callable[[int], float]:
    """The LR multiplied by `per_100` every 100 steps from `start` on, a little at each step
    (an exponential schedule whose factor was inverted)."""
    return lambda step: per_100 ** ((step - start) / 100) if step >= start else 1.0


PLANS = [
    Plan("charlm_clean_a", "Clean run: AdamW, peak LR 3e-3, 100-step warmup, cosine to 0.1x at 2000.", seed=11),
    Plan("charlm_clean_b", "Clean run, another seed, with an evaluation every 100 steps.", seed=12, eval_every=100),
    Plan("charlm_resume_schedule_lost", "The process dies after step 1399; a new one resumes from the step-1000 "
         "checkpoint with model and optimizer restored but the LR schedule restarted from 0 (warmup again).",
         seed=13, crash_after=1399, resume_from=1000, schedule_lost=True),
    Plan("charlm_resume_exact", "The process dies after step 1733; a new one resumes from the step-1500 checkpoint "
         "with everything restored (a clean resume: steps go back 233).", seed=14, crash_after=1733, resume_from=1500),
    Plan("charlm_fp16_lr_jump", "fp16 autocast with torch's GradScaler; from step 1200 the LR is 100x (a config "
         "edit): four overflow skips halve the scale, which then grows back, and the loss settles high.",
         seed=15, fp16=True, lr_factor=from_step(1200, 100.0)),
    Plan("charlm_fp16_collapse", "fp16 autocast with torch's GradScaler, no gradient clipping; from step 900 the "
         "LR is 300x: the loss turns NaN and the scale halves every step down to 0.", seed=16, fp16=True, clip=None, lr_factor=from_step(900, 300.0)),
    Plan("charlm_lr_burst_a", "LR x20 for steps 1000-1019.", seed=18, lr_factor=window(1000, 1020, 20.0)),
    Plan("charlm_lr_burst_b", "LR x15 for steps 1300-1329.", seed=19, lr_factor=window(1300, 1330, 15.0)),
    Plan("charlm_lr_jump_a", "LR x10 from step 1100 to the end (a schedule edit).", seed=20,
         lr_factor=from_step(1100, 10.0)),
    Plan("charlm_lr_jump_b", "LR x8 from step 1400 to the end, with evaluations every 100 steps.", seed=21,
         eval_every=100, lr_factor=from_step(1400, 8.0)),
    Plan("charlm_bad_batch_a", "Corrupted batch at step 1200 (inputs reversed, random targets).", seed=22,
         corrupt=garbage({1200})),
    Plan("charlm_bad_batch_b", "Corrupted batches at steps 1500-1502, no gradient clipping.", seed=23, clip=None,
         corrupt=garbage({1500, 1501, 1502})),
    Plan("charlm_overfit_a", "Trained on 3,000 characters only, evaluated on GPL-3 every 50 steps.", seed=24,
         steps=1500, train_chars=3000, eval_every=50),
    Plan("charlm_overfit_b", "Trained on 6,000 characters only, evaluated on GPL-3 every 50 steps.", seed=25,
         steps=1500, train_chars=6000, eval_every=50),
    Plan("charlm_lr_zero", "A scheduler bug sets the LR to 0 from step 0: the model never leaves its initial loss.",
         seed=26, steps=1500, lr_factor=lambda s: 0.0),
    Plan("charlm_lr_frozen", "A scheduler bug sets the LR to 1e-9 of its value from step 600.", seed=27,
         lr_factor=from_step(600, 1e-9)),
    Plan("charlm_lr_tiny", "A scheduler bug multiplies the LR by 1e-8 from step 700: it still follows the "
         "schedule, eight orders of magnitude down.", seed=29, lr_factor=from_step(700, 1e-8)),
    Plan("charlm_fp16_collapse_b", "fp16 autocast with torch's GradScaler, no gradient clipping; from step 1100 "
         "the LR is 200x.", seed=30, fp16=True, clip=None, lr_factor=from_step(1100, 200.0)),
    Plan("charlm_fp16_clean", "Clean fp16 run (torch's GradScaler), evaluated every 50 steps.", seed=31, fp16=True,
         eval_every=50),
    Plan("charlm_lr_units_bug", "No gradient clipping, fp32; from step 800 the LR is 1000x (a units bug): the loss "
         "jumps to thousands, then settles at 3.2 for good (the model is wrecked).", seed=28, clip=None,
         lr_factor=from_step(800, 1000.0)),
    # A second batch (2026-12-03), all tuning: more of what the held-out part holds, on new seeds.
    Plan("charlm_clean_noclip", "Clean run without gradient clipping, evaluated every 100 steps.", seed=41,
         clip=None, eval_every=100),
    Plan("charlm_clean_hot", "Clean run at twice the peak LR (6e-3), evaluated every 50 steps.", seed=42,
         peak_lr=6e-3, eval_every=50),
    Plan("charlm_lr_units_bug_c", "No gradient clipping; from step 1000 the LR is 300x.", seed=43, clip=None,
         lr_factor=from_step(1000, 300.0)),
    Plan("charlm_bad_batch_c", "Corrupted batch at step 700, no gradient clipping, evaluated every 100 steps.",
         seed=44, clip=None, eval_every=100, corrupt=garbage({700})),
    Plan("charlm_lr_jump_c", "LR x5 from step 1300 to the end, no gradient clipping, evaluated every 100 steps.",
         seed=45, clip=None, eval_every=100, lr_factor=from_step(1300, 5.0)),
    Plan("charlm_fp16_collapse_c", "fp16 autocast with torch's GradScaler, no gradient clipping; from step 1000 "
         "the LR is 100x.", seed=46, fp16=True, clip=None, lr_factor=from_step(1000, 100.0)),
    Plan("charlm_lr_burst_c", "LR x30 for steps 1500-1509, no gradient clipping.", seed=47, clip=None,
         lr_factor=window(1500, 1510, 30.0)),
    Plan("charlm_resume_exact_c", "The process dies after step 1211; a new one resumes from the step-1000 "
         "checkpoint with everything restored (a clean resume: steps go back 211).", seed=48, crash_after=1211,
         resume_from=1000),
    Plan("charlm_clean_hot_noclip", "Clean run at twice the peak LR (6e-3) without gradient clipping.", seed=49,
         peak_lr=6e-3, clip=None),
    Plan("charlm_bad_batch_d", "Corrupted batches at steps 600, 1100 and 1600, gradient clipping at 1.", seed=50,
         corrupt=garbage({600, 1100, 1600})),
    Plan("charlm_lr_burst_d", "LR x8 for steps 900-949, no gradient clipping.", seed=51, clip=None,
         lr_factor=window(900, 950, 8.0)),
    Plan("charlm_clean_long_warmup", "Clean run with a 600-step warmup, no gradient clipping, evaluated every 100 "
         "steps.", seed=52, warmup=600, clip=None, eval_every=100),
    # A third batch (2026-12-04): schedules with warm restarts (SGDR), healthy and not.
    Plan("charlm_sgdr_a", "Clean run on SGDR: after a 100-step warmup the cosine anneals to 5% of the 3e-3 peak "
         "and restarts from the peak every 500 steps; evaluated every 100 steps.", seed=61, restart_every=500,
         eval_every=100),
    Plan("charlm_sgdr_b", "Clean run on SGDR at twice the peak LR (6e-3), restarting every 300 steps, no gradient "
         "clipping.", seed=62, peak_lr=6e-3, restart_every=300, clip=None),
    Plan("charlm_sgdr_bad_batch", "SGDR restarting every 400 steps; corrupted batches at steps 1350-1352, no "
         "gradient clipping.", seed=63, restart_every=400, clip=None, corrupt=garbage({1350, 1351, 1352})),
    Plan("charlm_sgdr_lr_jump", "SGDR restarting every 500 steps; from step 1250 the LR is 10x (a schedule edit): "
         "past its peak, then restarting at 10x.", seed=64, restart_every=500, lr_factor=from_step(1250, 10.0)),
    # A fourth batch (2026-12-04): losses logged as Keras logs them per batch, the running mean of the epoch so far
    # (reset at each epoch's start), evaluated at each epoch's end.
    Plan("charlm_epoch_mean_a", "Clean run logged as Keras logs per batch: the running mean of 200-step epochs.",
         seed=71, epoch_steps=200),
    Plan("charlm_epoch_mean_b", "Clean run logged as Keras logs per batch: the running mean of 150-step epochs, "
         "twice the peak LR (6e-3), no gradient clipping.", seed=72, epoch_steps=150, peak_lr=6e-3, clip=None),
    Plan("charlm_epoch_mean_lr_jump", "Logged as Keras logs per batch (running mean of 250-step epochs); from step "
         "1100 the LR is 10x (a schedule edit).", seed=73, epoch_steps=250, lr_factor=from_step(1100, 10.0)),
    # A sixth batch (2026-12-04): the loss logged as HF Trainer and PyTorch's word_language_model example log it,
    # the mean of the batches since the last log every 10-20 steps (coarse logs, where the public held-out
    # logs' misses lie), 3,000 steps; and twins of the two SGDR runs held out.
    Plan("charlm_interval_clean", "Clean run, the loss logged every 20 steps as the mean since the last log, "
         "evaluated every 200 steps.", seed=81, steps=3000, log_every=20, eval_every=200),
    Plan("charlm_interval_bad_batch", "Corrupted batches at steps 1500-1502, no gradient clipping; the loss logged "
         "every 20 steps as the mean since the last log.", seed=82, steps=3000, log_every=20, clip=None,
         corrupt=garbage({1500, 1501, 1502})),
    Plan("charlm_interval_lr_jump", "LR x10 from step 1600 to the end; the loss logged every 20 steps as the mean "
         "since the last log, evaluated every 200 steps.", seed=83, steps=3000, log_every=20, eval_every=200,
         lr_factor=from_step(1600, 10.0)),
    Plan("charlm_interval_diverge", "No gradient clipping; from step 1400 the LR is 300x (a units bug); the loss "
         "logged every 20 steps as the mean since the last log, evaluated every 200 steps.", seed=84, steps=3000,
         log_every=20, eval_every=200, clip=None, lr_factor=from_step(1400, 300.0)),
    Plan("charlm_interval_burst", "LR x20 for steps 1800-1829; the loss logged every 10 steps as the mean since "
         "the last log.", seed=85, steps=3000, log_every=10, lr_factor=window(1800, 1830, 20.0)),
    Plan("charlm_sgdr_lr_jump_c", "SGDR restarting every 400 steps; from step 1150 the LR is 8x (a schedule "
         "edit).", seed=86, restart_every=400, lr_factor=from_step(1150, 8.0)),
    Plan("charlm_sgdr_hot_c", "Clean run on SGDR at twice the peak LR (6e-3), restarting every 350 steps, no "
         "gradient clipping.", seed=87, peak_lr=6e-3, restart_every=350, clip=None),
    # A seventh batch (2026-12-05), all held out: new seeds of the sudden events and clean runs, to measure
    # precision and recall on runs no detector was tuned on (labelled before any detector ran on them).
    Plan("charlm_lr_units_bug_d", "No gradient clipping; from step 900 the LR is 500x (a units bug).", seed=91,
         clip=None, lr_factor=from_step(900, 500.0)),
    Plan("charlm_lr_burst_e", "LR x25 for steps 1100-1114, no gradient clipping.", seed=92, clip=None,
         lr_factor=window(1100, 1115, 25.0)),
    Plan("charlm_bad_batch_e", "Corrupted batches at steps 800 and 1400, no gradient clipping, evaluated every "
         "100 steps.", seed=93, clip=None, eval_every=100, corrupt=garbage({800, 1400})),
    Plan("charlm_clean_noclip_b", "Clean run without gradient clipping, evaluated every 100 steps.", seed=94,
         clip=None, eval_every=100),
    Plan("charlm_clean_c", "Clean run, evaluated every 50 steps.", seed=95, eval_every=50),
    Plan("charlm_fp16_lr_jump_b", "fp16 autocast with torch's GradScaler; from step 1300 the LR is 50x (a config "
         "edit).", seed=96, fp16=True, lr_factor=from_step(1300, 50.0)),
    Plan("charlm_interval_burst_b", "LR x20 for steps 2100-2129, no gradient clipping; the loss logged every 20 "
         "steps as the mean since the last log.", seed=97, steps=3000, log_every=20, clip=None,
         lr_factor=window(2100, 2130, 20.0)),
    Plan("charlm_overfit_c", "Trained on 4,000 characters only, evaluated on GPL-3 every 50 steps.", seed=98,
         steps=1500, train_chars=4000, eval_every=50),
    Plan("charlm_resume_schedule_lost_b", "The process dies after step 1299; a new one resumes from the step-1000 "
         "checkpoint with model and optimizer restored but the LR schedule restarted from 0 (warmup again).",
         seed=99, crash_after=1299, resume_from=1000, schedule_lost=True),
    Plan("charlm_lr_jump_d", "LR x6 from step 1200 to the end, evaluated every 100 steps.", seed=100,
         eval_every=100, lr_factor=from_step(1200, 6.0)),
    # An eighth batch (2026-12-05), all held out: grad-norm explosions, sudden and gradual, and noisy grad norms
    # that are healthy, to measure precision on grad-norm explosions (labelled before any detector ran on them).
    Plan("charlm_clean_hot_noclip_f", "Clean run at twice the peak LR (6e-3) without gradient clipping, evaluated "
         "every 100 steps.", seed=101, peak_lr=6e-3, clip=None, eval_every=100),
    Plan("charlm_fp16_clean_f", "Clean fp16 run (torch's GradScaler), evaluated every 100 steps.", seed=102,
         fp16=True, eval_every=100),
    Plan("charlm_lr_ramp_f", "No gradient clipping; from step 800 the LR grows 2x every 100 steps (an exponential "
         "schedule whose factor was inverted), evaluated every 100 steps.", seed=103, clip=None, eval_every=100,
         lr_factor=ramp(800, 2.0)),
    Plan("charlm_lr_units_bug_f", "No gradient clipping; from step 1250 the LR is 400x (a units bug).", seed=104,
         clip=None, lr_factor=from_step(1250, 400.0)),
    Plan("charlm_bad_batch_f", "Corrupted batches at steps 950 and 1750, gradient clipping at 1.", seed=105,
         corrupt=garbage({950, 1750})),
    Plan("charlm_interval_lr_jump_f", "LR x10 from step 2000 to the end; the loss logged every 10 steps as the mean "
         "since the last log, evaluated every 200 steps.", seed=106, steps=3000, log_every=10, eval_every=200,
         lr_factor=from_step(2000, 10.0)),
    Plan("charlm_overfit_late_f", "Trained on 30,000 characters only, evaluated on GPL-3 every 100 steps.", seed=107,
         train_chars=30000, eval_every=100),
    Plan("charlm_lr_burst_f", "LR x15 for steps 1600-1629.", seed=108, lr_factor=window(1600, 1630, 15.0)),
    # A ninth batch (2026-12-05), all tuning: trends that build over hundreds of steps (LR ramps, late
    # overfitting), where alerts came 500-700 steps after the labelled onset on the eighth batch.
    Plan("charlm_lr_ramp_g", "No gradient clipping; from step 900 the LR grows 1.5x every 100 steps, evaluated "
         "every 100 steps.", seed=111, clip=None, eval_every=100, lr_factor=ramp(900, 1.5)),
    Plan("charlm_lr_ramp_clip_g", "Gradient clipping at 1; from step 700 the LR grows 2x every 100 steps, "
         "evaluated every 50 steps.", seed=112, eval_every=50, lr_factor=ramp(700, 2.0)),
    Plan("charlm_overfit_late_g", "Trained on 20,000 characters only, evaluated on GPL-3 every 100 steps.", seed=113,
         train_chars=20000, eval_every=100),
    Plan("charlm_overfit_late_interval_g", "Trained on 40,000 characters only, 3,000 steps; the loss logged every "
         "20 steps as the mean since the last log, evaluated every 200 steps.", seed=114, steps=3000,
         train_chars=40000, log_every=20, eval_every=200),
    Plan("charlm_clean_g", "Clean run, evaluated every 100 steps.", seed=115, eval_every=100),
    Plan("charlm_lr_ramp_interval_g", "From step 1500 the LR grows 1.5x every 100 steps, 3,000 steps; the loss "
         "logged every 10 steps as the mean since the last log, evaluated every 200 steps.", seed=116, steps=3000,
         log_every=10, eval_every=200, lr_factor=ramp(1500, 1.5)),
    # A tenth batch (2026-12-05), all held out: the same kinds of trend on new seeds and settings, to measure
    # how early they are told on runs no detector was tuned on (labelled before any detector ran on them).
    Plan("charlm_lr_ramp_h", "Gradient clipping at 1; from step 1000 the LR grows 1.7x every 100 steps, evaluated "
         "every 100 steps.", seed=121, eval_every=100, lr_factor=ramp(1000, 1.7)),
    Plan("charlm_overfit_late_h", "Trained on 25,000 characters only, evaluated on GPL-3 every 100 steps.", seed=122,
         train_chars=25000, eval_every=100),
    Plan("charlm_lr_ramp_interval_h", "No gradient clipping; from step 1200 the LR grows 2x every 100 steps, 3,000 "
         "steps; the loss logged every 20 steps as the mean since the last log, evaluated every 200 steps.",
         seed=123, steps=3000, log_every=20, eval_every=200, clip=None, lr_factor=ramp(1200, 2.0)),
    Plan("charlm_overfit_late_b_h", "Trained on 15,000 characters only, evaluated on GPL-3 every 50 steps.", seed=124,
         train_chars=15000, eval_every=50),
    Plan("charlm_clean_h", "Clean run, evaluated every 50 steps.", seed=125, eval_every=50),
    # An eleventh batch (2026-12-05), all held out: every kind again on new seeds and settings, so that the
    # runs held out until now could be retired and their misses read (labelled before any detector ran on them).
    Plan("charlm_lr_burst_i", "LR x20 for steps 1250-1269.", seed=131, lr_factor=window(1250, 1270, 20.0)),
    Plan("charlm_lr_burst_noclip_i", "LR x12 for steps 1700-1739, no gradient clipping, evaluated every 100 steps.",
         seed=132, clip=None, eval_every=100, lr_factor=window(1700, 1740, 12.0)),
    Plan("charlm_bad_batch_i", "Corrupted batches at steps 650 and 1300, no gradient clipping.", seed=133, clip=None,
         corrupt=garbage({650, 1300})),
    Plan("charlm_bad_batch_clip_i", "Corrupted batches at steps 1000-1001, gradient clipping at 1, evaluated every 50 "
         "steps.", seed=134, eval_every=50, corrupt=garbage({1000, 1001})),
    Plan("charlm_lr_jump_i", "LR x7 from step 1500 to the end, evaluated every 100 steps.", seed=135, eval_every=100,
         lr_factor=from_step(1500, 7.0)),
    Plan("charlm_lr_units_bug_i", "No gradient clipping; from step 1100 the LR is 250x (a units bug).", seed=136,
         clip=None, lr_factor=from_step(1100, 250.0)),
    Plan("charlm_fp16_collapse_i", "fp16 autocast with torch's GradScaler, no gradient clipping; from step 1300 the "
         "LR is 150x.", seed=137, fp16=True, clip=None, lr_factor=from_step(1300, 150.0)),
    Plan("charlm_fp16_clean_i", "Clean fp16 run (torch's GradScaler), evaluated every 50 steps.", seed=138, fp16=True,
         eval_every=50),
    Plan("charlm_clean_hot_noclip_i", "Clean run at twice the peak LR (6e-3) without gradient clipping, evaluated "
         "every 100 steps.", seed=139, peak_lr=6e-3, clip=None, eval_every=100),
    Plan("charlm_interval_clean_i", "Clean run, 3,000 steps; the loss logged every 10 steps as the mean since the "
         "last log, evaluated every 200 steps.", seed=140, steps=3000, log_every=10, eval_every=200),
    Plan("charlm_overfit_i", "Trained on 5,000 characters only, evaluated on GPL-3 every 50 steps.", seed=141,
         steps=1500, train_chars=5000, eval_every=50),
    Plan("charlm_overfit_late_i", "Trained on 22,000 characters only, evaluated on GPL-3 every 100 steps.", seed=142,
         train_chars=22000, eval_every=100),
    Plan("charlm_lr_ramp_i", "Gradient clipping at 1; from step 1100 the LR grows 1.8x every 100 steps, evaluated "
         "every 100 steps.", seed=143, eval_every=100, lr_factor=ramp(1100, 1.8)),
    Plan("charlm_lr_ramp_interval_i", "No gradient clipping; from step 1400 the LR grows 1.6x every 100 steps, 3,000 "
         "steps; the loss logged every 10 steps as the mean since the last log, evaluated every 200 steps.",
         seed=144, steps=3000, log_every=10, eval_every=200, clip=None, lr_factor=ramp(1400, 1.6)),
    Plan("charlm_interval_burst_i", "LR x25 for steps 1900-1919, 3,000 steps; the loss logged every 10 steps as the "
         "mean since the last log.", seed=145, steps=3000, log_every=10, lr_factor=window(1900, 1920, 25.0)),
    Plan("charlm_resume_schedule_lost_i", "The process dies after step 1599; a new one resumes from the step-1500 "
         "checkpoint with model and optimizer restored but the LR schedule restarted from 0 (warmup again).",
         seed=146, crash_after=1599, resume_from=1500, schedule_lost=True),
    Plan("charlm_resume_exact_i", "The process dies after step 1111; a new one resumes from the step-1000 checkpoint "
         "with everything restored (a clean resume: steps go back 111).", seed=147, crash_after=1111, resume_from=1000),
    Plan("charlm_lr_frozen_i", "A scheduler bug sets the LR to 1e-9 of its value from step 800.", seed=148,
         lr_factor=from_step(800, 1e-9)),
    Plan("charlm_sgdr_hot_i", "Clean run on SGDR at twice the peak LR (6e-3), restarting every 400 steps, no "
         "gradient clipping, evaluated every 100 steps.", seed=149, peak_lr=6e-3, restart_every=400, clip=None,
         eval_every=100),
    Plan("charlm_epoch_mean_i", "Clean run logged as Keras logs per batch: the running mean of 200-step epochs, "
         "twice the peak LR (6e-3).", seed=150, epoch_steps=200, peak_lr=6e-3),
    # A twelfth batch (2026-12-05), all held out, so that the eleventh's misses could be read: every kind again,
    # more of it logged every 10 or 20 steps as HF Trainer logs (labelled before any detector ran on them).
    Plan("charlm_lr_burst_j", "LR x15 for steps 1400-1429, evaluated every 100 steps.", seed=151, eval_every=100,
         lr_factor=window(1400, 1430, 15.0)),
    Plan("charlm_lr_burst_interval_j", "LR x20 for steps 1600-1619, no gradient clipping, 3,000 steps; the loss logged "
         "every 20 steps as the mean since the last log.", seed=152, steps=3000, log_every=20, clip=None,
         lr_factor=window(1600, 1620, 20.0)),
    Plan("charlm_bad_batch_j", "Corrupted batches at steps 900 and 1600, gradient clipping at 1.", seed=153,
         corrupt=garbage({900, 1600})),
    Plan("charlm_bad_batch_interval_j", "A corrupted batch at step 1500, no gradient clipping, 3,000 steps; the loss "
         "logged every 10 steps as the mean since the last log.", seed=154, steps=3000, log_every=10, clip=None,
         corrupt=garbage({1500})),
    Plan("charlm_lr_jump_j", "LR x5 from step 1200 to the end, no gradient clipping, evaluated every 50 steps.",
         seed=155, clip=None, eval_every=50, lr_factor=from_step(1200, 5.0)),
    Plan("charlm_lr_jump_interval_j", "LR x8 from step 1800 to the end, 3,000 steps; the loss logged every 20 steps "
         "as the mean since the last log, evaluated every 200 steps.", seed=156, steps=3000, log_every=20,
         eval_every=200, lr_factor=from_step(1800, 8.0)),
    Plan("charlm_lr_units_bug_j", "Gradient clipping at 1; from step 1400 the LR is 300x (a units bug).", seed=157,
         lr_factor=from_step(1400, 300.0)),
    Plan("charlm_fp16_collapse_j", "fp16 autocast with torch's GradScaler, no gradient clipping; from step 1000 the "
         "LR is 100x.", seed=158, fp16=True, clip=None, lr_factor=from_step(1000, 100.0)),
    Plan("charlm_fp16_lr_jump_j", "fp16 autocast with torch's GradScaler, gradient clipping at 1; from step 1500 the "
         "LR is 10x.", seed=159, fp16=True, lr_factor=from_step(1500, 10.0)),
    Plan("charlm_lr_ramp_j", "Gradient clipping at 1; from step 1000 the LR grows 1.5x every 100 steps, evaluated "
         "every 50 steps.", seed=160, eval_every=50, lr_factor=ramp(1000, 1.5)),
    Plan("charlm_lr_ramp_interval_j", "No gradient clipping; from step 1300 the LR grows 1.7x every 100 steps, 3,000 "
         "steps; the loss logged every 20 steps as the mean since the last log, evaluated every 200 steps.",
         seed=161, steps=3000, log_every=20, eval_every=200, clip=None, lr_factor=ramp(1300, 1.7)),
    Plan("charlm_overfit_j", "Trained on 8,000 characters only, evaluated on GPL-3 every 50 steps.", seed=162,
         steps=1800, train_chars=8000, eval_every=50),
    Plan("charlm_overfit_interval_j", "Trained on 30,000 characters only, 3,000 steps; the loss logged every 10 "
         "steps as the mean since the last log, evaluated on GPL-3 every 100 steps.", seed=163, steps=3000,
         log_every=10, train_chars=30000, eval_every=100),
    Plan("charlm_resume_schedule_lost_j", "The process dies after step 1299; a new one resumes from the step-1000 "
         "checkpoint with model and optimizer restored but the LR schedule restarted from 0 (warmup again).",
         seed=164, crash_after=1299, resume_from=1000, schedule_lost=True),
    Plan("charlm_lr_frozen_j", "A scheduler bug sets the LR to 1e-9 of its value from step 1200.", seed=165,
         lr_factor=from_step(1200, 1e-9)),
    Plan("charlm_clean_j", "Clean run, evaluated every 50 steps.", seed=166, eval_every=50),
    Plan("charlm_clean_interval_j", "Clean run, 3,000 steps; the loss logged every 20 steps as the mean since the "
         "last log, evaluated every 200 steps.", seed=167, steps=3000, log_every=20, eval_every=200),
    Plan("charlm_clean_hot_j", "Clean run at 2.5x the peak LR (7.5e-3) with gradient clipping at 1, evaluated every "
         "100 steps.", seed=168, peak_lr=7.5e-3, eval_every=100),
    Plan("charlm_sgdr_j", "Clean run on SGDR, restarting every 500 steps, gradient clipping at 1, evaluated every "
         "100 steps.", seed=169, restart_every=500, eval_every=100),
    Plan("charlm_epoch_mean_lr_jump_j", "Logged as Keras logs per batch (the running mean of 250-step epochs); the LR "
         "x8 from step 1300 to the end.", seed=170, epoch_steps=250, lr_factor=from_step(1300, 8.0)),
    # A thirteenth batch (2026-12-05), all held out, so that the twelfth's misses could be read: more slow
    # divergences and grad norms under clipping, where each held-out batch had held only a few of them.
    Plan("charlm_lr_ramp_k", "Gradient clipping at 1; from step 1100 the LR grows 1.3x every 100 steps, evaluated "
         "every 100 steps.", seed=171, eval_every=100, lr_factor=ramp(1100, 1.3)),
    Plan("charlm_lr_ramp_interval_k", "No gradient clipping; from step 1200 the LR grows 1.5x every 100 steps, 3,000 "
         "steps; the loss logged every 10 steps as the mean since the last log.", seed=172, steps=3000, log_every=10,
         clip=None, lr_factor=ramp(1200, 1.5)),
    Plan("charlm_lr_ramp_coarse_k", "Gradient clipping at 1; from step 900 the LR doubles every 100 steps, 3,000 "
         "steps; the loss logged every 20 steps as the mean since the last log.", seed=173, steps=3000, log_every=20,
         lr_factor=ramp(900, 2.0)),
    Plan("charlm_lr_jump_k", "LR x6 from step 1300 to the end, no gradient clipping.", seed=174, clip=None,
         lr_factor=from_step(1300, 6.0)),
    Plan("charlm_lr_jump_interval_k", "LR x10 from step 2000 to the end, 3,000 steps; the loss logged every 10 steps "
         "as the mean since the last log.", seed=175, steps=3000, log_every=10, lr_factor=from_step(2000, 10.0)),
    Plan("charlm_lr_burst_k", "LR x25 for steps 1100-1109, no gradient clipping.", seed=176, clip=None,
         lr_factor=window(1100, 1110, 25.0)),
    Plan("charlm_bad_batch_k", "Corrupted batches at steps 700, 1300 and 1800, gradient clipping at 0.5.", seed=177,
         clip=0.5, corrupt=garbage({700, 1300, 1800})),
    Plan("charlm_bad_batch_interval_k", "A corrupted batch at step 1200, no gradient clipping, 3,000 steps; the loss "
         "logged every 20 steps as the mean since the last log.", seed=178, steps=3000, log_every=20, clip=None,
         corrupt=garbage({1200})),
    Plan("charlm_fp16_collapse_k", "fp16 autocast with torch's GradScaler, no gradient clipping; from step 1200 the "
         "LR is 50x.", seed=179, fp16=True, clip=None, lr_factor=from_step(1200, 50.0)),
    Plan("charlm_fp16_clean_k", "Clean run, fp16 autocast with torch's GradScaler, gradient clipping at 1.", seed=180,
         fp16=True),
    Plan("charlm_overfit_k", "Trained on 15,000 characters only, 2,500 steps, evaluated on GPL-3 every 100 steps.",
         seed=181, steps=2500, train_chars=15000, eval_every=100),
    Plan("charlm_overfit_interval_k", "Trained on 5,000 characters only, 3,000 steps; the loss logged every 20 steps "
         "as the mean since the last log, evaluated on GPL-3 every 200 steps.", seed=182, steps=3000, log_every=20,
         train_chars=5000, eval_every=200),
    Plan("charlm_resume_exact_k", "The process dies after step 1444; a new one resumes from the step-1000 checkpoint "
         "with everything restored.", seed=183, crash_after=1444, resume_from=1000),
    Plan("charlm_resume_schedule_lost_k", "The process dies after step 1799; a new one resumes from the step-1500 "
         "checkpoint with the LR schedule restarted from 0, 3,000 steps; the loss logged every 10 steps as the mean "
         "since the last log.", seed=184, steps=3000, log_every=10, crash_after=1799, resume_from=1500,
         schedule_lost=True),
    Plan("charlm_lr_frozen_k", "A scheduler bug sets the LR to 1e-9 of its value from step 1000, 3,000 steps; the "
         "loss logged every 20 steps as the mean since the last log.", seed=185, steps=3000, log_every=20,
         lr_factor=from_step(1000, 1e-9)),
    Plan("charlm_clean_k", "Clean run, evaluated every 25 steps.", seed=186, eval_every=25),
    Plan("charlm_clean_interval_k", "Clean run, 3,000 steps; the loss logged every 10 steps as the mean since the "
         "last log, evaluated every 100 steps.", seed=187, steps=3000, log_every=10, eval_every=100),
    Plan("charlm_clean_hot_k", "Clean run at 1.7x the peak LR (5e-3) without gradient clipping, evaluated every "
         "100 steps.", seed=188, peak_lr=5e-3, clip=None, eval_every=100),
    Plan("charlm_sgdr_interval_k", "Clean run on SGDR, restarting every 600 steps, gradient clipping at 1, 3,000 "
         "steps; the loss logged every 20 steps as the mean since the last log.", seed=189, steps=3000, log_every=20,
         restart_every=600),
    Plan("charlm_epoch_mean_lr_ramp_k", "Logged as Keras logs per batch (the running mean of 200-step epochs); from "
         "step 1000 the LR grows 1.5x every 100 steps.", seed=190, epoch_steps=200, lr_factor=ramp(1000, 1.5)),
    # A fourteenth batch (2026-12-05), all held out, so that the thirteenth's misses could be read: every kind
    # again on new seeds and settings, with NaN runs and more LR ramps logged every 10-20 steps.
    Plan("charlm_lr_ramp_l", "No gradient clipping; from step 900 the LR grows 1.8x every 100 steps, evaluated every "
         "100 steps.", seed=191, clip=None, eval_every=100, lr_factor=ramp(900, 1.8)),
    Plan("charlm_lr_ramp_interval_l", "Gradient clipping at 1; from step 1400 the LR grows 1.6x every 100 steps, "
         "3,000 steps; the loss logged every 20 steps as the mean since the last log, evaluated every 200 steps.",
         seed=192, steps=3000, log_every=20, eval_every=200, lr_factor=ramp(1400, 1.6)),
    Plan("charlm_lr_ramp_nan_l", "No gradient clipping; from step 1000 the LR doubles every 100 steps, 2,500 steps; the "
         "loss logged every 10 steps as the mean since the last log.", seed=193, steps=2500, log_every=10, clip=None,
         lr_factor=ramp(1000, 2.0)),
    Plan("charlm_lr_units_bug_l", "No gradient clipping; from step 1300 the LR is 1000x (a units bug).", seed=194,
         clip=None, lr_factor=from_step(1300, 1000.0)),
    Plan("charlm_lr_jump_l", "LR x4 from step 1100 to the end, gradient clipping at 1, evaluated every 50 steps.",
         seed=195, eval_every=50, lr_factor=from_step(1100, 4.0)),
    Plan("charlm_lr_jump_interval_l", "LR x12 from step 1700 to the end, no gradient clipping, 3,000 steps; the loss "
         "logged every 20 steps as the mean since the last log.", seed=196, steps=3000, log_every=20, clip=None,
         lr_factor=from_step(1700, 12.0)),
    Plan("charlm_lr_burst_l", "LR x30 for steps 1300-1304, gradient clipping at 1.", seed=197,
         lr_factor=window(1300, 1305, 30.0)),
    Plan("charlm_lr_burst_interval_l", "LR x15 for steps 1500-1539, gradient clipping at 1, 3,000 steps; the loss "
         "logged every 10 steps as the mean since the last log.", seed=198, steps=3000, log_every=10,
         lr_factor=window(1500, 1540, 15.0)),
    Plan("charlm_bad_batch_l", "Corrupted batches at steps 600 and 1500, no gradient clipping, evaluated every 100 "
         "steps.", seed=199, clip=None, eval_every=100, corrupt=garbage({600, 1500})),
    Plan("charlm_bad_batch_interval_l", "Corrupted batches at steps 1000 and 2200, gradient clipping at 1, 3,000 steps; "
         "the loss logged every 10 steps as the mean since the last log.", seed=200, steps=3000, log_every=10,
         corrupt=garbage({1000, 2200})),
    Plan("charlm_fp16_collapse_l", "fp16 autocast with torch's GradScaler, no gradient clipping; from step 1100 the "
         "LR is 200x.", seed=201, fp16=True, clip=None, lr_factor=from_step(1100, 200.0)),
    Plan("charlm_fp16_lr_jump_l", "fp16 autocast with torch's GradScaler, no gradient clipping; from step 1400 the "
         "LR is 8x.", seed=202, fp16=True, clip=None, lr_factor=from_step(1400, 8.0)),
    Plan("charlm_overfit_l", "Trained on 10,000 characters only, evaluated on GPL-3 every 100 steps.", seed=203,
         train_chars=10000, eval_every=100),
    Plan("charlm_overfit_interval_l", "Trained on 20,000 characters only, 3,000 steps; the loss logged every 10 steps "
         "as the mean since the last log, evaluated on GPL-3 every 100 steps.", seed=204, steps=3000, log_every=10,
         train_chars=20000, eval_every=100),
    Plan("charlm_resume_schedule_lost_l", "The process dies after step 1199; a new one resumes from the step-1000 "
         "checkpoint with the LR schedule restarted from 0.", seed=205, crash_after=1199, resume_from=1000,
         schedule_lost=True),
    Plan("charlm_lr_frozen_l", "A scheduler bug sets the LR to 1e-9 of its value from step 900, evaluated every 100 "
         "steps.", seed=206, eval_every=100, lr_factor=from_step(900, 1e-9)),
    Plan("charlm_clean_l", "Clean run, 3,000 steps, evaluated every 100 steps.", seed=207, steps=3000, eval_every=100),
    Plan("charlm_clean_interval_l", "Clean run at 2x the peak LR (6e-3) without gradient clipping, 3,000 steps; the "
         "loss logged every 20 steps as the mean since the last log.", seed=208, steps=3000, log_every=20,
         peak_lr=6e-3, clip=None),
    Plan("charlm_fp16_clean_l", "Clean run, fp16 autocast with torch's GradScaler, no gradient clipping, evaluated "
         "every 100 steps.", seed=209, fp16=True, clip=None, eval_every=100),
    Plan("charlm_epoch_mean_l", "Clean run logged as Keras logs per batch (the running mean of 250-step epochs).",
         seed=210, epoch_steps=250),
    # A fifteenth batch (2026-12-05), all held out, so that the fourteenth's misses could be read: every kind
    # again on new seeds and settings.
    Plan("charlm_lr_ramp_m", "Gradient clipping at 1; from step 1200 the LR grows 1.7x every 100 steps, evaluated "
         "every 100 steps.", seed=211, eval_every=100, lr_factor=ramp(1200, 1.7)),
    Plan("charlm_lr_ramp_interval_m", "No gradient clipping; from step 1000 the LR grows 1.4x every 100 steps, 3,000 "
         "steps; the loss logged every 10 steps as the mean since the last log.", seed=212, steps=3000, log_every=10,
         clip=None, lr_factor=ramp(1000, 1.4)),
    Plan("charlm_lr_units_bug_m", "Gradient clipping at 1; from step 1600 the LR is 200x, 2,500 steps; the loss logged "
         "every 20 steps as the mean since the last log.", seed=213, steps=2500, log_every=20,
         lr_factor=from_step(1600, 200.0)),
    Plan("charlm_lr_jump_m", "LR x7 from step 900 to the end, no gradient clipping, evaluated every 100 steps.",
         seed=214, clip=None, eval_every=100, lr_factor=from_step(900, 7.0)),
    Plan("charlm_lr_jump_interval_m", "LR x6 from step 1500 to the end, gradient clipping at 1, 3,000 steps; the loss "
         "logged every 10 steps as the mean since the last log.", seed=215, steps=3000, log_every=10,
         lr_factor=from_step(1500, 6.0)),
    Plan("charlm_lr_burst_m", "LR x20 for steps 1200-1219, no gradient clipping, evaluated every 50 steps.", seed=216,
         clip=None, eval_every=50, lr_factor=window(1200, 1220, 20.0)),
    Plan("charlm_lr_burst_interval_m", "LR x25 for steps 1800-1829, no gradient clipping, 3,000 steps; the loss logged "
         "every 20 steps as the mean since the last log.", seed=217, steps=3000, log_every=20, clip=None,
         lr_factor=window(1800, 1830, 25.0)),
    Plan("charlm_bad_batch_m", "Corrupted batches at steps 800, 1100 and 1700, gradient clipping at 1.", seed=218,
         corrupt=garbage({800, 1100, 1700})),
    Plan("charlm_bad_batch_interval_m", "A corrupted batch at step 1900, no gradient clipping, 3,000 steps; the loss "
         "logged every 20 steps as the mean since the last log.", seed=219, steps=3000, log_every=20, clip=None,
         corrupt=garbage({1900})),
    Plan("charlm_fp16_collapse_m", "fp16 autocast with torch's GradScaler, gradient clipping at 1; from step 1300 the "
         "LR is 300x.", seed=220, fp16=True, lr_factor=from_step(1300, 300.0)),
    Plan("charlm_fp16_lr_jump_m", "fp16 autocast with torch's GradScaler, no gradient clipping; from step 1200 the "
         "LR is 12x.", seed=221, fp16=True, clip=None, lr_factor=from_step(1200, 12.0)),
    Plan("charlm_overfit_m", "Trained on 6,000 characters only, evaluated on GPL-3 every 50 steps.", seed=222,
         train_chars=6000, eval_every=50),
    Plan("charlm_overfit_interval_m", "Trained on 25,000 characters only, 3,000 steps; the loss logged every 20 steps "
         "as the mean since the last log, evaluated on GPL-3 every 200 steps.", seed=223, steps=3000, log_every=20,
         train_chars=25000, eval_every=200),
    Plan("charlm_resume_exact_m", "The process dies after step 1333; a new one resumes from the step-1000 checkpoint "
         "with everything restored, evaluated every 100 steps.", seed=224, crash_after=1333, resume_from=1000,
         eval_every=100),
    Plan("charlm_resume_schedule_lost_m", "The process dies after step 1649; a new one resumes from the step-1500 "
         "checkpoint with the LR schedule restarted from 0.", seed=225, crash_after=1649, resume_from=1500,
         schedule_lost=True),
    Plan("charlm_lr_frozen_m", "A scheduler bug sets the LR to 1e-9 of its value from step 1100, 3,000 steps; the "
         "loss logged every 10 steps as the mean since the last log.", seed=226, steps=3000, log_every=10,
         lr_factor=from_step(1100, 1e-9)),
    Plan("charlm_clean_m", "Clean run without gradient clipping, evaluated every 50 steps.", seed=227, clip=None,
         eval_every=50),
    Plan("charlm_clean_interval_m", "Clean run, 3,000 steps; the loss logged every 10 steps as the mean since the "
         "last log, evaluated every 200 steps.", seed=228, steps=3000, log_every=10, eval_every=200),
    Plan("charlm_sgdr_m", "Clean run on SGDR at 1.5x the peak LR (4.5e-3), restarting every 400 steps, gradient "
         "clipping at 1, evaluated every 100 steps.", seed=229, peak_lr=4.5e-3, restart_every=400, eval_every=100),
    Plan("charlm_epoch_mean_lr_jump_m", "Logged as Keras logs per batch (the running mean of 200-step epochs); the LR "
         "x6 from step 1100 to the end.", seed=230, epoch_steps=200, lr_factor=from_step(1100, 6.0)),
    # A sixteenth batch (2026-12-05), all held out, so that the fifteenth's misses could be read: every kind
    # again on new seeds and settings.
    Plan("charlm_lr_ramp_n", "Gradient clipping at 1; from step 1000 the LR grows 1.5x every 100 steps, evaluated "
         "every 50 steps.", seed=231, eval_every=50, lr_factor=ramp(1000, 1.5)),
    Plan("charlm_lr_ramp_interval_n", "No gradient clipping; from step 1300 the LR grows 1.6x every 100 steps, 3,000 "
         "steps; the loss logged every 20 steps as the mean since the last log.", seed=232, steps=3000, log_every=20,
         clip=None, lr_factor=ramp(1300, 1.6)),
    Plan("charlm_lr_units_bug_n", "No gradient clipping; from step 1400 the LR is 100x, 2,500 steps; the loss logged "
         "every 10 steps as the mean since the last log.", seed=233, steps=2500, log_every=10, clip=None,
         lr_factor=from_step(1400, 100.0)),
    Plan("charlm_lr_jump_n", "LR x8 from step 1100 to the end, gradient clipping at 1, evaluated every 100 steps.",
         seed=234, eval_every=100, lr_factor=from_step(1100, 8.0)),
    Plan("charlm_lr_jump_interval_n", "LR x5 from step 1700 to the end, no gradient clipping, 3,000 steps; the loss "
         "logged every 20 steps as the mean since the last log, evaluated every 200 steps.", seed=235, steps=3000,
         log_every=20, eval_every=200, clip=None, lr_factor=from_step(1700, 5.0)),
    Plan("charlm_lr_burst_n", "LR x15 for steps 1000-1014, no gradient clipping, evaluated every 100 steps.",
         seed=236, clip=None, eval_every=100, lr_factor=window(1000, 1015, 15.0)),
    Plan("charlm_lr_burst_interval_n", "LR x30 for steps 2000-2019, no gradient clipping, 3,000 steps; the loss "
         "logged every 10 steps as the mean since the last log.", seed=237, steps=3000, log_every=10, clip=None,
         lr_factor=window(2000, 2020, 30.0)),
    Plan("charlm_bad_batch_n", "Corrupted batches at steps 700 and 1300, no gradient clipping, evaluated every 50 "
         "steps.", seed=238, clip=None, eval_every=50, corrupt=garbage({700, 1300})),
    Plan("charlm_bad_batch_interval_n", "Corrupted batches at steps 1500 and 2200, gradient clipping at 1, 3,000 "
         "steps; the loss logged every 10 steps as the mean since the last log.", seed=239, steps=3000,
         log_every=10, corrupt=garbage({1500, 2200})),
    Plan("charlm_fp16_collapse_n", "fp16 autocast with torch's GradScaler, no gradient clipping; from step 1500 the "
         "LR is 200x.", seed=240, fp16=True, clip=None, lr_factor=from_step(1500, 200.0)),
    Plan("charlm_fp16_clean_n", "Clean run, fp16 autocast with torch's GradScaler, gradient clipping at 1, evaluated "
         "every 100 steps.", seed=241, fp16=True, eval_every=100),
    Plan("charlm_overfit_n", "Trained on 8,000 characters only, evaluated on GPL-3 every 100 steps.", seed=242,
         train_chars=8000, eval_every=100),
    Plan("charlm_overfit_interval_n", "Trained on 15,000 characters only, 3,000 steps; the loss logged every 10 "
         "steps as the mean since the last log, evaluated on GPL-3 every 100 steps.", seed=243, steps=3000,
         log_every=10, train_chars=15000, eval_every=100),
    Plan("charlm_resume_exact_n", "The process dies after step 1444; a new one resumes from the step-1000 checkpoint "
         "with everything restored, evaluated every 50 steps.", seed=244, crash_after=1444, resume_from=1000,
         eval_every=50),
    Plan("charlm_resume_schedule_lost_n", "The process dies after step 1250; a new one resumes from the step-1000 "
         "checkpoint with the LR schedule restarted from 0, 2,500 steps; the loss logged every 10 steps as the mean "
         "since the last log.", seed=245, steps=2500, log_every=10, crash_after=1250, resume_from=1000,
         schedule_lost=True),
    Plan("charlm_lr_frozen_n", "A scheduler bug sets the LR to 1e-9 of its value from step 800, evaluated every 100 "
         "steps.", seed=246, eval_every=100, lr_factor=from_step(800, 1e-9)),
    Plan("charlm_clean_n", "Clean run at a peak LR of 4e-3, 2,500 steps, evaluated every 100 steps.", seed=247,
         steps=2500, peak_lr=4e-3, eval_every=100),
    Plan("charlm_clean_interval_n", "Clean run without gradient clipping, 3,000 steps; the loss logged every 20 "
         "steps as the mean since the last log, evaluated every 200 steps.", seed=248, steps=3000, log_every=20,
         clip=None, eval_every=200),
    Plan("charlm_sgdr_n", "Clean run on SGDR restarting every 300 steps, no gradient clipping, 2,500 steps; the loss "
         "logged every 10 steps as the mean since the last log.", seed=249, steps=2500, restart_every=300,
         clip=None, log_every=10),
    Plan("charlm_epoch_mean_lr_ramp_n", "Logged as Keras logs per batch (the running mean of 150-step epochs); from "
         "step 1200 the LR grows 1.5x every 100 steps.", seed=250, epoch_steps=150, lr_factor=ramp(1200, 1.5)),
    # A seventeenth batch (2026-12-05), all held out, so that the sixteenth's misses could be read: every kind
    # again on new seeds and settings.
    Plan("charlm_lr_ramp_o", "Gradient clipping at 1; from step 1100 the LR grows 1.4x every 100 steps, 2,500 steps; "
         "the loss logged every 10 steps as the mean since the last log, evaluated every 100 steps.", seed=251,
         steps=2500, log_every=10, eval_every=100, lr_factor=ramp(1100, 1.4)),
    Plan("charlm_lr_ramp_interval_o", "No gradient clipping; from step 1500 the LR grows 1.7x every 100 steps, 3,000 "
         "steps; the loss logged every 20 steps as the mean since the last log, evaluated every 200 steps.",
         seed=252, steps=3000, log_every=20, eval_every=200, clip=None, lr_factor=ramp(1500, 1.7)),
    Plan("charlm_lr_units_bug_o", "Gradient clipping at 1; from step 1200 the LR is 200x (a units bug), evaluated "
         "every 50 steps.", seed=253, eval_every=50, lr_factor=from_step(1200, 200.0)),
    Plan("charlm_lr_jump_o", "LR x6 from step 1300 to the end, no gradient clipping, evaluated every 100 steps.",
         seed=254, clip=None, eval_every=100, lr_factor=from_step(1300, 6.0)),
    Plan("charlm_lr_jump_interval_o", "LR x10 from step 1800 to the end, gradient clipping at 1, 3,000 steps; the "
         "loss logged every 10 steps as the mean since the last log.", seed=255, steps=3000, log_every=10,
         lr_factor=from_step(1800, 10.0)),
    Plan("charlm_lr_burst_o", "LR x25 for steps 1200-1209, gradient clipping at 1, evaluated every 50 steps.",
         seed=256, eval_every=50, lr_factor=window(1200, 1210, 25.0)),
    Plan("charlm_lr_burst_interval_o", "LR x20 for steps 1600-1629, no gradient clipping, 3,000 steps; the loss "
         "logged every 20 steps as the mean since the last log, evaluated every 200 steps.", seed=257, steps=3000,
         log_every=20, eval_every=200, clip=None, lr_factor=window(1600, 1630, 20.0)),
    Plan("charlm_bad_batch_o", "Corrupted batches at steps 900 and 1600, gradient clipping at 1.", seed=258,
         corrupt=garbage({900, 1600})),
    Plan("charlm_bad_batch_interval_o", "A corrupted batch at step 1200, no gradient clipping, 3,000 steps; the loss "
         "logged every 10 steps as the mean since the last log, evaluated every 100 steps.", seed=259, steps=3000,
         log_every=10, eval_every=100, clip=None, corrupt=garbage({1200})),
    Plan("charlm_fp16_collapse_o", "fp16 autocast with torch's GradScaler, gradient clipping at 1; from step 1100 the "
         "LR is 500x.", seed=260, fp16=True, lr_factor=from_step(1100, 500.0)),
    Plan("charlm_fp16_lr_jump_o", "fp16 autocast with torch's GradScaler, no gradient clipping; from step 1400 the "
         "LR is 10x, evaluated every 100 steps.", seed=261, fp16=True, clip=None, eval_every=100,
         lr_factor=from_step(1400, 10.0)),
    Plan("charlm_overfit_o", "Trained on 4,000 characters only, evaluated on GPL-3 every 50 steps.", seed=262,
         train_chars=4000, eval_every=50),
    Plan("charlm_overfit_interval_o", "Trained on 20,000 characters only, 3,000 steps; the loss logged every 20 "
         "steps as the mean since the last log, evaluated on GPL-3 every 200 steps.", seed=263, steps=3000,
         log_every=20, train_chars=20000, eval_every=200),
    Plan("charlm_resume_exact_o", "The process dies after step 1555; a new one resumes from the step-1500 checkpoint "
         "with everything restored, evaluated every 100 steps.", seed=264, crash_after=1555, resume_from=1500,
         eval_every=100),
    Plan("charlm_resume_schedule_lost_o", "The process dies after step 1800; a new one resumes from the step-1500 "
         "checkpoint with the LR schedule restarted from 0, 2,500 steps; the loss logged every 10 steps as the mean "
         "since the last log.", seed=265, steps=2500, log_every=10, crash_after=1800, resume_from=1500,
         schedule_lost=True),
    Plan("charlm_lr_frozen_o", "A scheduler bug sets the LR to 1e-9 of its value from step 1300, 3,000 steps; the "
         "loss logged every 20 steps as the mean since the last log, evaluated every 200 steps.", seed=266,
         steps=3000, log_every=20, eval_every=200, lr_factor=from_step(1300, 1e-9)),
    Plan("charlm_clean_o", "Clean run at a peak LR of 5e-3 without gradient clipping, evaluated every 50 steps.",
         seed=267, peak_lr=5e-3, clip=None, eval_every=50),
    Plan("charlm_clean_interval_o", "Clean run, 3,000 steps; the loss logged every 10 steps as the mean since the "
         "last log, evaluated every 100 steps.", seed=268, steps=3000, log_every=10, eval_every=100),
    Plan("charlm_sgdr_o", "Clean run on SGDR at a peak LR of 4e-3, restarting every 500 steps, gradient clipping at "
         "1, evaluated every 100 steps.", seed=269, peak_lr=4e-3, restart_every=500, eval_every=100),
    Plan("charlm_epoch_mean_lr_jump_o", "Logged as Keras logs per batch (the running mean of 250-step epochs); the LR "
         "x8 from step 1300 to the end.", seed=270, epoch_steps=250, lr_factor=from_step(1300, 8.0)),
    # An eighteenth batch (2026-12-05), all held out, so that the seventeenth's misses could be read: every kind
    # again on new seeds and settings.
    Plan("charlm_lr_ramp_p", "Gradient clipping at 1; from step 900 the LR grows 1.3x every 100 steps, evaluated "
         "every 50 steps.", seed=271, eval_every=50, lr_factor=ramp(900, 1.3)),
    Plan("charlm_lr_ramp_interval_p", "Gradient clipping at 1; from step 1400 the LR grows 1.8x every 100 steps, "
         "3,000 steps; the loss logged every 10 steps as the mean since the last log, evaluated every 200 steps.",
         seed=272, steps=3000, log_every=10, eval_every=200, lr_factor=ramp(1400, 1.8)),
    Plan("charlm_lr_units_bug_p", "No gradient clipping; from step 1000 the LR is 1000x (a units bug), 2,500 steps; "
         "the loss logged every 20 steps as the mean since the last log.", seed=273, steps=2500, log_every=20,
         clip=None, lr_factor=from_step(1000, 1000.0)),
    Plan("charlm_lr_jump_p", "LR x7 from step 1500 to the end, gradient clipping at 1, evaluated every 50 steps.",
         seed=274, eval_every=50, lr_factor=from_step(1500, 7.0)),
    Plan("charlm_lr_jump_interval_p", "LR x4 from step 1600 to the end, no gradient clipping, 3,000 steps; the loss "
         "logged every 20 steps as the mean since the last log, evaluated every 200 steps.", seed=275, steps=3000,
         log_every=20, eval_every=200, clip=None, lr_factor=from_step(1600, 4.0)),
    Plan("charlm_lr_burst_p", "LR x10 for steps 1100-1149, no gradient clipping, evaluated every 100 steps.",
         seed=276, clip=None, eval_every=100, lr_factor=window(1100, 1150, 10.0)),
    Plan("charlm_lr_burst_interval_p", "LR x40 for steps 1800-1809, gradient clipping at 1, 3,000 steps; the loss "
         "logged every 10 steps as the mean since the last log.", seed=277, steps=3000, log_every=10,
         lr_factor=window(1800, 1810, 40.0)),
    Plan("charlm_bad_batch_p", "Corrupted batches at steps 1000 and 1001, no gradient clipping, evaluated every 100 "
         "steps.", seed=278, clip=None, eval_every=100, corrupt=garbage({1000, 1001})),
    Plan("charlm_bad_batch_interval_p", "Corrupted batches at steps 1300 and 2400, gradient clipping at 1, 3,000 "
         "steps; the loss logged every 20 steps as the mean since the last log.", seed=279, steps=3000,
         log_every=20, corrupt=garbage({1300, 2400})),
    Plan("charlm_fp16_collapse_p", "fp16 autocast with torch's GradScaler, no gradient clipping; from step 1300 the "
         "LR is 1000x, evaluated every 100 steps.", seed=280, fp16=True, clip=None, eval_every=100,
         lr_factor=from_step(1300, 1000.0)),
    Plan("charlm_fp16_clean_p", "Clean run, fp16 autocast with torch's GradScaler, gradient clipping at 1, 2,500 "
         "steps; the loss logged every 10 steps as the mean since the last log.", seed=281, fp16=True, steps=2500,
         log_every=10),
    Plan("charlm_overfit_p", "Trained on 5,000 characters only, evaluated on GPL-3 every 100 steps.", seed=282,
         train_chars=5000, eval_every=100),
    Plan("charlm_overfit_interval_p", "Trained on 10,000 characters only, 3,000 steps; the loss logged every 10 "
         "steps as the mean since the last log, evaluated on GPL-3 every 100 steps.", seed=283, steps=3000,
         log_every=10, train_chars=10000, eval_every=100),
    Plan("charlm_resume_exact_p", "The process dies after step 1700; a new one resumes from the step-1500 checkpoint "
         "with everything restored, 2,500 steps; the loss logged every 10 steps as the mean since the last log.",
         seed=284, steps=2500, log_every=10, crash_after=1700, resume_from=1500),
    Plan("charlm_resume_schedule_lost_p", "The process dies after step 1400; a new one resumes from the step-1000 "
         "checkpoint with the LR schedule restarted from 0, evaluated every 100 steps.", seed=285,
         crash_after=1400, resume_from=1000, schedule_lost=True, eval_every=100),
    Plan("charlm_lr_frozen_p", "A scheduler bug sets the LR to 1e-9 of its value from step 1000, evaluated every 50 "
         "steps.", seed=286, eval_every=50, lr_factor=from_step(1000, 1e-9)),
    Plan("charlm_clean_p", "Clean run at a peak LR of 2e-3 without gradient clipping, 2,500 steps, evaluated every "
         "100 steps.", seed=287, steps=2500, peak_lr=2e-3, clip=None, eval_every=100),
    Plan("charlm_clean_interval_p", "Clean run, gradient clipping at 1, 3,000 steps; the loss logged every 20 steps "
         "as the mean since the last log, evaluated every 200 steps.", seed=288, steps=3000, log_every=20,
         eval_every=200),
    Plan("charlm_sgdr_p", "Clean run on SGDR at a peak LR of 5e-3, restarting every 400 steps, no gradient clipping, "
         "2,500 steps; the loss logged every 10 steps as the mean since the last log.", seed=289, steps=2500,
         peak_lr=5e-3, restart_every=400, clip=None, log_every=10),
    Plan("charlm_epoch_mean_lr_burst_p", "Logged as Keras logs per batch (the running mean of 200-step epochs); the "
         "LR x20 for steps 1200-1219.", seed=290, epoch_steps=200, lr_factor=window(1200, 1220, 20.0)),
    # A nineteenth batch (2026-12-05), all held out, so that the eighteenth's misses could be read: every kind
    # again on new seeds and settings.
    Plan("charlm_lr_ramp_q", "No gradient clipping; from step 1000 the LR grows 1.6x every 100 steps, evaluated "
         "every 100 steps.", seed=291, clip=None, eval_every=100, lr_factor=ramp(1000, 1.6)),
    Plan("charlm_lr_ramp_interval_q", "Gradient clipping at 1; from step 1200 the LR grows 1.5x every 100 steps, "
         "3,000 steps; the loss logged every 20 steps as the mean since the last log, evaluated every 200 steps.",
         seed=292, steps=3000, log_every=20, eval_every=200, lr_factor=ramp(1200, 1.5)),
    Plan("charlm_lr_units_bug_q", "Gradient clipping at 1; from step 1300 the LR is 300x (a units bug), 2,500 steps; "
         "the loss logged every 10 steps as the mean since the last log.", seed=293, steps=2500, log_every=10,
         lr_factor=from_step(1300, 300.0)),
    Plan("charlm_lr_jump_q", "LR x5 from step 1200 to the end, gradient clipping at 1, evaluated every 50 steps.",
         seed=294, eval_every=50, lr_factor=from_step(1200, 5.0)),
    Plan("charlm_lr_jump_interval_q", "LR x12 from step 1500 to the end, no gradient clipping, 3,000 steps; the loss "
         "logged every 10 steps as the mean since the last log, evaluated every 100 steps.", seed=295, steps=3000,
         log_every=10, eval_every=100, clip=None, lr_factor=from_step(1500, 12.0)),
    Plan("charlm_lr_burst_q", "LR x20 for steps 1400-1404, no gradient clipping, evaluated every 50 steps.",
         seed=296, clip=None, eval_every=50, lr_factor=window(1400, 1405, 20.0)),
    Plan("charlm_lr_burst_interval_q", "LR x15 for steps 2100-2139, gradient clipping at 1, 3,000 steps; the loss "
         "logged every 20 steps as the mean since the last log, evaluated every 200 steps.", seed=297, steps=3000,
         log_every=20, eval_every=200, lr_factor=window(2100, 2140, 15.0)),
    Plan("charlm_bad_batch_q", "Corrupted batches at steps 800, 1400 and 1800, gradient clipping at 1, evaluated every "
         "100 steps.", seed=298, eval_every=100, corrupt=garbage({800, 1400, 1800})),
    Plan("charlm_bad_batch_interval_q", "A corrupted batch at step 1700, no gradient clipping, 3,000 steps; the loss "
         "logged every 10 steps as the mean since the last log.", seed=299, steps=3000, log_every=10, clip=None,
         corrupt=garbage({1700})),
    Plan("charlm_fp16_collapse_q", "fp16 autocast with torch's GradScaler, gradient clipping at 1; from step 1600 the "
         "LR is 300x.", seed=300, fp16=True, lr_factor=from_step(1600, 300.0)),
    Plan("charlm_fp16_lr_jump_q", "fp16 autocast with torch's GradScaler, no gradient clipping; from step 1100 the "
         "LR is 8x.", seed=301, fp16=True, clip=None, lr_factor=from_step(1100, 8.0)),
    Plan("charlm_overfit_q", "Trained on 7,000 characters only, evaluated on GPL-3 every 50 steps.", seed=302,
         train_chars=7000, eval_every=50),
    Plan("charlm_overfit_interval_q", "Trained on 30,000 characters only, 3,000 steps; the loss logged every 20 "
         "steps as the mean since the last log, evaluated on GPL-3 every 200 steps.", seed=303, steps=3000,
         log_every=20, train_chars=30000, eval_every=200),
    Plan("charlm_resume_exact_q", "The process dies after step 1234; a new one resumes from the step-1000 checkpoint "
         "with everything restored, evaluated every 50 steps.", seed=304, crash_after=1234, resume_from=1000,
         eval_every=50),
    Plan("charlm_resume_schedule_lost_q", "The process dies after step 2222; a new one resumes from the step-2000 "
         "checkpoint with the LR schedule restarted from 0, 3,000 steps; the loss logged every 20 steps as the mean "
         "since the last log.", seed=305, steps=3000, log_every=20, crash_after=2222, resume_from=2000,
         schedule_lost=True),
    Plan("charlm_lr_frozen_q", "A scheduler bug sets the LR to 1e-9 of its value from step 700, 2,500 steps; the "
         "loss logged every 10 steps as the mean since the last log.", seed=306, steps=2500, log_every=10,
         lr_factor=from_step(700, 1e-9)),
    Plan("charlm_clean_q", "Clean run, gradient clipping at 1, evaluated every 50 steps.", seed=307, eval_every=50),
    Plan("charlm_clean_interval_q", "Clean run at a peak LR of 5e-3 without gradient clipping, 3,000 steps; the loss "
         "logged every 10 steps as the mean since the last log, evaluated every 100 steps.", seed=308, steps=3000,
         peak_lr=5e-3, clip=None, log_every=10, eval_every=100),
    Plan("charlm_sgdr_q", "Clean run on SGDR restarting every 350 steps, gradient clipping at 1, evaluated every 50 "
         "steps.", seed=309, restart_every=350, eval_every=50),
    Plan("charlm_epoch_mean_bad_batch_q", "Logged as Keras logs per batch (the running mean of 200-step epochs); "
         "corrupted batches at steps 900 and 1500, no gradient clipping.", seed=310, epoch_steps=200, clip=None,
         corrupt=garbage({900, 1500})),
    # Added to the nineteenth batch once its fp16 run under clipping turned out to hold no collapse (its scale fell
    # to 1/64 and stayed), so that the held-out part keeps one: the LR units bug without clipping that collapsed
    # the scale in the earlier batches.
    Plan("charlm_fp16_collapse_b_q", "fp16 autocast with torch's GradScaler, no gradient clipping; from step 1400 the "
         "LR is 1000x, evaluated every 100 steps.", seed=311, fp16=True, clip=None, eval_every=100,
         lr_factor=from_step(1400, 1000.0)),
]


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(names: list[str]) -> None:
    torch.set_num_threads(1)
    for plan in PLANS:
        if not names or plan.name in names:
            train(plan)


if __name__ == "__main__":
    main(sys.argv[1:])

"""Training curves whose truth is known: clean curves shaped like real ones (warmup, decay,
cosine schedules, noise, bf16 rounding, coarse logging), with planted patterns of each kind,
and a scorer that matches what the analyzers found against what was planted.

Used by the tests (which hold precision and recall at floors) and by bench/accuracy.py
(which prints the table)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analyzers.analyze import analyze_run
from analyzers.config import AnalysisConfig
from analyzers.findings import Finding, Kind, Severity, SpikeClass
from analyzers.series import Resume, TagWrites, prepare_run

FAST_STEPS, SLOW_STEPS = 100, 1000  # the analyzers' defaults, which the truth is labelled by
BLIP_SIGMAS = 6.0  # noise this far up is a blip a detector may call a spike


@dataclass(frozen=True)
class Truth:
    kind: Kind
    tag: str
    step: int
    classification: SpikeClass | None = None


@dataclass
class Curve:
    name: str
    steps: np.ndarray
    tags: dict[str, np.ndarray]
    truth: list[Truth] = field(default_factory=list)
    resumes: tuple[Resume, ...] = ()
    evals: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # tag -> (steps, values)
    # steps where the noise itself rose 6 robust sigmas or more: a loss spike found there
    # is neither credited nor counted false (the rule of bench/labels for real curves)
    blips: list[int] = field(default_factory=list)
    bf16: bool = False  # logged in bfloat16: planted patterns are rounded too, as a bf16 loop logs them

    def writes(self) -> dict[str, TagWrites]:
        zero = np.zeros(len(self.steps), np.int32)
        writes = {tag: TagWrites(self.steps, values, zero) for tag, values in self.tags.items()}
        for tag, (steps, values) in self.evals.items():
            writes[tag] = TagWrites(steps, values, np.zeros(len(steps), np.int32))
        return writes

    def findings(self, config: AnalysisConfig = AnalysisConfig()) -> list[Finding]:
        return analyze_run(prepare_run(self.writes(), self.resumes), config)


# -- clean curves ------------------------------------------------------------------------


def clean_curve(
    seed: int,
    *,
    points: int = 4000,
    interval: int = 1,
    noise: float = 0.02,
    heavy_tails: bool = False,
    bf16: bool = False,
    schedule: str = "cosine",
    name: str | None = None,
) -> Curve:
    """Loss, grad norm and LR of a healthy run: warmup, then cosine (or step) decay."""
    rng = np.random.default_rng(seed)
    steps = np.arange(points, dtype=np.int64) * interval
    total = steps[-1] + interval
    t = steps / total
    warmup = 0.03
    lr = 3e-4 * np.where(t < warmup, t / warmup, _decay(t, warmup, schedule))
    start, floor = rng.uniform(6, 11), rng.uniform(1.5, 3.0)
    progress = np.cumsum(lr) / lr.sum()
    loss = floor + (start - floor) * np.exp(-6 * progress)
    if schedule == "step":
        loss *= np.where(t > 0.6, 0.94, 1.0)  # an LR step drop shows as a loss drop
    jitter = rng.standard_t(4, points) / np.sqrt(2) if heavy_tails else rng.standard_normal(points)
    loss = loss * (1 + noise * jitter)
    robust_sigma = 1.4826 * (0.7407 / np.sqrt(2) if heavy_tails else 0.6745)  # MAD of t4 / sqrt 2, of N(0, 1)
    blips = [int(x) for x in steps[jitter >= BLIP_SIGMAS * robust_sigma]]
    grad = (0.25 + 0.6 * np.exp(-8 * t)) * np.exp(0.1 * rng.standard_normal(points))
    if bf16:
        loss, grad = _bf16(loss), _bf16(grad)
    tags = {"train/loss": loss, "train/grad_norm": grad, "train/lr": lr}
    flags = ("-bf16" if bf16 else "") + ("-t4" if heavy_tails else "")
    return Curve(name or f"clean-{schedule}-n{noise}-i{interval}{flags}", steps, tags, blips=blips, bf16=bf16)


def regression_curve(seed: int, *, steps: int = 4000, tail: float = 4.0, batch: int = 32) -> Curve:
    """The minibatch MSE of a small regression trained with SGD, logged before each update
    as a training loop prints it: a one-hidden-layer ReLU net (16 -> 32 -> 1) fitting a
    smooth target whose noise is Student-t with `tail` degrees of freedom.  Heavy-tailed
    targets make the minibatch loss throw 2-3x blips every few dozen steps, and larger ones
    every few hundred: noise, not spikes.  No event is planted."""
    rng = np.random.default_rng(seed)
    dim, hidden, lr = 16, 32, 0.02
    w_true = rng.standard_normal(dim)
    w1, b1 = rng.standard_normal((dim, hidden)) / np.sqrt(dim), np.zeros(hidden)
    w2, b2 = rng.standard_normal(hidden) / np.sqrt(hidden), 0.0
    loss = np.empty(steps)
    for t in range(steps):
        x = rng.standard_normal((batch, dim))
        y = 2 * np.tanh(x @ w_true / 2) + 0.3 * rng.standard_t(tail, batch)
        h = np.maximum(x @ w1 + b1, 0)
        error = h @ w2 + b2 - y
        loss[t] = np.mean(error**2)
        g = 2 * error / batch
        gh = np.outer(g, w2) * (h > 0)
        w2, b2 = w2 - lr * h.T @ g, b2 - lr * g.sum()
        w1, b1 = w1 - lr * x.T @ gh, b1 - lr * gh.sum(0)
    return Curve(f"regression-t{tail:g}-{seed}", np.arange(steps, dtype=np.int64), {"train/loss": loss})


def restart_curve(
    seed: int, *, period: int = 1000, points: int = 6000, interval: int = 1, ramp: int = 0, eval_every: int | None = None,
) -> Curve:
    """A healthy run on SGDR (`CosineAnnealingWarmRestarts`): the LR anneals from 3e-4 to
    5% of it over each `period` steps and jumps back to 3e-4 (or climbs back over `ramp`
    steps, as timm's cycles warm up), and the loss, 2 + 4 exp(-step / 800) with 1% noise,
    stands up to 8% higher while the LR is high: it rises at each restart and falls as the
    LR anneals again.  With `eval_every`, an eval loss every that many points: 1.05x the
    mean of the last 25 train losses, with 0.3% noise.  No event is planted."""
    rng = np.random.default_rng(seed)
    steps = np.arange(points, dtype=np.int64) * interval
    into = steps % period
    lr = 3e-4 * (0.05 + 0.95 * 0.5 * (1 + np.cos(np.pi * into / period)))
    if ramp:
        warming = (into < ramp) & (steps >= period)
        lr[warming] = lr[warming] * (into[warming] + 1) / ramp  # from a tiny LR up to the peak again
    loss = (2 + 4 * np.exp(-steps / 800)) * (1 + 0.08 * lr / 3e-4) * (1 + 0.01 * rng.standard_normal(points))
    grad = 0.5 * np.exp(0.1 * rng.standard_normal(points))
    name = f"sgdr-{period}-i{interval}" + (f"-ramp{ramp}" if ramp else "") + (f"-eval{eval_every}" if eval_every else "")
    curve = Curve(name, steps, {"train/loss": loss, "train/grad_norm": grad, "train/lr": lr})
    if eval_every:
        at = np.arange(eval_every - 1, points, eval_every)
        recent = np.array([loss[max(0, k - 24) : k + 1].mean() for k in at])
        curve.evals["eval/loss"] = (steps[at], 1.05 * recent * (1 + 0.003 * rng.standard_normal(len(at))))
    return curve


def _decay(t: np.ndarray, warmup: float, schedule: str) -> np.ndarray:
    if schedule == "step":
        return np.where(t > 0.6, 0.3, 1.0)
    if schedule == "constant":
        return np.ones_like(t)
    x = (t - warmup) / (1 - warmup)
    return 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * np.clip(x, 0, 1)))


def _bf16(x: np.ndarray) -> np.ndarray:
    """Round to nearest bfloat16 (ties away), as a bf16 training loop logs its loss."""
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + 0x8000) & 0xFFFF0000).view(np.float32).astype(np.float64)


# -- planted patterns ----------------------------------------------------------------------


def _horizons(interval: int) -> tuple[int, int]:
    return max(FAST_STEPS, 2 * interval), max(SLOW_STEPS, 2 * interval)


def plant_spike(curve: Curve, at: int, kind: SpikeClass, rng: np.random.Generator, tag: str = "train/loss") -> None:
    """A spike starting at point index `at`: up within 1-3 steps, then back linearly over a
    duration chosen well inside its class, or (divergent) settling 15-50% higher."""
    interval = int(curve.steps[1] - curve.steps[0])
    fast, slow = _horizons(interval)
    loss = curve.tags[tag]
    ratio = rng.uniform(1.5, 4.0)
    rise = int(rng.integers(1, 4))  # steps: a spike comes within a few steps, however often it is logged
    s = curve.steps
    t0 = s[at]
    up = (s >= t0) & (s < t0 + rise)
    if kind is SpikeClass.DIVERGENT:
        settle = rng.uniform(1.3, 1.6)
        down = s >= t0 + rise
        decay_steps = rng.uniform(50, 200)
        loss[up] *= ratio
        loss[down] *= settle + (ratio - settle) * np.exp(-(s[down] - t0) / decay_steps)
    else:
        span = rng.uniform(0.2, 0.6) * fast if kind is SpikeClass.FAST_RECOVERING else rng.uniform(2.0, 6.0) * fast
        span = max(span, interval) if kind is SpikeClass.FAST_RECOVERING else min(span, 0.6 * slow)
        loss[up] *= ratio
        down = (s >= t0 + rise) & (s < t0 + rise + span)
        loss[down] *= 1 + (ratio - 1) * (1 - (s[down] - t0 - rise) / span)
    if curve.bf16:
        loss[:] = _bf16(loss)
    curve.truth.append(Truth(Kind.LOSS_SPIKE, tag, int(t0), kind))


def plant_explosion(curve: Curve, at: int, rng: np.random.Generator, with_spike: bool) -> None:
    """Grad norm 15-1000x its level for 1-4 points; a fast loss spike 0-5 steps later."""
    grad = curve.tags["train/grad_norm"]
    width = int(rng.integers(1, 5))
    grad[at : at + width] *= 10 ** rng.uniform(1.2, 3.0)
    curve.truth.append(Truth(Kind.GRAD_NORM_EXPLOSION, "train/grad_norm", int(curve.steps[at])))
    if with_spike:
        plant_spike(curve, at + int(rng.integers(0, 3)), SpikeClass.FAST_RECOVERING, rng)


def plant_nonfinite(curve: Curve, at: int, rng: np.random.Generator) -> None:
    """The loss turns NaN (or Inf) at `at` and stays so; the grad norm too, one incident the
    loss tells."""
    bad = float("nan") if rng.random() < 0.7 else float("inf")
    curve.tags["train/loss"][at:] = bad
    curve.tags["train/grad_norm"][at:] = bad
    curve.truth.append(Truth(Kind.NONFINITE, "train/loss", int(curve.steps[at])))


def plant_divergence(curve: Curve, at: int) -> None:
    """The trend turns upward at `at` and keeps rising to ~1.6x by the end, no spike."""
    loss = curve.tags["train/loss"]
    n = len(loss) - at
    loss[at:] *= 1 + 0.6 * (np.arange(n) / n) ** 1.2
    if curve.bf16:
        loss[:] = _bf16(loss)
    curve.truth.append(Truth(Kind.DIVERGENCE, "train/loss", int(curve.steps[at])))


# -- eval losses and plateaus ------------------------------------------------------------


def with_eval(curve: Curve, rng: np.random.Generator, every: int, noise: float = 0.003, tag: str = "eval/loss") -> Curve:
    """An eval loss every `every` points, shaped like the train loss's trend (a little above
    it, with the small noise of an average over an eval set)."""
    at = np.arange(every - 1, len(curve.steps), every)
    trend = _smooth(curve.tags["train/loss"])[at]
    curve.evals[tag] = (curve.steps[at], trend * 1.05 * (1 + noise * rng.standard_normal(len(at))))
    return curve


def _smooth(v: np.ndarray, width: int = 51) -> np.ndarray:
    """A centred running median: the trend a clean eval loss follows."""
    pad = width // 2
    padded = np.concatenate([np.full(pad, v[0]), v, np.full(pad, v[-1])])
    return np.median(np.lib.stride_tricks.sliding_window_view(padded, width), axis=1)


def plant_overfitting(curve: Curve, best: int, rise: float, rng: np.random.Generator, tag: str = "eval/loss") -> None:
    """From eval index `best` on, the eval loss climbs to `rise` (e.g. 0.3 = +30%) above
    its value there by the last evaluation, while the train loss goes on as it was."""
    steps, values = curve.evals[tag]
    n = len(values) - best
    ramp = (np.arange(n) / max(n - 1, 1)) ** 1.2
    values[best:] = values[best] * (1 + rise * ramp) * (1 + 0.003 * rng.standard_normal(n))
    curve.truth.append(Truth(Kind.OVERFITTING, tag, int(steps[best])))


def epoch_curve(seed: int, epochs: int, *, overfit_at: int | None = None, noise: float = 0.01) -> Curve:
    """A Keras-style run logged once per epoch, steps = epochs: train loss falling to the
    end; the validation loss falling with it, then (at `overfit_at`) rising again."""
    rng = np.random.default_rng(seed)
    steps = np.arange(epochs, dtype=np.int64)
    start, floor = rng.uniform(0.5, 2.5), rng.uniform(0.02, 0.2)
    train = floor + (start - floor) * np.exp(-steps / (epochs / 4)) * (1 + noise * rng.standard_normal(epochs))
    val_floor = floor + rng.uniform(0.1, 0.3) * start
    val = val_floor + (start - val_floor) * np.exp(-steps / (epochs / 6))
    if overfit_at is not None:
        val = np.where(steps > overfit_at, val[overfit_at] * (1 + 0.04 * np.clip(steps - overfit_at, 0, None) ** 1.1), val)
    val = val * (1 + 0.003 * rng.standard_normal(epochs))
    curve = Curve(f"epochs-{epochs}" + ("-overfit" if overfit_at is not None else ""), steps, {"train/loss": train})
    curve.evals["val/loss"] = (steps, val)
    if overfit_at is not None:
        best = int(np.argmin(val[: overfit_at + 3]))
        curve.truth.append(Truth(Kind.OVERFITTING, "val/loss", int(steps[best])))
    return curve


def epoch_means(batches: np.ndarray, epoch: int, every: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Per-batch losses (batch i at step i) logged as a Keras or `AverageMeter.avg` loop logs
    them: at every `every`-th batch, the mean of the epoch's batches so far; (steps, means)."""
    steps = np.arange(0, len(batches), every, dtype=np.int64)
    first = steps - steps % epoch
    sums = np.cumsum(batches)
    before = np.where(first > 0, sums[np.maximum(first - 1, 0)], 0.0)
    return steps, (sums[steps] - before) / (steps - first + 1)


def running_mean_curve(seed: int, epoch: int, *, points: int = 3000, noise: float = 0.03, every: int = 1,
                       spike_at: int | None = None, epoch_after: tuple[int, int] | None = None) -> tuple[Curve, np.ndarray]:
    """A run whose train loss is logged as its epoch's running mean (`epoch_means`), and the
    batches' own losses behind it: healthy, or the batches' loss 1.6x from `spike_at` and
    back over 300 steps; `epoch_after`: (step, epoch) the run's epoch changes to."""
    rng = np.random.default_rng(seed)
    n = points * every
    t = np.arange(n)
    batches = (1.5 + 2.5 * np.exp(-t / (n / 6))) * (1 + noise * rng.standard_normal(n))
    if spike_at is not None:
        batches[spike_at : spike_at + 300] *= np.linspace(1.6, 1.0, 300)[: n - spike_at]
    steps, means = epoch_means(batches, epoch, every)
    if epoch_after is not None:
        at, after = epoch_after
        means[steps >= at] = epoch_means(batches[at:], after, every)[1]
    lr = np.full(len(steps), 3e-4)
    return Curve(f"running-mean-e{epoch}-every{every}", steps, {"train/loss": means, "train/lr": lr}), batches


def resumed_mid_epoch(seed: int) -> tuple[dict[str, TagWrites], tuple[Resume, ...], np.ndarray]:
    """Running means of 200-step epochs, the run killed at step 1129 and resumed from its
    checkpoint at 1100, mid-epoch: the resumed process's mean starts afresh at 1100 (and
    resets at 1200 as before).  The writes as a logdir holds them, the resume, and the
    batches of the current view."""
    rng = np.random.default_rng(seed)
    batches = 2.0 * (1 + 0.03 * rng.standard_normal(3000))
    steps, means = epoch_means(batches, 200)
    old = steps < 1130
    again = steps >= 1100
    means_again = means.copy()
    means_again[(steps >= 1100) & (steps < 1200)] = np.cumsum(batches[1100:1200]) / np.arange(1, 101)
    writes = {"train/loss": TagWrites(np.concatenate([steps[old], steps[again]]), np.concatenate([means[old], means_again[again]]),
                                      np.concatenate([np.zeros(old.sum(), np.int32), np.ones(again.sum(), np.int32)]))}
    return writes, (Resume(1129, 1100, 1),), batches


def chance_curve(seed: int, classes: int, points: int = 2000, interval: int = 1) -> Curve:
    """A model that never learns: its train loss at ln K with minibatch noise, its eval loss
    at ln K to four digits, the LR on a normal schedule."""
    rng = np.random.default_rng(seed)
    steps = np.arange(points, dtype=np.int64) * interval
    level = np.log(classes)
    lr = 3e-4 * np.minimum(1, (steps + 1) / (0.03 * steps[-1] + 1))
    curve = Curve(f"chance-{classes}", steps, {"train/loss": level * (1 + 0.01 * rng.standard_normal(points)), "train/lr": lr})
    every = max(1, points // 40)
    curve.evals["eval/loss"] = (steps[every - 1 :: every], np.round(np.full(len(steps[every - 1 :: every]), level), 4))
    curve.truth += [Truth(Kind.PLATEAU, "train/loss", 0), Truth(Kind.PLATEAU, "eval/loss", int(steps[every - 1]))]
    return curve


def coarse_ramp(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A loss logged every 20 steps that falls to 1.25 by step 1200 and then climbs with an
    LR ramp, 1.5% noise (charlm_lr_ramp_interval_h, bench/labels trained, retired): steps
    and values."""
    step = np.arange(19, 3000, 20)
    trend = np.where(step < 1200, 1.25 + 2.75 * np.exp(-step / 250), 1.25 + 0.0011 * (step - 1200))
    return step, trend * (1 + 0.015 * np.random.default_rng(seed).standard_normal(len(step)))


def plant_stalled_lr(curve: Curve, at: int) -> None:
    """The LR is set to 1e-9 at point `at` (a scheduler bug); the loss stops improving."""
    loss, lr = curve.tags["train/loss"], curve.tags["train/lr"]
    trend = _smooth(loss)
    loss[at:] = trend[at] * (1 + (loss[at:] / trend[at:] - 1))
    lr[at:] = 1e-9
    curve.truth.append(Truth(Kind.PLATEAU, "train/loss", int(curve.steps[at])))


def eval_corpus(seed: int = 0) -> list[Curve]:
    """Runs with eval losses and runs that are not learning: clean ones (which must stay
    silent: an eval loss that follows its train loss, a run that flattened as its LR
    decayed, a step schedule's last stage at a tenth of the LR), overfitting on long and
    short series (5-50 evaluations, epochs as steps), an eval loss that diverges with its
    train loss, models at chance level, and a stalled LR."""
    rng = np.random.default_rng(seed + 7)
    corpus = []
    shapes = [
        dict(interval=1, noise=0.02), dict(interval=1, noise=0.03, heavy_tails=True), dict(interval=10, noise=0.02),
        dict(interval=1, noise=0.02, schedule="step"), dict(interval=1, noise=0.01, bf16=True),
        dict(interval=10, noise=0.03, schedule="constant"),
    ]
    for i, shape in enumerate(shapes):
        for rep in range(2):
            base = 50_000 + 1000 * i + 10 * rep
            every = int(rng.choice([50, 100, 200]))
            corpus.append(with_eval(clean_curve(seed + base, **shape), rng, every))
            over = with_eval(clean_curve(seed + base + 1, **shape), rng, every)
            over.name = over.name.replace("clean", "overfit")
            n = len(over.evals["eval/loss"][0])
            plant_overfitting(over, int(rng.uniform(0.4, 0.7) * n), rng.uniform(0.1, 0.4), rng)
            corpus.append(over)
            both = with_eval(clean_curve(seed + base + 2, **shape), rng, every)
            both.name = both.name.replace("clean", "diverging")
            at = int(0.6 * len(both.steps))
            plant_divergence(both, at)
            steps, values = both.evals["eval/loss"]
            after = steps >= both.steps[at]
            values[after] = _smooth(both.tags["train/loss"])[np.searchsorted(both.steps, steps[after])] * 1.05
            first = int(np.flatnonzero(after)[0])
            both.truth.append(Truth(Kind.DIVERGENCE, "eval/loss", int(steps[max(first - 1, 0)])))
            corpus.append(both)
            stalled = clean_curve(seed + base + 3, **shape)
            stalled.name = stalled.name.replace("clean", "stalled-lr")
            plant_stalled_lr(stalled, int(rng.uniform(0.2, 0.5) * len(stalled.steps)))
            corpus.append(stalled)
    for k, epochs in enumerate((5, 8, 20, 50)):
        corpus.append(epoch_curve(seed + 60_000 + k, epochs))
        if epochs >= 8:
            corpus.append(epoch_curve(seed + 61_000 + k, epochs, overfit_at=int(rng.uniform(0.3, 0.5) * epochs)))
    for k, classes in enumerate((2, 4, 10)):
        corpus.append(chance_curve(seed + 62_000 + k, classes, interval=int(rng.choice([1, 10, 50]))))
    return corpus


def plant_unstable_explosions(curve: Curve, at: int, rng: np.random.Generator, *, above_ten: bool) -> None:
    """Issue 10's missed explosions: the grad norm jumps 15-100x at `at` and the loss diverges
    a step later; the norm then stays elevated and noisy (3-5x its calm level, or 20-40x with
    `above_ten`) and jumps again 30-150 points later: to 20-100x its calm level, or 12-60x
    over the elevated level.  A trailing median has risen to the elevated level by then."""
    grad = curve.tags["train/grad_norm"]
    n = len(grad)
    calm = float(np.median(grad[max(0, at - 32) : at]))
    again = at + int(rng.integers(30, 150))
    end = min(n, again + 60)
    level = rng.uniform(20, 40) if above_ten else rng.uniform(3, 5)
    grad[at:end] = calm * level * np.exp(0.15 * rng.standard_normal(end - at))
    grad[at : at + int(rng.integers(1, 4))] = calm * 10 ** rng.uniform(1.2, 2.0)
    jump = level * 10 ** rng.uniform(1.1, 1.8) if above_ten else 10 ** rng.uniform(1.3, 2.0)
    grad[again : again + int(rng.integers(1, 4))] = calm * jump
    curve.truth += [
        Truth(Kind.GRAD_NORM_EXPLOSION, "train/grad_norm", int(curve.steps[at])),
        Truth(Kind.GRAD_NORM_EXPLOSION, "train/grad_norm", int(curve.steps[again])),
    ]
    plant_spike(curve, at + 1, SpikeClass.DIVERGENT, rng)


def plant_fp16(curve: Curve, rng: np.random.Generator, nan_at: int | None = None) -> None:
    """fp16 dynamic loss scaling, one scaler step per logged point: the scale starts at 65536,
    calibrates by four overflow skips (DeepSpeed's 65536 -> 4096 in the first 21 steps), doubles
    after 250 clean points and halves at each overflow skip (the grad norm is +Inf there), one
    every 300-900 points.  With `nan_at`: from 150-400 points before it the run overflows every
    10-50 points, the loss and grad norm turn NaN at `nan_at` (finite once more right after, as
    in sample_runs/fp16_overflow) and stay so, and the scale halves every step to its floor 1.

    Truth: each overflow skip (info) and the NaN onset of the loss (which tells the grad
    norm's too) are `nonfinite`; the collapse starts where the scale shows the drift's first
    overflow (the point after it)."""
    grad = curve.tags["train/grad_norm"]
    n = len(grad)
    drift = n if nan_at is None else nan_at - int(rng.integers(150, 400))
    skips = {0, 4, 9, 20}
    at = 20 + int(rng.integers(300, 900))
    while at < drift:
        skips.add(at)
        at += int(rng.integers(300, 900))
    if nan_at is not None:
        at = max(drift, max(skips) + 4)
        while at < nan_at - 4:
            skips.add(at)
            at += int(rng.integers(10, 50))
    scale = np.empty(n)
    value, clean = 65536.0, 0
    for i in range(n):
        scale[i] = value
        if nan_at is not None and i >= nan_at:
            value = max(1.0, value / 2)
        elif i in skips:
            value, clean = value / 2, 0
        else:
            clean += 1
            if clean == 250:
                value, clean = value * 2, 0
    grad[sorted(skips)] = np.inf
    for i in sorted(skips):
        curve.truth.append(Truth(Kind.NONFINITE, "train/grad_norm", int(curve.steps[i])))
    if nan_at is not None:
        for tag in ("train/loss", "train/grad_norm"):
            curve.tags[tag][nan_at] = np.nan
            curve.tags[tag][nan_at + 2 :] = np.nan
        curve.truth.append(Truth(Kind.NONFINITE, "train/loss", int(curve.steps[nan_at])))
        first = min(i for i in skips if i >= drift)  # the drift's first overflow: the scale halves after it
        curve.truth.append(Truth(Kind.LOSS_SCALE_COLLAPSE, "train/loss_scale", int(curve.steps[first + 1])))
    curve.tags["train/loss_scale"] = scale


def move_grad_norm(curve: Curve, rng: np.random.Generator) -> None:
    """A healthy grad norm that moves: it rises 8x during the LR warmup (the norm grows with
    the LR), then shifts by 3.5x up or 0.3x down at once at 60% of the run (a batch-size
    change on resume, like CPM-Ant's 2.7x) and stays there."""
    grad = curve.tags["train/grad_norm"]
    n = len(grad)
    warm = max(8, int(0.03 * n))
    grad[:warm] *= np.linspace(0.125, 1.0, warm)
    grad[int(0.6 * n) :] *= 3.5 if rng.random() < 0.5 else 0.3


def labelled_corpus(seed: int = 0) -> list[Curve]:
    """Clean curves of every shape, and the same shapes with planted patterns."""
    rng = np.random.default_rng(seed)
    corpus = []
    shapes = [
        dict(interval=1, noise=0.01), dict(interval=1, noise=0.03), dict(interval=1, noise=0.02, bf16=True),
        dict(interval=10, noise=0.02), dict(interval=100, noise=0.02, points=1500),
        dict(interval=1, noise=0.02, schedule="step"), dict(interval=1, noise=0.005, bf16=True),
        dict(interval=1, noise=0.05), dict(interval=1, noise=0.03, heavy_tails=True),
        dict(interval=10, noise=0.03, schedule="constant", bf16=True),
    ]
    for i, shape in enumerate(shapes):
        for rep in range(3):
            base = 1000 * i + 10 * rep
            corpus.append(clean_curve(seed + base, **shape))
            curve = clean_curve(seed + base + 1, **shape)
            curve.name = curve.name.replace("clean", "spikes")
            n = len(curve.steps)
            interval = int(curve.steps[1])
            gap = max(1, 1200 // interval + 2)
            spots = list(range(n // 5, n - gap, gap))
            rng.shuffle(spots)
            kinds = [SpikeClass.FAST_RECOVERING, SpikeClass.SLOW_RECOVERING, SpikeClass.FAST_RECOVERING]
            for at, kind in zip(sorted(spots[:3]), kinds):
                plant_spike(curve, at, kind, rng)
            corpus.append(curve)
            tail = clean_curve(seed + base + 2, **shape)
            tail.name = tail.name.replace("clean", "divergent")
            plant_spike(tail, int(0.7 * len(tail.steps)), SpikeClass.DIVERGENT, rng)
            corpus.append(tail)
            grads = clean_curve(seed + base + 3, **shape)
            grads.name = grads.name.replace("clean", "explosions")
            plant_explosion(grads, int(0.35 * len(grads.steps)), rng, with_spike=True)
            plant_explosion(grads, int(0.65 * len(grads.steps)), rng, with_spike=False)
            corpus.append(grads)
            nan = clean_curve(seed + base + 4, **shape)
            nan.name = nan.name.replace("clean", "nan")
            plant_nonfinite(nan, int(rng.uniform(0.5, 0.9) * len(nan.steps)), rng)
            corpus.append(nan)
            up = clean_curve(seed + base + 5, **shape)
            up.name = up.name.replace("clean", "rising")
            plant_divergence(up, int(0.6 * len(up.steps)))
            corpus.append(up)
    return corpus + grad_norm_corpus(seed)


def grad_norm_corpus(seed: int = 0) -> list[Curve]:
    """Issue 10's grad-norm and fp16 cases on four shapes: explosions during instability,
    fp16 overflow skips before a NaN, and healthy grad norms that move (which must stay quiet).
    Its own random stream, so the curves above do not change with it."""
    rng = np.random.default_rng(seed + 7)
    corpus = []
    shapes = [
        dict(interval=1, noise=0.02), dict(interval=10, noise=0.02), dict(interval=1, noise=0.01, bf16=True),
        dict(interval=100, noise=0.02, points=1500),
    ]
    for i, shape in enumerate(shapes):
        for rep in range(3):
            base = 50_000 + 1000 * i + 10 * rep
            for k, above_ten in enumerate((False, True)):
                curve = clean_curve(seed + base + k, **shape)
                curve.name = curve.name.replace("clean", "unstable-explosions" + ("-high" if above_ten else ""))
                plant_unstable_explosions(curve, int(rng.uniform(0.3, 0.6) * len(curve.steps)), rng, above_ten=above_ten)
                corpus.append(curve)
            healthy = clean_curve(seed + base + 2, **shape)
            healthy.name = healthy.name.replace("clean", "fp16")
            plant_fp16(healthy, rng)
            corpus.append(healthy)
            nan = clean_curve(seed + base + 3, **shape)
            nan.name = nan.name.replace("clean", "fp16-nan")
            plant_fp16(nan, rng, nan_at=int(rng.uniform(0.6, 0.9) * len(nan.steps)))
            corpus.append(nan)
            moving = clean_curve(seed + base + 4, **shape)
            moving.name = moving.name.replace("clean", "clean-moving-grad-norm")
            move_grad_norm(moving, rng)
            corpus.append(moving)
    return corpus


# -- scoring -----------------------------------------------------------------------------


@dataclass
class Score:
    true_positives: int = 0
    false_positives: int = 0
    false_negatives: int = 0
    classified_right: int = 0
    classified: int = 0
    misses: list[str] = field(default_factory=list)
    false_alarms: list[str] = field(default_factory=list)

    @property
    def precision(self) -> float:
        found = self.true_positives + self.false_positives
        return self.true_positives / found if found else 1.0

    @property
    def recall(self) -> float:
        planted = self.true_positives + self.false_negatives
        return self.true_positives / planted if planted else 1.0

    @property
    def classification_accuracy(self) -> float:
        return self.classified_right / self.classified if self.classified else 1.0


SCORED = (
    Kind.LOSS_SPIKE, Kind.GRAD_NORM_EXPLOSION, Kind.NONFINITE, Kind.LOSS_SCALE_COLLAPSE, Kind.DIVERGENCE, Kind.OVERFITTING,
    Kind.PLATEAU,
)


def tolerance(kind: Kind, interval: int, points: int) -> int:
    if kind in (Kind.DIVERGENCE, Kind.PLATEAU, Kind.OVERFITTING):
        return max(10 * interval, int(0.1 * points * interval))  # a trend turns over many steps
    return max(10, 3 * interval)


def score(corpus: list[Curve], config: AnalysisConfig = AnalysisConfig()) -> tuple[dict[Kind, Score], list[str]]:
    """Event-level scores per kind, and the clean curves that raised warnings or worse."""
    scores = {kind: Score() for kind in SCORED}
    loud_clean = []
    for curve in corpus:
        findings = curve.findings(config)
        interval = int(curve.steps[1] - curve.steps[0])
        if not curve.truth and any(f.severity >= Severity.WARNING for f in findings):
            loud_clean.append(f"{curve.name}: " + "; ".join(f.message for f in findings if f.severity >= Severity.WARNING))
        for kind in SCORED:
            _match(curve, kind, [f for f in findings if f.kind is kind], scores[kind], interval)
    return scores, loud_clean


def _match(curve: Curve, kind: Kind, found: list[Finding], score: Score, interval: int) -> None:
    planted = [t for t in curve.truth if t.kind is kind]
    tol = tolerance(kind, interval, len(curve.steps))
    if kind is Kind.LOSS_SPIKE and curve.blips:
        blips = np.array(curve.blips)
        found = [f for f in found if f.tag != "train/loss" or not np.any(np.abs(blips - f.start_step) <= tol)]
    used: set[int] = set()
    for truth in planted:
        near = [
            (abs(f.start_step - truth.step), i) for i, f in enumerate(found)
            if i not in used and f.tag == truth.tag and abs(f.start_step - truth.step) <= tol
        ]
        if not near:
            score.false_negatives += 1
            score.misses.append(f"{curve.name}: {truth.kind.value} at {truth.step}")
            continue
        _, i = min(near)
        used.add(i)
        score.true_positives += 1
        if truth.classification is not None:
            score.classified += 1
            if found[i].classification is truth.classification:
                score.classified_right += 1
            else:
                score.misses.append(
                    f"{curve.name}: {truth.classification.value} at {truth.step} called {found[i].classification.value}"
                )
    for i, f in enumerate(found):
        if i not in used:
            score.false_positives += 1
            score.false_alarms.append(f"{curve.name}: {f.message}")

"""Eval losses as first-class series: an eval loss that rises past its best for several
evaluations, told as overfitting when the train loss keeps falling or stays flat, and as a
divergence when the train loss rises with it (or, with no train loss to compare, when the
eval loss rose before it ever improved).

Works on short series (5-50 evaluations, epochs as steps): each evaluation is already an
average over the eval set, so points are judged one by one, with the noise of an
evaluation taken from second differences of the last `noise_points` evaluations.

* A rise **opens** at the `patience`-th evaluation in a row above the best so far by at
  least `min_rise` (3%) and `z` (3) noise sigmas, if the latest of them is not the lowest
  (a loss coming back down is not rising); one equal to the best is never above it (an
  eval loss at exactly 0 has a margin of 0, and told "0 -> 0" every three evaluations).
  Patience 3 is early stopping's usual setting (Keras and Hugging Face
  `EarlyStopping(patience=...)`).  Its onset is the best step:
  where early stopping would have stopped.  Keras IMDB's validation loss (best 0.275 at
  epoch 4, then 0.285, 0.286, 0.324 ... 0.518 at epoch 19) opens at epoch 7; Marian's
  back-translation blocks (best 1.323, then +2.5%, +5.6%, +8.3% ...) three evaluations
  after their +3% crossing.  Marian's first evaluations (1.368, then 1.421, 1.422, 1.413,
  falling back) and its 0.6% drift over six evaluations stay silent.
* It **closes** at the first evaluation back within half the margin it opened by; the best
  is then reset to that evaluation, so the next rise is measured from where the loss came
  back to.  The margin adds sqrt(2 ln m) noise sigmas for a best that is the lowest of m
  evaluations (the lowest of m noisy values lies about that far below their level), and
  the noise comes from the last `noise_points` (64) evaluations (an estimate from 16 swings
  by 40%); until 10 evaluations give a noise estimate, the `patience` evaluations must rise
  at every step.  On a flat eval loss of pure noise this leaves one false rise per 2,000
  evaluations at 1% noise and per 1,000 at 2%, most in the first ten, and none at 0.5%
  (tests/test_overfitting.py); real eval losses, averages over an eval set, fall steeply
  over their first evaluations.
* A **sure** rise, `patience` evaluations each at least `sure_rise` (10%) above the best,
  opens without a noise estimate and however it moves among them: an eval loss that jumped
  with a diverging train loss and then drifts down by 0.3% an epoch (a word-LM's 5.33 ->
  6.2, 6.1, 6.05 ...) is risen, where each evaluation being the lowest of the last three
  once kept it silent for good (and a char-LM's 1.42 -> 115, 3.6, 3.2 after a 300x LR bug,
  `charlm_interval_diverge`, was "coming back" until its fifth evaluation).  10% is
  5 sigmas of the noisiest eval loss in the tuning logs (the trained runs' 50-step
  evaluations of one batch, 2% between evaluations; the public eval losses 0.01-1%).
* A **held** rise, `held_points` (5) evaluations in a row each at least `sure_rise` (10%)
  above the best and `held_z` (1.5) noise sigmas past the best's own luck (the
  sqrt(2 ln m) above), opens once the noise is known: a noisy eval loss that moved up and
  stays there, where no single evaluation clears the z margin.  A sentiment classifier's
  eval loss, 10% noise around 0.22 after its best 0.196, sat at 0.28-0.29 (+45%) for its
  last five evaluations and was never told: each stood about 4.5 sigmas above the best
  where 3 + 2.4 were asked.  Five points of 1.5 sigmas are as rare in noise as three of
  3, but the noise estimate errs: on flat eval losses of pure noise (20 seeds of 20, 50,
  200 and 1,000 evaluations) false rises went 12 -> 12 at 1% noise, 24 -> 24 at 2%,
  48 -> 51 at 5% and 68 -> 73 at 10% (with 1 sigma: 66 and 87; with 4 points: 55 and
  78), while of 20 synthetic copies of the sentiment curve 16 are told, where 7 were
  (tests/test_overfitting.py).
* On a **dense** eval series (a best that is the lowest of more than `dense_pool`, 1,000,
  evaluations: an eval loss logged every few steps), patience grows by 3 for each doubling
  of that count (6 at 2,000, 23 at 100,000), a rise that closes keeps the count, and the
  train level below takes the last `train_points` train points.  The noise of 64
  evaluations swings (0.024 for a true 0.042 where bench/scale.py's run, eval loss at every
  step with 2% noise, rose falsely), and the best's sqrt(2 ln m) sigmas are counted in it:
  three evaluations in a row then cross the margin by chance, 9 times in 100,000 there.
  With the growing patience, on 100 flat series of 100,000 evaluations each at 1% and at
  2% noise: 5 false rises past the first 1,000 evaluations at each noise level, where
  there were 1,118 and 1,132 (about 11 a series); a rise of 20% per 20,000 steps is still
  found, and judged against a train level of 64 points rather than one
  (tests/test_overfitting.py).  Below 1,000 evaluations
  (Keras epochs, Marian every 5k updates, the trained runs' 50-step evaluations) nothing
  changes.
* The train loss level at the best step and at the latest evaluation is the median of the
  train points logged since the evaluation before it (at most `train_points`): risen by
  more than `train_tolerance` (2%) and 3 noise sigmas is "rose with it".  Without a train
  loss (a Keras `validation` run, logged apart from `train`), an eval loss must first have
  fallen `learned_share` (5%) from its first evaluation to its best to be overfitting: the
  DeepSpeed GPT-2 fine-tune's validation loss went 4.12 -> 4.115 -> 5.92, a divergence.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from analyzers.baseline import DIFF_MAD_TO_SIGMA, median
from analyzers.findings import Finding, Kind, Severity
from analyzers.series import Series
from analyzers.stream import StreamState, detect_at_once, run_lengths
from analyzers.trend import BlockState, cut_blocks, empty_blocks


@dataclass(frozen=True)
class OverfittingConfig:
    patience: int = 3  # evaluations in a row above the best (early stopping's patience)
    min_rise: float = 0.03  # each at least 3% above the best ...
    z: float = 3.0  # ... and 3 noise sigmas of an evaluation
    noise_points: int = 64  # evaluations whose second differences set that noise
    train_tolerance: float = 0.02  # the train loss "rose with it" by more than 2%
    train_points: int = 64  # train points in a level: those since the evaluation before
    learned_share: float = 0.05  # no train loss: fell 5% to its best first, or it is a divergence
    dense_pool: int = 1000  # past a best of this many evaluations (dense), patience grows with it
    sure_rise: float = 0.1  # this far above the best is beyond an evaluation's noise: see the module
    held_points: int = 5  # or this many in a row, once the noise is known ...
    held_z: float = 1.5  # ... each this many noise sigmas (plus the best's) above the best


@dataclass(frozen=True)
class EvalRiseState(StreamState):
    points: BlockState  # blocks of one point: the evaluations, with their noise
    first: float  # the first evaluation
    best: float  # the best so far (since the last rise closed), and where
    best_step: int
    risen_from: int  # the first evaluation of the latest run above a margin: an open rise's, the one that opened it
    recent: np.ndarray  # the last `patience` evaluations, and their steps
    recent_step: np.ndarray
    streak: int  # evaluations in a row above the margin
    held: int  # evaluations in a row above the held margin (the lower)
    open: bool
    evals: int  # evaluations since the best
    pool: int  # evaluations the best is the lowest of (since the start, or the last rise closed)
    gate: float  # an open rise: the margin it opened by; back within half of it closes it
    worst: float  # the highest since the best, and where
    worst_step: int
    now: float  # the latest evaluation, and where
    now_step: int


_AHEAD = 1024  # evaluations looked at a time for the next event


class _Rise:
    """An eval rise's state, changed in place while a feed walks its evaluations."""

    NAMES = ("best", "best_step", "risen_from", "streak", "held", "open", "evals", "pool", "gate", "worst", "worst_step")

    def __init__(self, s: EvalRiseState) -> None:
        for k in self.NAMES:
            setattr(self, k, getattr(s, k))
        self.recent, self.recent_step = s.recent.tolist(), s.recent_step.tolist()

    def fields(self, patience: int) -> dict:
        return {**{k: getattr(self, k) for k in self.NAMES}, "recent": np.array(self.recent[-patience:], float),
                "recent_step": np.array(self.recent_step[-patience:], np.int64)}


class EvalRiseDetector:
    """An eval loss risen past its best; `judge` tells overfitting from divergence."""

    def __init__(self, config: OverfittingConfig = OverfittingConfig()) -> None:
        self.config = config

    def start(self) -> EvalRiseState:
        nan = math.nan
        none = np.zeros(0, np.int64)
        return EvalRiseState(empty_blocks(), nan, math.inf, -1, -1, np.zeros(0), none, 0, 0, False, 0, 0, nan, nan, -1, nan, -1)

    def detect(self, series: Series) -> list[Finding]:
        return detect_at_once(self, series.step, series.value, series.tag)

    def feed(
        self, state: EvalRiseState, step: np.ndarray, value: np.ndarray, tag: str = ""
    ) -> tuple[EvalRiseState, list[Finding], list[Finding]]:
        c = self.config
        points, new = cut_blocks(state.points, step, value, 1, c.noise_points, points=False)
        v, at, sigma = new.level, new.step, new.sigma
        n = len(v)
        s = replace(state, points=points)
        if not n:
            return s, [], self._open(s, tag)
        if math.isnan(s.first):
            s = replace(s, first=float(v[0]))
        x = _Rise(s)
        closed: list[Finding] = []
        j = 0
        # Evaluations are walked by events: quiet stretches and stretches still risen are
        # taken whole, with array operations; only a streak building up goes point by point.
        while j < n:
            if not x.open and x.streak == 0 and x.held == 0:
                j = self._quiet(x, v, at, sigma, j)
            elif x.open:
                j = self._risen(x, s, v, at, sigma, j, tag, closed)
            else:
                self._streak_step(x, float(v[j]), int(at[j]), float(sigma[j]))
                j += 1
        s = replace(s, **x.fields(c.patience), now=float(v[-1]), now_step=int(at[-1]))
        return s, closed, self._open(s, tag)

    def _margin(self, best: np.ndarray | float, sigma: np.ndarray | float, pool: np.ndarray | int):
        """How far above the best an evaluation must be.  The lowest of m noisy evaluations
        lies about sqrt(2 ln m) sigmas below their level, so that much is added to the z
        sigmas: on a flat eval loss of pure noise, three evaluations in a row that far above
        the best are rare, where z sigmas above it are crossed every few dozen."""
        c = self.config
        return np.maximum(c.min_rise * np.abs(best), (c.z + _luck(pool)) * np.asarray(sigma))

    def _held_margin(self, best: np.ndarray | float, sigma: np.ndarray | float, pool: np.ndarray | int):
        """The lower margin `held_points` evaluations in a row must each clear: `held_z`
        sigmas past what the best's own luck puts it below, and never before the noise is
        known (a noise of 0 puts it out of reach)."""
        c = self.config
        sigma = np.asarray(sigma, float)
        return np.where(sigma > 0, np.maximum(c.sure_rise * np.abs(best), (c.held_z + _luck(pool)) * sigma), np.inf)

    def _patience(self, pool: np.ndarray | int, points: int | None = None) -> np.ndarray:
        """Evaluations in a row above the margin that open a rise, for a best that is the
        lowest of `pool` evaluations: `patience`, and past `dense_pool` 3 more per doubling
        of `pool`.  A false rise needs that many in a row above a margin set by a noise
        estimate that, over thousands of evaluations, is sometimes 40% low; each doubling
        of the evaluations doubles the chances to meet such a stretch, each 3 more
        evaluations in a row cut them many times over (a flat eval loss at every step with
        2% noise: 9 rises in 100,000 evaluations at patience 3; this way, one in 20 such
        series has one, see the module)."""
        c = self.config
        doublings = np.log2(np.maximum(np.asarray(pool, float), c.dense_pool) / c.dense_pool)
        return np.ceil((c.patience if points is None else points) * (1 + doublings)).astype(np.int64)

    def _quiet(self, x: _Rise, v: np.ndarray, at: np.ndarray, sigma: np.ndarray, j: int) -> int:
        """New bests and evaluations within the margin, up to the next streak above it that
        may reach `patience` (looked for a bounded stretch at a time, so a long noisy series
        costs O(n)).  Fewer than `patience` evaluations in a row above the margin, followed
        by one that is not, leave nothing behind (the streak is back at 0): they are taken
        with the rest."""
        end = min(len(v), j + _AHEAD)
        lows = np.minimum.accumulate(np.concatenate([[x.best], v[j:end]]))
        before = lows[:-1]  # the best before each evaluation
        is_new = v[j:end] < before
        pool = x.pool + 1 + np.arange(end - j)
        with np.errstate(invalid="ignore"):
            above = (v[j:end] > before) & np.isfinite(before)  # an equal one is no rise: a loss at exactly 0
            up = above & (v[j:end] >= before + self._margin(before, sigma[j:end], pool))
            held = above & (v[j:end] >= before + self._held_margin(before, sigma[j:end], pool))
        k = min(_streak_start(up, self._patience(pool)), _streak_start(held, self._patience(pool, self.config.held_points)))
        if k < end - j:  # taken point by point from the first of its run above either margin
            quiet = np.flatnonzero(~(up | held)[:k])
            k = int(quiet[-1]) + 1 if len(quiet) else 0
        if k:
            better = np.flatnonzero(is_new[:k])
            if len(better):
                last = j + int(better[-1])
                x.best, x.best_step, x.evals = float(v[last]), int(at[last]), j + k - 1 - last
            else:
                x.evals += k
            x.pool += k
            self._remember(x, v[j : j + k], at[j : j + k])
        if k < end - j:
            self._streak_step(x, float(v[j + k]), int(at[j + k]), float(sigma[j + k]))
            k += 1
        return j + k

    def _risen(
        self, x: _Rise, s: EvalRiseState, v: np.ndarray, at: np.ndarray, sigma: np.ndarray, j: int, tag: str,
        closed: list[Finding],
    ) -> int:
        """An open rise: evaluations up to the first back within half the margin, which closes it."""
        end = min(len(v), j + _AHEAD)
        back = np.flatnonzero(v[j:end] <= x.best + x.gate / 2)
        k = int(back[0]) if len(back) else end - j
        if k:
            top = j + int(np.argmax(v[j : j + k]))
            if v[top] > x.worst:
                x.worst, x.worst_step = float(v[top]), int(at[top])
            x.evals += k
            x.pool += k
            self._remember(x, v[j : j + k], at[j : j + k])
        if k == end - j:
            return end
        i = j + k
        self._remember(x, v[i : i + 1], at[i : i + 1])
        over = replace(s, **x.fields(self.config.patience), now=float(v[i]), now_step=int(at[i]))
        closed.append(self._finding(over, tag, end=int(at[i])))
        # on a dense series the evaluation back is the first of thousands of noisy ones to
        # come below the line, no fresh best of one: the count goes on
        pool = x.pool if x.pool > self.config.dense_pool else 1
        x.open, x.evals, x.pool, x.streak, x.held, x.best, x.best_step, x.risen_from, x.worst, x.worst_step = (
            False, 0, pool, 0, 0, float(v[i]), int(at[i]), -1, math.nan, -1
        )
        x.gate = math.nan
        return i + 1

    def _remember(self, x: _Rise, v: np.ndarray, at: np.ndarray) -> None:
        p = self.config.patience
        x.recent = (x.recent + v[-p:].tolist())[-p:]
        x.recent_step = (x.recent_step + at[-p:].tolist())[-p:]

    def _streak_step(self, x: _Rise, v: float, at: int, sigma: float) -> None:
        """One evaluation while a streak above either margin may be building."""
        self._remember(x, np.array([v]), np.array([at]))
        x.evals += 1
        x.pool += 1
        if v < x.best:
            x.best, x.best_step, x.risen_from, x.streak, x.held, x.evals = v, at, -1, 0, 0, 0
            return
        known = math.isfinite(x.best)
        margin = float(self._margin(x.best, sigma, x.pool)) if known else math.inf
        low = float(self._held_margin(x.best, sigma, x.pool)) if known else math.inf
        up, held = v > x.best and v >= x.best + margin, v > x.best and v >= x.best + low
        if not (up or held):
            x.streak = x.held = 0
            return
        if x.streak == x.held == 0:  # a run above a margin begins: where, and its highest so far
            x.risen_from, x.worst, x.worst_step = at, v, at
        elif not v <= x.worst:  # the streak's highest, told once it opens (NaN: not yet kept)
            x.worst, x.worst_step = v, at
        x.streak = x.streak + 1 if up else 0
        x.held = x.held + 1 if held else 0
        rose = x.streak >= int(self._patience(x.pool))
        stayed = x.held >= int(self._patience(x.pool, self.config.held_points))
        if not (rose or stayed):
            return
        sure = min(x.recent) >= x.best + self.config.sure_rise * abs(x.best)
        if v <= min(x.recent) and len(x.recent) > 1 and not sure:
            return  # coming back down
        if sigma == 0 and not sure and any(b <= a for a, b in zip(x.recent, x.recent[1:])):
            return  # noise not known yet (under 10 evaluations): only a rise at every step counts
        x.streak, x.held, x.open, x.gate = 0, 0, True, margin if rose else low

    def _open(self, s: EvalRiseState, tag: str) -> list[Finding]:
        return [self._finding(s, tag, end=None)] if s.open else []

    def _finding(self, s: EvalRiseState, tag: str, end: int | None) -> Finding:
        rise = (s.worst - s.best) / abs(s.best) if s.best else math.inf
        return Finding(
            kind=Kind.OVERFITTING,
            tag=tag,
            severity=Severity.WARNING,
            start_step=s.best_step,
            peak_step=s.worst_step,
            end_step=end,
            peak_value=s.worst,
            baseline=s.best,
            ratio=s.worst / s.best if s.best > 0 else None,
            ongoing=end is None,
            message="",  # said by `judge`, which knows the train loss
            remediation="",
            evidence={
                "best_step": s.best_step, "risen_from": s.risen_from, "best": s.best, "now": s.now, "now_step": s.now_step, "worst": s.worst,
                "rise": rise, "evaluations": s.evals, "first": s.first, "lowest_of": s.pool - s.evals,
            },
        )


def _luck(pool: np.ndarray | int) -> np.ndarray:
    """How many noise sigmas the lowest of `pool` evaluations lies below their level:
    about sqrt(2 ln m)."""
    return np.sqrt(2 * np.log(np.maximum(np.asarray(pool, float), 1.0)))


def _streak_start(up: np.ndarray, patience: np.ndarray) -> int:
    """Where the first run of `up` that reaches its `patience` (that of the evaluation it
    reaches it at; never falling along a run), or runs to the end (it may go on past it),
    begins; len(up) when there is none."""
    runs = run_lengths(up)
    long = np.flatnonzero(runs >= patience)
    k = int(long[0] - patience[long[0]]) + 1 if len(long) else len(up)
    if len(up) and up[-1]:
        k = min(k, len(up) - int(runs[-1]))
    return k


# -- judging a rise against the train loss ---------------------------------------------------

_EVAL_WORD = re.compile(r"(eval|validation|valid|val|test|dev)", re.IGNORECASE)


def train_counterpart(eval_tag: str, losses: Mapping[str, int]) -> str | None:
    """The train loss an eval loss is compared with (`losses`: each train loss's tag and its
    finite points): the one named like it (`val/loss` -> `train/loss`, `eval_loss` ->
    `loss`), else the first.  A loss of one point is no curve: HF Trainer's closing
    `train_loss` (the run's average, at its last step) was taken for `eval_loss`'s twin
    beside its `loss`, and with no level at the best step to read, a Whisper fine-tune's
    overfitting (train loss at 0, eval loss +31% from its first evaluation) was called a
    divergence "before it ever improved"."""
    curves = sorted(tag for tag, points in losses.items() if points > 1)
    for guess in (_EVAL_WORD.sub("train", eval_tag, count=1), _EVAL_WORD.sub("", eval_tag, count=1).strip("/_- ")):
        if guess in curves:
            return guess
    return curves[0] if curves else None


def judge(rise: Finding, eval_series: Series, train: Series | None, config: OverfittingConfig) -> Finding:
    """Overfitting or divergence, with the message and what to do, from the train loss over
    the same steps."""
    e = rise.evidence
    best, best_step = e["best"], rise.start_step
    # the train loss over the rise itself: to the latest evaluation, or to the highest of a
    # rise that is over (after it, a data switch may move both)
    upto = e["now_step"] if rise.ongoing else rise.peak_step
    shown = e["now"] if rise.ongoing else rise.peak_value
    size = f"{best:.4g} -> {shown:.4g}" + (f" ({(shown - best) / abs(best):+.1%})" if best else "")
    evals = f"{e['evaluations']} evaluation{'s' if e['evaluations'] != 1 else ''}"
    head = (
        f"{rise.tag} has risen for {evals} since its best at step {best_step}: {size}"
        if rise.ongoing
        else f"{rise.tag} rose after its best at step {best_step}: {size}, back by step {rise.end_step} ({evals})"
    )
    dense = e.get("lowest_of", 0) > config.dense_pool  # a rise kept from an older version: as before
    change = _train_change(train, eval_series.fstep, best_step, upto, config, dense) if train is not None else None
    if change is not None:
        t0, t1, moved = change
        if moved == "rose":
            return _divergence(rise, f"{head}, and {train.tag} rose with it: {t0:.4g} -> {t1:.4g}", {"train_then": t0, "train_now": t1})
        clause = f"while {train.tag} fell {t0:.4g} -> {t1:.4g}" if moved == "fell" else f"while {train.tag} stayed flat ({t0:.4g} -> {t1:.4g})"
        return _overfitting(rise, f"{head} {clause}", {"train_then": t0, "train_now": t1, "train": moved})
    first = e["first"]
    fell = (first - best) / abs(first) if first else 0.0
    if fell < config.learned_share:
        return _divergence(rise, f"{head}, before it ever improved much (it fell {fell:.1%} from {first:.4g} first)", {"fell_before": fell})
    return _overfitting(rise, f"{head}; no train loss in this run to compare", {"fell_before": fell})


def _overfitting(rise: Finding, text: str, evidence: dict) -> Finding:
    best_step = rise.start_step
    return replace(
        rise,
        kind=Kind.OVERFITTING,
        severity=Severity.WARNING if rise.ongoing else Severity.INFO,
        message=f"{text} (overfitting{'' if rise.ongoing else ', over'})",
        remediation=(
            f"Early stopping would have stopped at step {best_step} (eval loss {rise.baseline:.4g}): keep that "
            "checkpoint. To train further, regularise (dropout, weight decay, data augmentation), add data, lower "
            "the learning rate or shrink the model, and check that the eval set comes from the training data's "
            "distribution."
        ),
        evidence={**rise.evidence, **evidence},
    )


def _divergence(rise: Finding, text: str, evidence: dict) -> Finding:
    best_step = rise.start_step
    return replace(
        rise,
        kind=Kind.DIVERGENCE,
        severity=Severity.CRITICAL if rise.ongoing else Severity.WARNING,
        message=f"{text} (divergence{'' if rise.ongoing else ', over'})",
        remediation=(
            f"Roll back to a checkpoint from before step {best_step} and change the recipe, not just the seed: "
            "lower the learning rate, check the init std, use bf16 rather than fp16, and the data at that point."
        ),
        evidence={**rise.evidence, **evidence},
    )


def _train_change(
    train: Series, eval_steps: np.ndarray, best_step: int, upto: int, config: OverfittingConfig, dense: bool
) -> tuple[float, float, str] | None:
    """The train loss level at the best step and at `upto` (the median of the train points
    logged since the evaluation before each, at most `train_points`; on a `dense` eval
    series, the last `train_points` whatever the evaluations), and whether it fell, stayed
    flat or rose between them."""
    s, v = train.fstep, train.fvalue
    levels = []
    for at in (best_step, upto):
        b = int(np.searchsorted(s, at, side="right"))
        if b == 0:
            return None
        i = int(np.searchsorted(eval_steps, at))  # this evaluation; the one before it, if any
        since = int(np.searchsorted(s, eval_steps[i - 1], side="right")) if i > 0 and not dense else 0
        levels.append(v[max(since, b - config.train_points, 0) : b] if since < b else v[b - 1 : b])
    then, now = levels
    t0, t1 = float(median(then)), float(median(now))
    recent = v[max(0, b - 4 * config.train_points) : b]
    point = float(median(np.abs(np.diff(recent)))) * DIFF_MAD_TO_SIGMA if len(recent) > 2 else 0.0
    sigma = point * 1.2533 * math.sqrt(1 / len(then) + 1 / len(now))
    tolerance = max(config.train_tolerance * abs(t0), 3 * sigma)
    moved = "rose" if t1 - t0 > tolerance else "fell" if t0 - t1 > tolerance else "flat"
    return t0, t1, moved

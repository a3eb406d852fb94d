"""Eval losses as first-class series: an eval loss that rises past its best for several
evaluations, told as overfitting when the train loss keeps falling or stays flat, and as a
divergence when the train loss rises with it (or, with no train loss to compare, when the
eval loss rose before it ever improved).

Works on short series (5-50 evaluations, epochs as steps): each evaluation is already an
average over the eval set, so points are judged one by one, with the noise of an
evaluation taken from second differences of the last `noise_points` evaluations.

* A rise **opens** at the `patience`-th evaluation in a row above the best so far by at
  least `min_rise` (3%) and `z` (3) noise sigmas, if the latest of them is not the lowest
  (a loss coming back down is not rising).  Patience 3 is early stopping's usual setting
  (Keras and Hugging Face `EarlyStopping(patience=...)`).  Its onset is the best step:
  where early stopping would have stopped.  Keras IMDB's validation loss (best 0.275 at
  epoch 4, then 0.285, 0.286, 0.324 ... 0.518 at epoch 19) opens at epoch 7; Marian's
  back-translation blocks (best 1.323, then +2.5%, +5.6%, +8.3% ...) three evaluations
  after their +3% crossing.  Marian's first evaluations (1.368, then 1.421, 1.422, 1.413,
  falling back) and its 0.6% drift over six evaluations stay silent.
* It **closes** at the first evaluation back within half that margin of the best; the best
  is then reset to that evaluation, so the next rise is measured from where the loss came
  back to.
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
from dataclasses import dataclass, replace

import numpy as np

from analyzers.baseline import DIFF_MAD_TO_SIGMA
from analyzers.findings import Finding, Kind, Severity
from analyzers.series import Series
from analyzers.stream import StreamState
from analyzers.trend import BlockState, cut_blocks, empty_blocks


@dataclass(frozen=True)
class OverfittingConfig:
    patience: int = 3  # evaluations in a row above the best (early stopping's patience)
    min_rise: float = 0.03  # each at least 3% above the best ...
    z: float = 3.0  # ... and 3 noise sigmas of an evaluation
    noise_points: int = 16  # evaluations whose second differences set that noise
    train_tolerance: float = 0.02  # the train loss "rose with it" by more than 2%
    train_points: int = 64  # train points in a level: those since the evaluation before
    learned_share: float = 0.05  # no train loss: fell 5% to its best first, or it is a divergence


@dataclass(frozen=True)
class EvalRiseState(StreamState):
    points: BlockState  # blocks of one point: the evaluations, with their noise
    first: float  # the first evaluation
    best: float  # the best so far (since the last rise closed), and where
    best_step: int
    recent: np.ndarray  # the last `patience` evaluations, and their steps
    recent_step: np.ndarray
    streak: int  # evaluations in a row above the margin
    open: bool
    evals: int  # evaluations since the best
    worst: float  # the highest since the best, and where
    worst_step: int
    now: float  # the latest evaluation, and where
    now_step: int
    margin: float  # the margin the latest evaluation was judged by


class EvalRiseDetector:
    """An eval loss risen past its best; `judge` tells overfitting from divergence."""

    def __init__(self, config: OverfittingConfig = OverfittingConfig()) -> None:
        self.config = config

    def start(self) -> EvalRiseState:
        nan = math.nan
        none = np.zeros(0, np.int64)
        return EvalRiseState(empty_blocks(), nan, math.inf, -1, np.zeros(0), none, 0, False, 0, nan, -1, nan, -1, nan)

    def detect(self, series: Series) -> list[Finding]:
        _, closed, still_open = self.feed(self.start(), series.step, series.value, series.tag)
        return closed + still_open

    def feed(
        self, state: EvalRiseState, step: np.ndarray, value: np.ndarray, tag: str = ""
    ) -> tuple[EvalRiseState, list[Finding], list[Finding]]:
        c = self.config
        points, new = cut_blocks(state.points, step, value, 1, c.noise_points)
        s = replace(state, points=points)
        if not len(new.level):
            return s, [], self._open(s, tag)
        if math.isnan(s.first):
            s = replace(s, first=float(new.level[0]))
        closed: list[Finding] = []
        # Short series and few events: one evaluation at a time, with nothing per point
        # beyond a few comparisons (eval series have tens to thousands of points).
        for v, at, sigma in zip(new.level.tolist(), new.step.tolist(), new.sigma.tolist()):
            s = self._step(s, v, at, sigma, tag, closed)
        return s, closed, self._open(s, tag)

    def _step(self, s: EvalRiseState, v: float, at: int, sigma: float, tag: str, closed: list[Finding]) -> EvalRiseState:
        c = self.config
        margin = max(c.min_rise * abs(s.best), c.z * sigma) if math.isfinite(s.best) else math.inf
        recent, recent_step = np.append(s.recent, v)[-c.patience :], np.append(s.recent_step, at)[-c.patience :]
        s = replace(s, recent=recent, recent_step=recent_step, now=v, now_step=at, margin=margin, evals=s.evals + 1)
        if s.open:
            if v <= s.best + margin / 2:
                closed.append(self._finding(replace(s, evals=s.evals - 1), tag, end=at))
                return replace(s, open=False, evals=0, streak=0, best=v, best_step=at, worst=math.nan, worst_step=-1)
            return replace(s, worst=v, worst_step=at) if v > s.worst else s
        if v < s.best:
            return replace(s, best=v, best_step=at, streak=0, evals=0)
        if v < s.best + margin:
            return replace(s, streak=0)
        streak = s.streak + 1
        if streak < c.patience or v <= float(recent.min()) and len(recent) > 1:
            return replace(s, streak=streak)  # not yet, or coming back down
        worst = int(np.argmax(recent))
        return replace(s, streak=0, open=True, worst=float(recent[worst]), worst_step=int(recent_step[worst]))

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
                "best_step": s.best_step, "best": s.best, "now": s.now, "now_step": s.now_step, "worst": s.worst,
                "rise": rise, "evaluations": s.evals, "first": s.first,
            },
        )


# -- judging a rise against the train loss ---------------------------------------------------

_EVAL_WORD = re.compile(r"(eval|validation|valid|val|test|dev)", re.IGNORECASE)


def train_counterpart(eval_tag: str, losses: list[Series]) -> Series | None:
    """The train loss an eval loss is compared with: the one named like it (`val/loss` ->
    `train/loss`, `eval_loss` -> `loss`), else the first."""
    if not losses:
        return None
    by_name = {s.tag: s for s in losses}
    for guess in (_EVAL_WORD.sub("train", eval_tag, count=1), _EVAL_WORD.sub("", eval_tag, count=1).strip("/_- ")):
        if guess in by_name:
            return by_name[guess]
    return sorted(losses, key=lambda s: s.tag)[0]


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
    change = _train_change(train, best_step, upto, eval_series.interval, config) if train is not None else None
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
    train: Series, best_step: int, upto: int, eval_interval: int, config: OverfittingConfig
) -> tuple[float, float, str] | None:
    """The train loss level at the best step and at `upto`, and whether it fell, stayed
    flat or rose between them."""
    s, v = train.fstep, train.fvalue
    levels = []
    for at in (best_step, upto):
        b = int(np.searchsorted(s, at, side="right"))
        a = max(int(np.searchsorted(s, at - eval_interval, side="right")), b - config.train_points)
        if b == 0:
            return None
        levels.append(v[min(a, b - 1) : b])
    then, now = levels
    t0, t1 = float(np.median(then)), float(np.median(now))
    recent = v[max(0, int(np.searchsorted(s, upto, side="right")) - 4 * config.train_points) : int(np.searchsorted(s, upto, side="right"))]
    point = float(np.median(np.abs(np.diff(recent)))) * DIFF_MAD_TO_SIGMA if len(recent) > 2 else 0.0
    sigma = point * 1.2533 * math.sqrt(1 / len(then) + 1 / len(now))
    tolerance = max(config.train_tolerance * abs(t0), 3 * sigma)
    moved = "rose" if t1 - t0 > tolerance else "fell" if t0 - t1 > tolerance else "flat"
    return t0, t1, moved

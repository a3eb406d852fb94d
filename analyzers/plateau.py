"""Plateaus worth an alert: a loss that is not learning for a reason a person can fix.  A run
that learned and then flattened (as its learning rate decayed, or at a constant one) has
converged: that is a fact for the run's health summary (analyzers/health.py), never an alert.

Three cases, each a warning on the loss tag:

* **never left its initial level**: the loss's trend (medians of `block_points` (8) logged
  points; evaluations one by one) was never `confirm_blocks` (3) levels in a row outside
  `tolerance` (1%) or `z` (3) noise sigmas of its first level, over the first
  `unmoved_points` (128) points and `unmoved_steps` (4000) steps (evaluations: the first
  `eval_unmoved_points` (20)); when that level is chance level, ln K within 0.5% for K = 2
  to 10, 100 or 1000 classes, over the first `points` (32) points and `steps` (1000)
  steps (evaluations: `eval_points` (10)).  The LRQA QuALITY baseline (a 4-way task) logs a
  train loss of 1.38-1.42 and an eval loss of exactly 1.3863 = ln 4 for all 20 epochs.  A
  healthy run leaves its first level within its first hundred points, even in warm-up
  (tests/curves.py's runs, 3% warm-up); Marian's continued training (flat by design,
  falling 7% in 970k updates) stays within 2% of its first level for 85 points, under the
  128; one level outside the band is noise (a flat 2%-noise loss strays past 3 sigmas
  about once in 60 levels), three in a row are not.  Not while the LR is still warming
  up where the plateau ends (or now): a loss waiting for its LR is not stuck.
* **learning rate at zero**: the LR is 0, or at most `zero_lr` (1e-4) of its peak so far
  and either repeating or reached by one drop from over 1% of the peak (a bug that scaled
  it by 1e-8 leaves it following its schedule eight orders down: `charlm_lr_tiny`), for
  `points` points and `lr_steps` (200) steps while the loss does not improve (a warm-up
  from 0 moves at its next point; a char-LM whose scheduler set the LR to 0,
  `charlm_lr_zero`, was told 1,009 steps in with the chance-level 1,000); `steps` (1000)
  for an LR that decayed into 0 (a schedule run to its end).  sample_runs/stalled_lr sets
  it to 1e-9 (5e-7 of its 0.002 peak) at step 200.  A schedule decaying to 0 moves at every
  point and falls less than 100x from one point to the next, so its tail never counts
  however long the run; a step schedule's last stage (ResNet's 0.1 -> 0.0001 is 1e-3 of the
  peak) is above 1e-4.
* **learning rate frozen mid-decay**: an LR that fell at every one of its last `points`
  logged points (a continuous decay: cosine, linear, exponential; a step schedule holds
  between its drops) and then repeats one value for `points` points and `lr_steps` steps, at
  more than `frozen_share` (10%) of its peak, while the loss does not improve: a scheduler
  no longer stepped.  A planned floor is at most 10% of the peak (LLaMA's cosine ends at
  10%, most at 0 or 1%), and a warm-up that ends in a constant LR (or a WSD schedule's
  stable phase) rose before it, never fell.  Any other LR that stops moving is not alerted:
  it looks exactly like a planned hold (the restart detector catches the scheduler a resume
  lost).
* **grad norm stuck at zero**: the grad-norm detector's `grad_norm_stuck` at 0 while the
  loss does not improve: no gradient reaches the weights.

"Does not improve": the median of the last `level_points` (64) loss points is not below the
median of the first 64 from the onset by `tolerance` or `z` noise sigmas of such a
difference (64: stalled_lr's minibatch loss has a 0.09 sd, so a median of 16 points moves
by 0.03 and two of them could read as a 5% improvement).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from analyzers.baseline import DIFF_MAD_TO_SIGMA, median
from analyzers.findings import Finding, Kind, Severity
from analyzers.series import Series
from analyzers.stream import StreamState, detect_at_once, finite_points, run_lengths
from analyzers.trend import BlockState, cut_blocks, empty_blocks


@dataclass(frozen=True)
class PlateauConfig:
    block_points: int = 8  # its trend: the median of each 8 logged points (evaluations: each)
    points: int = 32  # LR at zero or frozen, or a loss at chance level: 32 logged points ...
    steps: int = 1000  # ... and 1000 steps at chance level (per-step logging: 1000 points) ...
    lr_steps: int = 200  # ... or 200 steps of an LR set to zero at once or frozen (1000 when it decayed into 0)
    eval_points: int = 10  # an eval loss at chance level: 10 evaluations
    unmoved_points: int = 128  # not moved from its first level: 128 points ...
    unmoved_steps: int = 4000  # ... and 4000 steps
    eval_unmoved_points: int = 20  # an eval loss: 20 evaluations
    tolerance: float = 0.01  # within 1% of where it was ...
    z: float = 3.0  # ... or 3 noise sigmas: not moved
    confirm_blocks: int = 3  # left the initial level: this many trend levels in a row outside it
    zero_lr: float = 1e-4  # an LR at most this share of its peak, repeated or dropped into, is zero
    frozen_share: float = 0.1  # one repeated above this share of its peak after falling at every point: frozen
    level_points: int = 64  # a loss level quoted for a stalled stretch: the median of 64 points


# An LR under this share of its peak just before it reached 0 decayed into it (llm.c logs
# its linear decay to 6 decimals: 1e-06, 1/600 of its peak, then 0), where a scheduler bug
# sets it to 0 from a working value.
_DECAYED = 0.01

# Chance level ln K for the class counts a "not learning" message names (binary to 10-way,
# CIFAR-100, ImageNet): beyond 10 the ln K of neighbours are too close to tell apart.
_CHANCE = {k: math.log(k) for k in (*range(2, 11), 100, 1000)}

_NOT_LEARNING = (
    "The model is not learning: check that the optimizer holds the model's parameters and "
    "they require grad, that the learning rate is not 0, that the labels match the inputs "
    "(shuffled or constant labels leave the loss at chance level), and that the loss is "
    "computed on the model's output."
)
_LR_ZERO = (
    "Nothing is learned at a zero learning rate: check the scheduler (a decay that ended "
    "early, a resume that lost its state, a warm-up that never starts) and the optimizer's "
    "param groups; resume from the last checkpoint before the LR fell with the schedule fixed."
)
_LR_FROZEN = (
    "The learning-rate schedule stopped mid-decay: check that scheduler.step() is still "
    "called every step (a loop or callback that stopped calling it, a resume that rebuilt "
    "the scheduler without its state); resume from the last checkpoint before it froze with "
    "the schedule restored."
)
_GRAD_ZERO = (
    "No gradient reaches the weights: check that the parameters require grad and are in the "
    "optimizer, that the loss is not detached from the model (.item(), .detach() or "
    "torch.no_grad() in its path), and that no layer is frozen by mistake."
)


def chance_classes(level: float) -> int | None:
    """K when `level` is ln K, within 0.5%, for one of the class counts above."""
    for k, ln in _CHANCE.items():
        if abs(level - ln) <= 0.005 * ln:
            return k
    return None


# -- never left its initial level (streaming) ---------------------------------------------


@dataclass(frozen=True)
class InitialLevelState(StreamState):
    blocks: BlockState
    first: float  # the first block's level (NaN before it)
    phase: int  # 0 watching, 1 open (stayed through the window), 2 done
    out: int  # blocks in a row outside the band while open
    out_step: int  # where that run of blocks started
    level: float  # the latest level


class InitialLevelDetector:
    """A loss whose trend never left its initial level (or chance level)."""

    def __init__(self, config: PlateauConfig = PlateauConfig(), evaluations: bool = False) -> None:
        self.config = config
        self.block_points = 1 if evaluations else config.block_points
        c = config
        # (points, steps) it must stay for: at chance level, and anywhere else
        self.chance_window = (c.eval_points, 0) if evaluations else (c.points, c.steps)
        self.unmoved_window = (c.eval_unmoved_points, 0) if evaluations else (c.unmoved_points, c.unmoved_steps)

    def start(self) -> InitialLevelState:
        return InitialLevelState(empty_blocks(), math.nan, 0, 0, -1, math.nan)

    def detect(self, series: Series) -> list[Finding]:
        return detect_at_once(self, series.step, series.value, series.tag)

    def feed(
        self, state: InitialLevelState, step: np.ndarray, value: np.ndarray, tag: str = ""
    ) -> tuple[InitialLevelState, list[Finding], list[Finding]]:
        """While undecided, the series is taken a chunk at a time (a split like any other), so
        a long run that left its first level early costs its first chunks, not its length;
        once the loss has moved for good nothing is left to watch."""
        closed: list[Finding] = []
        chunk = max(1024, 4 * self.unmoved_window[0])
        a = 0
        while a < len(step) and state.phase == 0:
            state, done, _ = self._feed(state, step[a : a + chunk], value[a : a + chunk], tag)
            closed += done
            a += chunk
        if a < len(step) and state.phase == 1:
            state, done, _ = self._feed(state, step[a:], value[a:], tag)
            closed += done
        return state, closed, self._open(state, tag)

    def _feed(
        self, state: InitialLevelState, step: np.ndarray, value: np.ndarray, tag: str
    ) -> tuple[InitialLevelState, list[Finding], list[Finding]]:
        c = self.config
        blocks, new = cut_blocks(state.blocks, step, value, self.block_points, 32, levels=False)
        s = replace(state, blocks=blocks)
        n = len(new.level)
        if not n:
            return s, [], []
        first = s.first if not math.isnan(s.first) else float(new.level[0])
        # a level and the first both carry noise (a median of m points: 1.25 sigma / sqrt(m))
        spread = new.point_sigma * (1.2533 if self.block_points > 1 else 1.0) * math.sqrt(2 / self.block_points)
        band = np.maximum(c.tolerance * abs(first), c.z * spread)
        inside = np.abs(new.level - first) <= band
        idx = np.arange(n)
        last_in = np.maximum.accumulate(np.where(inside, idx, -1 - s.out))
        run = idx - last_in  # blocks in a row outside the band, ending at each block
        leave = np.flatnonzero(run >= c.confirm_blocks)
        closed: list[Finding] = []
        watched_from = 0  # the blocks of this piece during which the plateau is open
        if s.phase == 0:
            points = (new.first + idx + 1) * self.block_points
            # long enough, and with room for a departure to have been seen
            window_points, window_steps = self.chance_window if chance_classes(first) else self.unmoved_window
            long_enough = (points >= max(window_points, (c.confirm_blocks + 1) * self.block_points)) & (
                new.last_step - blocks.first_step >= window_steps
            )
            ready = np.flatnonzero(long_enough & inside)
            if len(ready) and (not len(leave) or ready[0] < leave[0]):
                s, watched_from = replace(s, phase=1), int(ready[0])  # stayed through the window: not learning
            elif len(leave):
                s = replace(s, phase=2)  # it moved before the window was over: learning
        later = leave[leave >= watched_from] if s.phase == 1 else leave[:0]
        if len(later):  # it left: the plateau is over, from the first block of that departure
            j = int(later[0])
            start = int(last_in[j]) + 1
            end = s.out_step if start < 0 else int(new.step[start])
            closed.append(self._finding(replace(s, phase=2, first=first, level=float(new.level[j])), tag, end))
            s = replace(s, phase=2)
        start = int(last_in[-1]) + 1
        out_step = -1 if not run[-1] else s.out_step if start < 0 else int(new.step[start])
        s = replace(s, first=first, out=int(run[-1]), out_step=out_step, level=float(new.level[-1]))
        return s, closed, []

    def _open(self, s: InitialLevelState, tag: str) -> list[Finding]:
        return [self._finding(s, tag, end=None)] if s.phase == 1 else []

    def _finding(self, s: InitialLevelState, tag: str, end: int | None) -> Finding:
        first_step = s.blocks.first_step
        k = chance_classes(s.first)
        chance = f": chance level for {k} classes (ln {k} = {_CHANCE[k]:.4g})" if k else ""
        until = s.blocks.last_step
        if end is None:
            clause = f"it has stayed at its initial level {s.first:.4g} since step {first_step} ({until - first_step} steps){chance}"
        else:
            clause = f"it stayed at its initial level {s.first:.4g} from step {first_step} to step {end}{chance}"
        return plateau_finding(
            tag, first_step, end, [clause], [_NOT_LEARNING],
            {"reason": "chance_level" if k else "initial_level", "initial_level": s.first, "level_now": s.level,
             **({"chance_classes": k} if k else {})},
        )


def plateau_finding(
    tag: str, start: int, end: int | None, clauses: list[str], advice: list[str], evidence: dict
) -> Finding:
    """One plateau alert: what was seen (clauses, kept in the evidence as `why`) and what to
    do about it."""
    head = f"{tag} is not learning" if end is None else f"{tag} was not learning until step {end}"
    clauses, advice = list(dict.fromkeys(clauses)), list(dict.fromkeys(advice))
    return Finding(
        kind=Kind.PLATEAU,
        tag=tag,
        severity=Severity.WARNING,
        start_step=start,
        end_step=end,
        ongoing=end is None,
        message=f"{head}: " + "; ".join(clauses),
        remediation=" ".join(advice),
        evidence={**evidence, "why": clauses, "advice": advice},
    )


def warming_up(lr: Series | None, plateau: Finding) -> bool:
    """Whether the LR was still warming up (its last 3 values up to the plateau's end, or
    now, rising) where a loss stayed at its initial level: waiting for its LR, not stuck.
    tests/curves.py's runs warm up over 3% of their steps, 1200 steps at 40k, during which
    a loss may not move by 1%."""
    if lr is None:
        return False
    end = plateau.end_step if plateau.end_step is not None else int(lr.fstep[-1]) if len(lr.fstep) else -1
    last = lr.fvalue[: int(np.searchsorted(lr.fstep, end, side="right"))][-3:]
    return len(last) == 3 and bool(np.all(np.diff(last) > 0))


# -- learning rate at zero (streaming) ------------------------------------------------------


@dataclass(frozen=True)
class ZeroLRState(StreamState):
    peak: float  # the highest LR so far (-inf before any)
    prev: float  # the last LR seen, and its step
    prev_step: int
    since: int  # first step of the current run of zero LR (-1 when not in one)
    points: int  # points in that run
    value: float  # the LR at the run's start, and its peak then
    peak_then: float
    last_step: int
    sudden: bool  # the run began at once: an LR never above 0, set to 0 from above, or frozen
    dropped: int  # the last point's stretch of tiny values began with a drop from above (1), did not (0); -1: none
    falling: int  # the points in a row at which the LR fell, up to the last one
    falls: int  # the same up to the point before the current repeats (if any)


class ZeroLRDetector:
    """Stretches where the learning rate is zero or frozen mid-decay (intermediate findings
    on the LR tag: the plateau alert goes on the loss, by `stalled_plateaus`).  Zero is 0,
    or a value at most `zero_lr` of the peak that repeats or that one drop reached: a
    schedule decaying towards 0 moves at every point and by less than 100x, a scheduler bug
    or a run left going at the end of its schedule does not.  Frozen is a value over
    `frozen_share` of the peak that repeats right after the LR fell at `points` points in a
    row."""

    def __init__(self, config: PlateauConfig = PlateauConfig()) -> None:
        self.config = config

    def start(self) -> ZeroLRState:
        return ZeroLRState(-math.inf, math.nan, -1, -1, 0, math.nan, math.nan, -1, False, -1, 0, 0)

    def detect(self, series: Series) -> list[Finding]:
        return detect_at_once(self, series.step, series.value, series.tag)

    def feed(
        self, state: ZeroLRState, step: np.ndarray, value: np.ndarray, tag: str = ""
    ) -> tuple[ZeroLRState, list[Finding], list[Finding]]:
        step, value = finite_points(step, value)
        n = len(value)
        if not n:
            return state, [], self._open(state, tag)
        peak = np.maximum.accumulate(np.concatenate([[state.peak], value]))[1:]
        before = np.concatenate([[state.prev], value[:-1]])
        before_step = np.concatenate([[state.prev_step], step[:-1]])
        c = self.config
        repeat = value == before
        falls, falling = _falls_before(value < before, repeat, state.falling, state.falls)
        frozen = repeat & (falls >= c.points) & (value > c.frozen_share * peak)
        tiny = value <= c.zero_lr * peak
        dropped = _dropped_into(tiny, before > _DECAYED * peak, state.dropped)
        zero = (value == 0) | (tiny & (repeat | dropped)) | frozen
        latest = {
            "peak": float(peak[-1]), "prev": float(value[-1]), "prev_step": int(step[-1]), "last_step": int(step[-1]),
            "falling": falling, "falls": int(falls[-1]), "dropped": int(dropped[-1]) if tiny[-1] else -1,
        }
        if state.since < 0 and not zero.any():  # the usual case: an LR that is not zero
            return replace(state, **latest), [], []
        edges = np.diff(np.concatenate([[state.since >= 0], zero]).astype(np.int8))
        starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)  # ends: first non-zero index
        closed = []
        s = state
        if s.since >= 0 and len(ends) and (not len(starts) or ends[0] < starts[0]):
            # the run carried in from earlier pieces ends here
            last = int(step[ends[0] - 1]) if ends[0] else s.last_step
            closed += self._closed(s, s.points + int(ends[0]), int(step[ends[0]]), last, tag)
            ends = ends[1:]
            s = replace(s, since=-1, points=0)
        elif s.since >= 0:
            s = replace(s, points=s.points + n)
        for k, a in enumerate(starts):
            sudden = bool(frozen[a] or dropped[a] or peak[a] <= 0 or (value[a] == 0 and before[a] > _DECAYED * peak[a]))
            # a repeated value's run starts at its first occurrence
            since = int(before_step[a]) if value[a] == before[a] and before_step[a] >= 0 else int(step[a])
            run = replace(s, since=since, value=float(value[a]), peak_then=float(peak[a]), sudden=sudden)
            if k < len(ends):
                b = int(ends[k])
                closed += self._closed(replace(run, points=b - a), b - a, int(step[b]), int(step[b - 1]), tag)
            else:
                s = replace(run, points=n - int(a))
        s = replace(s, **latest)
        return s, closed, self._open(s, tag)

    def _long(self, s: ZeroLRState, points: int, last: int) -> bool:
        """Long enough to tell: `lr_steps` for an LR that was never above 0 or was set to 0
        (or froze) at once, `steps` for one that decayed into 0 (a schedule run to its end:
        llm.c's GPT-2 124M trains its last ~350 steps at 0)."""
        c = self.config
        return points >= c.points and last - s.since >= (c.lr_steps if s.sudden else c.steps)

    def _closed(self, s: ZeroLRState, points: int, end: int, last: int, tag: str) -> list[Finding]:
        return [self._finding(s, tag, end)] if self._long(s, points, last) else []

    def _open(self, s: ZeroLRState, tag: str) -> list[Finding]:
        return [self._finding(s, tag, None)] if s.since >= 0 and self._long(s, s.points, s.last_step) else []

    def _finding(self, s: ZeroLRState, tag: str, end: int | None) -> Finding:
        share = s.value / s.peak_then if s.peak_then > 0 else 0.0
        frozen = share > self.config.frozen_share
        if s.value == 0 or s.peak_then <= 0:
            what = "0" if s.peak_then <= 0 else f"0 (its peak was {s.peak_then:.3g})"
        elif frozen:
            what = f"frozen at {s.value:.3g} ({share:.2g} of its {s.peak_then:.3g} peak) after falling at every point"
        else:
            what = f"{s.value:.3g} ({share:.2g} of its {s.peak_then:.3g} peak)"
        return Finding(
            kind=Kind.PLATEAU, tag=tag, severity=Severity.WARNING, start_step=s.since, end_step=end,
            ongoing=end is None, message=f"{tag} has been {what} since step {s.since}",
            remediation=_LR_FROZEN if frozen else _LR_ZERO,
            evidence={"reason": "lr_frozen" if frozen else "lr_zero", "lr": s.value, "lr_share": share},
        )


def _dropped_into(tiny: np.ndarray, from_above: np.ndarray, carried: int) -> np.ndarray:
    """At each tiny point, whether its stretch of tiny values began with a drop from above
    `_DECAYED` of the peak (`from_above`: the point before was); `carried` says so of a
    stretch going on before the first point (-1: none)."""
    first = tiny & ~np.concatenate([[carried >= 0], tiny[:-1]])
    began = np.where(first, np.arange(len(tiny)), -1)
    np.maximum.accumulate(began, out=began)
    before = began < 0
    np.maximum(began, 0, out=began)
    dropped = (first & from_above)[began]
    dropped[before] = carried == 1
    return tiny & dropped


def _falls_before(fell: np.ndarray, repeat: np.ndarray, falling: int, carried: int) -> tuple[np.ndarray, int]:
    """At each point, the points in a row at which the LR fell up to it, or, inside a run of
    repeated values, up to the point before that run; and the run of falls ending at the
    last point.  `falling` and `carried` are the same two at the point before the first."""
    run = run_lengths(fell, falling)
    anchor = np.where(repeat, -1, np.arange(len(fell)))
    np.maximum.accumulate(anchor, out=anchor)  # the last point not a repeat
    before = anchor < 0
    np.maximum(anchor, 0, out=anchor)
    falls = run[anchor]
    falls[before] = carried
    return falls, int(run[-1]) if len(run) else falling


# -- joining: a loss that does not improve while its LR or grad norm is zero -------------------


def stalled_plateaus(loss: Series, causes: list[Finding], config: PlateauConfig) -> list[Finding]:
    """A plateau on `loss` for each stretch of zero LR or zero grad norm (`causes`, found on
    those tags) over which the loss did not improve."""
    out = []
    for cause in causes:
        if not len(loss.fstep):
            continue
        over = None if cause.ongoing else cause.end_step
        then, now, sigma = _levels(loss, cause.start_step, int(loss.fstep[-1]) if over is None else over, config.level_points)
        if then is None or then - now > max(config.tolerance * abs(then), config.z * sigma):
            continue
        grad = cause.kind is Kind.GRAD_NORM_STUCK
        clause = f"{cause.tag} has been 0 since step {cause.start_step}" if grad else cause.message
        out.append(
            plateau_finding(
                loss.tag, cause.start_step, over, [f"{clause} (its level: {then:.4g} then, {now:.4g} now)"],
                [_GRAD_ZERO if grad else cause.remediation],
                {"reason": "grad_norm_zero" if grad else cause.evidence["reason"], "cause_tag": cause.tag, "level_then": then,
                 "level_now": now, **({} if grad else {"lr_share": cause.evidence["lr_share"]})},
            )
        )
    return out


def _levels(loss: Series, start: int, end: int, size: int) -> tuple[float | None, float, float]:
    """The loss level from `start` on and up to `end` (medians of `size` points), and the
    noise sigma of their difference."""
    s, v = loss.fstep, loss.fvalue
    a, b = int(np.searchsorted(s, start)), int(np.searchsorted(s, end, side="right"))
    then, now = v[a : min(a + size, b)], v[max(a, b - size) : b]
    if not len(then) or not len(now):
        return None, math.nan, math.nan
    recent = v[max(a, b - 4 * size) : b]
    point = float(median(np.abs(np.diff(recent)))) * DIFF_MAD_TO_SIGMA if len(recent) > 2 else 0.0
    # a median of m points has sd 1.25 sigma / sqrt(m); two of them differ by sqrt(2) that
    sigma = point * 1.2533 * math.sqrt(1 / len(then) + 1 / len(now))
    return float(median(then)), float(median(now)), sigma


def merge_plateaus(findings: list[Finding]) -> list[Finding]:
    """One plateau per stretch of a tag: overlapping ones (a loss at chance level whose LR
    is also 0) become one alert, from the earliest onset, saying every reason."""
    by_tag: dict[str, list[Finding]] = {}
    # at one onset, a cause (LR or grad norm at 0) leads: it says what to fix
    caused = ("lr_zero", "lr_frozen", "grad_norm_zero")
    for f in sorted(findings, key=lambda f: (f.tag, f.start_step, f.evidence["reason"] not in caused, not f.ongoing)):
        group = by_tag.setdefault(f.tag, [])
        if group and _overlaps(group[-1], f):
            group[-1] = _joined(group[-1], f)
        else:
            group.append(f)
    return [f for group in by_tag.values() for f in group]


def _overlaps(a: Finding, b: Finding) -> bool:
    return a.end_step is None or b.start_step <= a.end_step


def _joined(a: Finding, b: Finding) -> Finding:
    end = None if a.end_step is None or b.end_step is None else max(a.end_step, b.end_step)
    reasons = [a.evidence["reason"], *a.evidence.get("also", []), b.evidence["reason"]]
    evidence = {k: v for k, v in {**b.evidence, **a.evidence}.items() if k not in ("why", "advice")}
    return plateau_finding(
        a.tag, a.start_step, end, a.evidence["why"] + b.evidence["why"], a.evidence["advice"] + b.evidence["advice"],
        {**evidence, "also": list(dict.fromkeys(reasons[1:]))},
    )

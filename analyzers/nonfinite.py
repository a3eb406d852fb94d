"""NaN and Inf, one finding per episode, each with its own onset.

An episode is a stretch of non-finite values of one tag; values separated by at most
`gap_points` (2) finite points belong to one (sample_runs/fp16_overflow: the loss is NaN at
step 1921, finite at 1922, NaN from 1923 on: one episode from 1921).  It closes once more
than `gap_points` finite points in a row follow it.  What it means depends on the tag and on
whether the values came back:

* a grad norm that is non-finite at fewer than `persist_points` (5) points and then finite
  is an overflow skip: the scaler (or a skip-step optimizer) dropped the step, as designed
  (info).  Without a skip, the non-finite norm would have poisoned the weights and it would
  stay NaN.  fp16_overflow's scaler skips at steps 767, 1034, 1292 ...: each its own info
  finding, not the onset of the NaN at 1921.  Five points also cover the scaler's first
  halvings at the start of a run (DeepSpeed halves four times in 21 steps);
* a grad norm non-finite at `persist_points` points or more is critical while it lasts
  (a warning once finite values are back).  Until then it may still be a skip: it is told
  at its `persist_points`-th point, or when it closes;
* a loss (train or eval) that is non-finite is critical while it lasts: a NaN loss does not
  come back (domain notes); a warning if it did;
* any other tag: a warning.

Across tags (`NonFiniteDetector.detect` on a whole run, the batch path): a grad norm that is
critical while the loss is finite at those steps is flagged as hidden (the Hugging Face
Trainer logs a window average in place of a NaN loss, so a NaN grad norm may be the only
trace), and under fp16 (a loss-scale tag) the remediation says so.  The per-tag streams
(`start`/`feed`) carry everything else; the hidden rule needs the loss at the grad norm's
steps, so it stays in the batch path.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from analyzers.findings import Finding, Kind, Severity
from analyzers.roles import Role
from analyzers.series import RunSeries, Series
from analyzers.stream import StreamState, detect_at_once

_TRACE = (
    "Find the first op that overflows: Hugging Face's DebugUnderflowOverflow or "
    "torch.autograd.detect_anomaly() on the steps before it"
)
_LOSSES = (Role.LOSS, Role.EVAL_LOSS)


@dataclass(frozen=True)
class NonFiniteConfig:
    gap_points: int = 2  # finite points that may separate the non-finite values of one episode
    persist_points: int = 5  # a grad norm non-finite at this many points is not an overflow skip


@dataclass(frozen=True)
class Episode(StreamState):
    first_step: int
    last_step: int  # the last non-finite point
    count: int  # non-finite points
    nan: bool  # which non-finite values were seen
    pos_inf: bool
    neg_inf: bool
    streak_step: int  # where the non-finite stretch going on at the last point began
    finite_within: int  # finite points between its non-finite ones
    finite_after: int  # finite points in a row since the last non-finite one
    back_step: int | None  # the first of those
    persist_step: int | None  # its `persist_points`-th non-finite point: where a grad norm's is told


@dataclass(frozen=True)
class NonFiniteState(StreamState):
    role: str  # what the tag is: the severity depends on it
    open: Episode | None


class NonFiniteDetector:
    def __init__(self, config: NonFiniteConfig = NonFiniteConfig()) -> None:
        self.config = config

    def detect(self, run: RunSeries) -> list[Finding]:
        """Every tag's episodes, with what the other tags say about them."""
        fp16 = bool(run.with_role(Role.LOSS_SCALE))
        losses = run.with_role(Role.LOSS)
        findings = []
        for series in run.series.values():
            if series.finite.all():
                continue
            for f in self.detect_series(series):
                if f.severity is Severity.CRITICAL and series.role is Role.GRAD_NORM:
                    f = hidden_nan(f, series, losses)
                findings.append(under_fp16(f) if fp16 and f.severity >= Severity.WARNING else f)
        return findings

    def detect_series(self, series: Series) -> list[Finding]:
        return detect_at_once(self, series.step, series.value, series.tag, self.start(series.role))

    def start(self, role: Role = Role.OTHER) -> NonFiniteState:
        return NonFiniteState(role=role.value, open=None)

    def feed(
        self, state: NonFiniteState, step: np.ndarray, value: np.ndarray, tag: str = ""
    ) -> tuple[NonFiniteState, list[Finding], list[Finding]]:
        gap, persist = self.config.gap_points, self.config.persist_points
        n = len(value)
        bad = np.flatnonzero(~np.isfinite(value))
        episode = state.open
        closed = []
        # groups of non-finite points, split where more than `gap` finite points lie between
        groups = np.split(bad, np.flatnonzero(np.diff(bad) > gap + 1) + 1) if len(bad) else []
        last = -1 - episode.finite_after if episode else -1  # its last non-finite point, as an index into this feed
        for group in groups:
            between = int(group[0]) - last - 1
            if episode is not None and between > gap:
                closed.append(_followed(episode, step, last, between))
                episode = None
            episode = self._extend(episode, group, step, value, between, persist)
            last = int(group[-1])
        if episode is not None:
            episode = _followed(episode, step, last, n - 1 - last)
            if episode.finite_after > gap:
                closed.append(episode)
                episode = None
        role = Role(state.role)
        # a grad norm's episode is told once it persists, or when it closes (as overflow skips)
        told = episode is not None and (role is not Role.GRAD_NORM or episode.count >= persist)
        return (
            replace(state, open=episode),
            [self._finding(tag, role, e, ongoing=False) for e in closed],
            [self._finding(tag, role, episode, ongoing=True)] if told else [],
        )

    @staticmethod
    def _extend(
        episode: Episode | None, group: np.ndarray, step: np.ndarray, value: np.ndarray, between: int, persist: int
    ) -> Episode:
        """`episode` (or a new one) with the non-finite points `group` (indices into this feed),
        `between` finite points after its last one."""
        v = value[group]
        before = episode.count if episode else 0
        reached = int(step[group[persist - before - 1]]) if before < persist <= before + len(group) else None
        first, last = int(group[0]), int(group[-1])
        within = last - first + 1 - len(group)  # finite points between them
        # the stretch going on at `last`: the last run of consecutive indices
        breaks = np.flatnonzero(np.diff(group) > 1)
        streak = int(group[breaks[-1] + 1]) if len(breaks) else first
        nan, pos, neg = bool(np.isnan(v).any()), bool((v == np.inf).any()), bool((v == -np.inf).any())
        if episode is None:
            return Episode(
                first_step=int(step[first]), last_step=int(step[last]), count=len(group), nan=nan, pos_inf=pos,
                neg_inf=neg, streak_step=int(step[streak]), finite_within=within, finite_after=0, back_step=None,
                persist_step=reached,
            )
        joined = between == 0 and not len(breaks)  # the stretch going on goes on
        return replace(
            episode,
            last_step=int(step[last]),
            count=episode.count + len(group),
            nan=episode.nan or nan,
            pos_inf=episode.pos_inf or pos,
            neg_inf=episode.neg_inf or neg,
            streak_step=episode.streak_step if joined else int(step[streak]),
            finite_within=episode.finite_within + between + within,
            finite_after=0,
            back_step=None,
            persist_step=episode.persist_step if reached is None else reached,
        )

    def _severity(self, role: Role, e: Episode, ongoing: bool) -> Severity:
        if role is Role.GRAD_NORM:
            if e.count < self.config.persist_points:
                return Severity.INFO
            return Severity.CRITICAL if ongoing else Severity.WARNING
        if role in _LOSSES:
            return Severity.CRITICAL if ongoing else Severity.WARNING
        return Severity.WARNING

    def _finding(self, tag: str, role: Role, e: Episode, *, ongoing: bool) -> Finding:
        kinds = [name for name, seen in (("+Inf", e.pos_inf), ("-Inf", e.neg_inf), ("NaN", e.nan)) if seen]
        kinds.sort()
        skip = role is Role.GRAD_NORM and e.count < self.config.persist_points
        still = e.finite_after == 0  # non-finite at the last point seen
        points = "1 point" if e.count == 1 else f"{e.count} points"
        message = f"{tag} is {'/'.join(kinds)} at {points} from step {e.first_step}"
        if still and not e.finite_within:
            message += " and never finite again"
        elif still:
            message += f"; finite in between, then non-finite from step {e.streak_step} on"
        else:
            message += f", finite again since step {e.back_step}"
        if skip:
            message += ": an overflow skip" if e.count == 1 else ": overflow skips"
        severity = self._severity(role, e, ongoing)
        return Finding(
            kind=Kind.NONFINITE,
            tag=tag,
            severity=severity,
            start_step=e.first_step,
            peak_step=e.streak_step if still else None,
            end_step=e.last_step,
            ongoing=ongoing,
            message=message,
            remediation=self._remediation(skip, e),
            evidence={
                "count": e.count,
                "values": kinds,
                "came_back": bool(e.finite_within or not still),
                "nonfinite_from": e.streak_step if still else None,
                "overflow_skip": skip,
                "persist_step": e.persist_step,
                "hidden": False,
            },
        )

    @staticmethod
    def _remediation(skip: bool, e: Episode) -> str:
        if skip:
            return (
                "Expected under fp16 dynamic loss scaling (the overflowing step is skipped and the scale "
                "halves); act only if it keeps happening or the loss scale collapses."
            )
        onset = e.streak_step if e.finite_after == 0 else e.first_step
        return (
            f"Roll back to a checkpoint from before step {onset} (step {max(0, onset - 100)} or earlier), "
            f"skip the batches around it or lower the learning rate. {_TRACE}."
        )


def _followed(e: Episode, step: np.ndarray, last: int, after: int) -> Episode:
    """`e` followed by `after` finite points after its last non-finite one (index `last`)."""
    back = e.back_step
    if back is None and after and last + 1 >= 0:
        back = int(step[last + 1])
    return replace(e, finite_after=after, back_step=back)


def hidden_nan(finding: Finding, grad: Series, losses: list[Series]) -> Finding:
    """A grad norm non-finite while a loss is finite at those steps: the trainer may hide NaN losses."""
    end = finding.end_step if finding.end_step is not None else finding.start_step
    span = (grad.step >= finding.start_step) & (grad.step <= end) & ~grad.finite
    steps = grad.step[span]
    if not any(_finite_at(loss, steps) for loss in losses):
        return finding
    return replace(
        finding,
        message=finding.message + "; the loss looks finite at those steps (the trainer may be hiding NaN losses)",
        evidence={**finding.evidence, "hidden": True},
    )


def under_fp16(finding: Finding) -> Finding:
    return replace(finding, remediation=finding.remediation + " Under fp16, train in bf16 or keep the overflowing op in fp32.")


def _finite_at(series: Series, steps: np.ndarray) -> bool:
    at = np.isin(series.step, steps)
    return bool(at.any() and series.finite[at].all())

"""Restarts and rollbacks, and what they hide: a learning rate that jumps back into warmup
(the scheduler state was lost), a spike right after the resume (data-loader state), and a
loss that is suddenly lower than the first time through the same steps (the data stream
restarted, so the model sees data it has already seen: Lightning issue 18780)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzers.baseline import DIFF_MAD_TO_SIGMA, median
from analyzers.findings import Finding, Kind, Severity
from analyzers.roles import Role
from analyzers.series import Resume, RunSeries, TagWrites


@dataclass(frozen=True)
class RestartConfig:
    warmup_drop: float = 0.5  # LR after the resume below half its first-time value: back in warmup
    spike_steps: int = 50  # a spike this soon after a resume is blamed on it
    repeat_z: float = 4.0  # loss this many sigmas below its first time through: repeated data
    repeat_drop: float = 0.02  # and at least 2% lower


class RestartDetector:
    def __init__(self, config: RestartConfig = RestartConfig()) -> None:
        self.config = config

    def detect(self, run: RunSeries, spikes: list[Finding]) -> list[Finding]:
        return [self.finding(run, resume, spikes) for resume in run.resumes]

    def finding(self, run: RunSeries, resume: Resume, spikes: list[Finding]) -> Finding:
        """One resume's finding: `run.writes` need hold only the writes around it (the
        streaming analysis keeps just those)."""
        c = self.config
        notes, evidence = [], {"from_step": resume.from_step, "to_step": resume.to_step, "segment": resume.segment}
        for lr in run.with_role(Role.LEARNING_RATE):
            ratio = _again_vs_first(run.writes[lr.tag], resume)
            if ratio is not None and ratio < c.warmup_drop:
                notes.append(f"{lr.tag} restarted at {ratio:.0%} of its value the first time (back in warmup)")
                evidence["lr_ratio"] = ratio
        for loss in run.with_role(Role.LOSS):
            drop = _repeat_drop(run.writes[loss.tag], resume, c)
            if drop is not None:
                notes.append(f"{loss.tag} is {drop:.1%} lower than the first time through these steps (repeated data?)")
                evidence["loss_drop"] = drop
        soon = [
            f for f in spikes
            if f.kind is Kind.LOSS_SPIKE and resume.to_step <= f.start_step <= resume.to_step + c.spike_steps
        ]
        if soon:
            notes.append(f"a loss spike follows at step {soon[0].start_step}")
            evidence["spike_step"] = soon[0].start_step
        head = f"resumed at step {resume.to_step} after reaching step {resume.from_step}"
        return Finding(
            kind=Kind.RESTART,
            tag="*",
            severity=Severity.WARNING if notes else Severity.INFO,
            start_step=resume.to_step,
            peak_step=resume.from_step,
            message=head + (": " + "; ".join(notes) if notes else f"; steps {resume.to_step}-{resume.from_step} were rewritten"),
            remediation=_remediation(evidence),
            evidence=evidence,
        )


def _first_and_again(writes: TagWrites, resume: Resume) -> tuple[np.ndarray, np.ndarray] | None:
    """Values at the steps written both before the resume and in its segment, paired."""
    old = (writes.segment < resume.segment) & (writes.step >= resume.to_step) & (writes.step <= resume.from_step)
    new = writes.segment == resume.segment
    first = dict(zip(writes.step[old].tolist(), writes.value[old].tolist()))  # the last earlier write wins
    again = [(first[s], v) for s, v in zip(writes.step[new].tolist(), writes.value[new].tolist()) if s in first]
    if not again:
        return None
    pairs = np.array(again)
    keep = np.isfinite(pairs).all(axis=1)
    return (pairs[keep, 0], pairs[keep, 1]) if keep.any() else None


def _again_vs_first(writes: TagWrites, resume: Resume) -> float | None:
    """Value after the resume over value the first time, over the first few shared steps."""
    pairs = _first_and_again(writes, resume)
    if pairs is None:
        return None
    first, again = pairs
    head = slice(0, max(1, min(5, len(first))))  # warmup shows in the first writes after the resume
    base = median(first[head])
    return float(median(again[head]) / base) if base > 0 else None


def _repeat_drop(writes: TagWrites, resume: Resume, c: RestartConfig) -> float | None:
    pairs = _first_and_again(writes, resume)
    if pairs is None or len(pairs[0]) < 5:
        return None
    first, again = pairs
    noise = median(np.abs(np.diff(first))) * DIFF_MAD_TO_SIGMA / np.sqrt(len(first))
    gap = float(median(first) - median(again))
    level = abs(float(median(first)))
    return gap / level if level and gap > c.repeat_z * noise and gap > c.repeat_drop * level else None


def _remediation(evidence: dict) -> str:
    advice = []
    if "lr_ratio" in evidence:
        advice.append("restore the LR scheduler's state from the checkpoint (it restarted its warmup)")
    if "loss_drop" in evidence:
        advice.append("restore the data loader's position too: the model is likely seeing data it has already seen")
    if "spike_step" in evidence:
        advice.append("check the data-loader state restored with the checkpoint")
    if not advice:
        return "Nothing to do if the resume was intended; the current view keeps the newer writes of each step."
    return "After a resume: " + "; ".join(advice) + "."

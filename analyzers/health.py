"""A run's health in one word, with the few numbers behind it, from its findings and series.

The word, the first that applies:

* `diverged`: a divergence still open on a loss or eval loss, a loss spike that did not
  come back, or a loss that turned non-finite for good;
* `stalled`: a plateau alert still open (a loss that is not learning: LR or grad norm at
  zero, or never left its initial or chance level);
* `overfitting`: an eval loss still rising past its best while the train loss is not;
* `unstable`: the run had a loss spike of warning or worse (slow to recover, or divergent),
  a grad-norm explosion of warning or worse, a loss-scale collapse, non-finite values it
  came back from, or a rise it came back from;
* `converged`: the train loss fell by `learned_share` (10%) or more from its first level
  and the two halves of its last `points` points / `steps` steps (the plateau window) are
  within `tolerance` (1%) or 3 noise sigmas of each other: it learned and flattened, as
  runs do when their LR decays.  That is a fact, not an alert (the `clean` sample run:
  1.87 -> 0.82, flat over its last 1000 steps);
* `healthy`: none of the above (a run still learning).

Beside it: loss spikes (count, per 1000 steps of the loss tags' span, the largest by ratio
to its baseline), the steps the losses spent above their noise band (onset to recovery,
or to the last step for a spike that has not come back), the best eval step (where early
stopping would stop) and the last step seen.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from analyzers.baseline import DIFF_MAD_TO_SIGMA, median
from analyzers.findings import Finding, Kind, Severity, SpikeClass
from analyzers.plateau import PlateauConfig
from analyzers.roles import Role
from analyzers.series import RunSeries, Series


class Health(str, enum.Enum):
    HEALTHY = "healthy"
    UNSTABLE = "unstable"
    DIVERGED = "diverged"
    STALLED = "stalled"
    OVERFITTING = "overfitting"
    CONVERGED = "converged"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class HealthConfig:
    learned_share: float = 0.1  # converged: fell at least 10% from its first level ...
    tolerance: float = 0.01  # ... and its last window's halves within 1% (or 3 sigmas)


@dataclass(frozen=True)
class RunHealth:
    status: Health
    reason: str
    spikes: int
    spikes_per_1k_steps: float | None  # None when the losses span no steps
    largest_spike: dict[str, Any] | None  # tag, step, ratio, peak_value, baseline
    steps_above_band: int
    best_eval: dict[str, Any] | None  # tag, step, value
    last_step: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value, "reason": self.reason, "spikes": self.spikes,
            "spikes_per_1k_steps": self.spikes_per_1k_steps, "largest_spike": self.largest_spike,
            "steps_above_band": self.steps_above_band, "best_eval": self.best_eval, "last_step": self.last_step,
        }

    def line(self) -> str:
        """One line for a person: the word, why, and the numbers."""
        return f"{self.status.value}: {self.summary()}"

    def summary(self) -> str:
        """Why, and the numbers."""
        parts = [f"{self.spikes} loss spike{'s' if self.spikes != 1 else ''}"]
        if self.spikes and self.spikes_per_1k_steps is not None:
            parts[0] += f" ({self.spikes_per_1k_steps:.2g} per 1k steps"
            if self.largest_spike:
                s = self.largest_spike
                size = f"{s['ratio']:.2g}x its baseline" if s["ratio"] is not None else "largest"
                parts[0] += f", largest {size} at step {s['step']}" if s["ratio"] is not None else f", largest at step {s['step']}"
            parts[0] += f"; {self.steps_above_band} steps above the band)"
        if self.best_eval:
            parts.append(f"best eval {self.best_eval['value']:.4g} at step {self.best_eval['step']}")
        if self.last_step is not None:
            parts.append(f"last step {self.last_step}")
        return f"{self.reason}; " + "; ".join(parts)


def run_health(
    run: RunSeries, findings: list[Finding], plateau: PlateauConfig = PlateauConfig(), config: HealthConfig = HealthConfig()
) -> RunHealth:
    """The health summary of one analysed run."""
    losses = {s.tag for s in run.with_role(Role.LOSS) + run.with_role(Role.EVAL_LOSS)}
    spikes = [f for f in findings if f.kind is Kind.LOSS_SPIKE and f.tag in losses]
    last = {tag: int(s.step[-1]) for tag, s in run.series.items() if len(s.step)}
    status, reason = _status(run, findings, losses, plateau, config)
    span = [int(s.step[-1] - s.step[0]) for s in run.series.values() if s.tag in losses and len(s.step)]
    steps = max(span, default=0)
    return RunHealth(
        status=status,
        reason=reason,
        spikes=len(spikes),
        spikes_per_1k_steps=round(1000 * len(spikes) / steps, 3) if steps else None,
        largest_spike=_largest(spikes),
        steps_above_band=sum(max(0, (f.end_step if f.end_step is not None else last.get(f.tag, f.start_step)) - f.start_step) for f in spikes),
        best_eval=_best_eval(run),
        last_step=max(last.values(), default=None),
    )


def _status(
    run: RunSeries, findings: list[Finding], losses: set[str], plateau: PlateauConfig, config: HealthConfig
) -> tuple[Health, str]:
    on_loss = [f for f in findings if f.tag in losses]
    for f in on_loss:
        if f.ongoing and (
            f.kind is Kind.DIVERGENCE
            or (f.kind is Kind.LOSS_SPIKE and f.classification is SpikeClass.DIVERGENT)
            or (f.kind is Kind.NONFINITE and f.severity is Severity.CRITICAL)
        ):
            return Health.DIVERGED, told(f, "since")
    for kind, health in ((Kind.PLATEAU, Health.STALLED), (Kind.OVERFITTING, Health.OVERFITTING)):
        for f in findings:
            if f.kind is kind and f.ongoing and f.severity >= Severity.WARNING:
                return health, told(f, "since")
    for f in sorted(findings, key=lambda f: -f.severity):
        if unsettling(f):
            return Health.UNSTABLE, told(f, "at")
    train = run.with_role(Role.LOSS)
    flat = _converged(train[0], run, plateau, config) if train else None
    if flat:
        return Health.CONVERGED, flat
    return Health.HEALTHY, "nothing wrong seen" if train or run.with_role(Role.EVAL_LOSS) else "no loss logged"


def told(f: Finding, when: str) -> str:
    kind = f.kind.value + (f" ({f.classification.value})" if f.classification else "")
    return f"{kind} on {f.tag} {when} step {f.start_step}"


def unsettling(f: Finding) -> bool:
    if f.kind in (Kind.LOSS_SPIKE, Kind.GRAD_NORM_EXPLOSION, Kind.NONFINITE):
        return f.severity >= Severity.WARNING
    return f.kind is Kind.LOSS_SCALE_COLLAPSE or (f.kind is Kind.DIVERGENCE and not f.ongoing)


def _converged(loss: Series, run: RunSeries, plateau: PlateauConfig, config: HealthConfig) -> str | None:
    """Why the loss counts as converged, or None: it learned, and its last window is flat."""
    lr = run.with_role(Role.LEARNING_RATE)
    lr_now = (lr[0].tag, float(lr[0].fvalue[-1]), float(lr[0].fvalue.max())) if lr and len(lr[0].fvalue) else None
    return converged(loss.tag, loss.fvalue[: plateau.points], len(loss.fvalue), loss.fstep, loss.fvalue, lr_now, plateau, config)


def converged(
    tag: str, head: np.ndarray, count: int, s: np.ndarray, v: np.ndarray, lr: tuple[str, float, float] | None,
    plateau: PlateauConfig, config: HealthConfig,
) -> str | None:
    """`_converged` from what a streaming analysis keeps: the first `plateau.points` finite
    values (`head`), how many there are (`count`), the latest ones (`s`, `v`, at least the
    last window) and the first LR tag's (name, last value, peak)."""
    if count < 2 * plateau.points:
        return None
    start = min(len(v) - plateau.points, int(np.searchsorted(s, s[-1] - plateau.steps)))
    window = v[start:]
    half = len(window) // 2
    earlier, later = float(median(window[:half])), float(median(window[half:]))
    first = float(median(head))
    point = float(median(np.abs(np.diff(window)))) * DIFF_MAD_TO_SIGMA
    sigma = point * 1.2533 * math.sqrt(2 / half)
    if abs(earlier - later) > max(config.tolerance * abs(earlier), 3 * sigma):
        return None
    if not first - later >= config.learned_share * abs(first):
        return None
    why = f"{tag} fell from {first:.4g} to {later:.4g} and has been flat over its last {int(s[-1] - s[start])} steps"
    if lr is not None and lr[2] > 0:
        share = lr[1] / lr[2]
        if share < 0.5:
            why += f", as {lr[0]} decayed to {share:.1%} of its peak"
    return why


def _largest(spikes: list[Finding]) -> dict[str, Any] | None:
    if not spikes:
        return None
    top = max(spikes, key=lambda f: (f.ratio if f.ratio is not None and math.isfinite(f.ratio) else -math.inf, f.peak_value or 0.0))
    return {"tag": top.tag, "step": top.start_step, "ratio": _finite(top.ratio), "peak_value": _finite(top.peak_value),
            "baseline": _finite(top.baseline)}


def _finite(x: float | None) -> float | None:
    """JSON has no NaN or Infinity: a number that is not finite is not told."""
    return float(x) if x is not None and math.isfinite(x) else None


def _best_eval(run: RunSeries) -> dict[str, Any] | None:
    evals = sorted(run.with_role(Role.EVAL_LOSS), key=lambda s: s.tag)
    for s in evals:
        if len(s.fvalue):
            i = int(np.argmin(s.fvalue))
            return {"tag": s.tag, "step": int(s.fstep[i]), "value": float(s.fvalue[i])}
    return None

"""What every detector returns: one frozen record per thing worth telling a person."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Severity(enum.IntEnum):
    """Ordered, so `--fail-on warning` means "warning or worse"."""

    INFO = 1
    WARNING = 2
    CRITICAL = 3

    def __str__(self) -> str:
        return self.name.lower()


class Kind(str, enum.Enum):
    LOSS_SPIKE = "loss_spike"
    GRAD_NORM_EXPLOSION = "grad_norm_explosion"
    GRAD_NORM_STUCK = "grad_norm_stuck"
    NONFINITE = "nonfinite"
    LOSS_SCALE_COLLAPSE = "loss_scale_collapse"
    DIVERGENCE = "divergence"
    PLATEAU = "plateau"
    OVERFITTING = "overfitting"
    RESTART = "restart"
    STALE = "stale"  # the run stopped advancing (analyzers/liveness.py)

    def __str__(self) -> str:
        return self.value


class SpikeClass(str, enum.Enum):
    """How a loss spike ended; PENDING until enough steps after the peak are known."""

    FAST_RECOVERING = "fast_recovering"
    SLOW_RECOVERING = "slow_recovering"
    DIVERGENT = "divergent"
    PENDING = "pending"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Finding:
    """One detected pattern on one tag.  Steps are training steps, not point indices."""

    kind: Kind
    tag: str
    severity: Severity
    start_step: int
    message: str
    remediation: str
    peak_step: int | None = None
    end_step: int | None = None
    recovery_steps: int | None = None
    peak_value: float | None = None
    baseline: float | None = None
    ratio: float | None = None
    classification: SpikeClass | None = None
    ongoing: bool = False  # still true at the last point: an alert on it stays open
    evidence: dict[str, Any] = field(default_factory=dict)

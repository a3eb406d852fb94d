"""Every threshold of every detector, in one frozen tree a user can override from a file.

Defaults are justified where they are declared (each detector's module docstring cites the
numbers from public training logbooks they come from)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from analyzers.gradnorm import GradNormConfig
from analyzers.health import HealthConfig
from analyzers.lossscale import LossScaleConfig
from analyzers.nonfinite import NonFiniteConfig
from analyzers.overfitting import OverfittingConfig
from analyzers.plateau import PlateauConfig
from analyzers.restarts import RestartConfig
from analyzers.roles import Role
from analyzers.spikes import SpikeConfig
from analyzers.trend import TrendConfig


class ConfigError(ValueError):
    """A setting that does not exist or has the wrong type; says which, by dotted path."""


@dataclass(frozen=True)
class AnalysisConfig:
    spikes: SpikeConfig = SpikeConfig()
    grad_norm: GradNormConfig = GradNormConfig()
    loss_scale: LossScaleConfig = LossScaleConfig()
    nonfinite: NonFiniteConfig = NonFiniteConfig()
    trend: TrendConfig = TrendConfig()
    plateau: PlateauConfig = PlateauConfig()
    overfitting: OverfittingConfig = OverfittingConfig()
    health: HealthConfig = HealthConfig()
    restarts: RestartConfig = RestartConfig()
    incident_steps: int = 20  # a grad-norm explosion leads the loss spike it causes by at most this
    roles: dict[str, str] = field(default_factory=dict)  # tag -> role, over what the name says

    def __post_init__(self) -> None:
        known = {r.value for r in Role}
        for tag, role in self.roles.items():
            if role not in known:
                raise ConfigError(f"roles.{tag}: unknown role {role!r}; one of {', '.join(sorted(known))}")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> AnalysisConfig:
        """Build from nested settings (a parsed TOML file); unknown keys are errors."""
        return _build(cls, data, "")


def _build(kind: type, data: Mapping[str, Any], path: str) -> Any:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path.rstrip('.') or 'the configuration'} must be a table")
    fields = {f.name: f for f in dataclasses.fields(kind)}
    values = {}
    for key, value in data.items():
        where = f"{path}{key}"
        if key not in fields:
            raise ConfigError(f"unknown setting {where!r}")
        default = getattr(kind(), key)
        if dataclasses.is_dataclass(default):
            values[key] = _build(type(default), value, where + ".")
        elif isinstance(default, dict):
            if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
                raise ConfigError(f"{where} must be a table of strings")
            values[key] = dict(value)
        else:
            values[key] = _scalar(default, value, where)
    return kind(**values)


def _scalar(default: Any, value: Any, where: str) -> Any:
    if isinstance(default, bool) or isinstance(value, bool):
        raise ConfigError(f"{where} must be a number, got {value!r}")
    if isinstance(default, int) and isinstance(value, int):
        return value
    if isinstance(default, float) and isinstance(value, (int, float)):
        return float(value)
    raise ConfigError(f"{where} must be {'an integer' if isinstance(default, int) else 'a number'}, got {value!r}")

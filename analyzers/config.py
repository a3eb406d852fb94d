"""Every threshold of every detector, in one frozen tree a user can override from a file.

Defaults are justified where they are declared (each detector's module docstring cites the
numbers from public training logbooks they come from).

One process watches many kinds of runs (noisy RL runs beside pretraining runs), so a file
may hold `[[override]]` tables: each matches runs by name glob (`run`) and/or source glob
(`source`) and holds any detector settings.  A run's settings are the top-level ones, then
every matching override in file order, a later one winning over an earlier one
(`AnalysisConfig.for_run`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from analyzers.gradnorm import GradNormConfig
from analyzers.health import HealthConfig
from analyzers.liveness import StaleConfig
from analyzers.lossscale import LossScaleConfig
from analyzers.nonfinite import NonFiniteConfig
from analyzers.overfitting import OverfittingConfig
from analyzers.plateau import PlateauConfig
from analyzers.restarts import RestartConfig
from analyzers.roles import Role
from analyzers.running_mean import RunningMeanConfig
from analyzers.schedule import ScheduleConfig
from analyzers.spikes import SpikeConfig
from analyzers.trend import TrendConfig


class ConfigError(ValueError):
    """A setting that does not exist or has the wrong type; says which, by dotted path."""


@dataclass(frozen=True)
class Override:
    """Settings for the runs whose name matches `run` and whose source matches `source`
    (shell globs; None matches any), as written in the file's `[[override]]` table."""

    label: str  # how the API names it: `override[i]` and its match
    run: str | None
    source: str | None
    settings: Mapping[str, Any]

    def matches(self, source: str, run: str) -> bool:
        return (self.run is None or fnmatchcase(run, self.run)) and (self.source is None or fnmatchcase(source, self.source))


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
    schedule: ScheduleConfig = ScheduleConfig()
    stale: StaleConfig = StaleConfig()
    running_mean: RunningMeanConfig = RunningMeanConfig()
    incident_steps: int = 20  # a grad-norm explosion leads the loss spike it causes by at most this
    roles: dict[str, str] = field(default_factory=dict)  # tag -> role, over what the name says
    overrides: tuple[Override, ...] = ()  # per-run settings, in file order

    def __post_init__(self) -> None:
        known = {r.value for r in Role}
        for tag, role in self.roles.items():
            if role not in known:
                raise ConfigError(f"roles.{tag}: unknown role {role!r}; one of {', '.join(sorted(known))}")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> AnalysisConfig:
        """Build from nested settings (a parsed TOML file); unknown keys are errors, in
        overrides too (each is checked here, not when a run first matches it)."""
        if not isinstance(data, Mapping):
            raise ConfigError("the configuration must be a table")
        data = dict(data)
        tables = data.pop("override", [])
        if not isinstance(tables, list) or not all(isinstance(t, Mapping) for t in tables):
            raise ConfigError("override must be an array of tables: [[override]]")
        base = _build(cls(), data, "")
        overrides = tuple(_override(base, i, t) for i, t in enumerate(tables))
        return dataclasses.replace(base, overrides=overrides)

    def applied(self, source: str, run: str) -> list[Override]:
        """The overrides that match a run, in the order they apply."""
        return [o for o in self.overrides if o.matches(source, run)]

    def for_run(self, source: str, run: str) -> AnalysisConfig:
        """The settings of one run: the top-level ones, then each matching override."""
        config = self
        for override in self.applied(source, run):
            config = _build(config, override.settings, "")
        return config


def _override(base: AnalysisConfig, index: int, table: Mapping[str, Any]) -> Override:
    where = f"override[{index}]"
    settings = dict(table)
    match = {}
    for key in ("run", "source"):
        value = settings.pop(key, None)
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{where}.{key} must be a glob (a string), got {value!r}")
        match[key] = value
    if match["run"] is None and match["source"] is None:
        raise ConfigError(f"{where} matches every run: give run = \"GLOB\" and/or source = \"GLOB\"")
    if "override" in settings:
        raise ConfigError(f"{where}: overrides do not nest")
    _build(base, settings, where + ".")  # unknown or mistyped settings are errors now
    label = where + "".join(f" {k}={v}" for k, v in match.items() if v is not None)
    return Override(label, match["run"], match["source"], settings)


def _build(base: Any, data: Mapping[str, Any], path: str) -> Any:
    """`base` with the settings of `data` in place (defaults are `base`'s own values)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path.rstrip('.') or 'the configuration'} must be a table")
    fields = {f.name for f in dataclasses.fields(base)} - {"overrides"}
    values = {}
    for key, value in data.items():
        where = f"{path}{key}"
        if key not in fields:
            raise ConfigError(f"unknown setting {where!r}")
        default = getattr(base, key)
        if dataclasses.is_dataclass(default):
            values[key] = _build(default, value, where + ".")
        elif isinstance(default, dict):
            if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
                raise ConfigError(f"{where} must be a table of strings")
            values[key] = {**default, **value}
        else:
            values[key] = _scalar(default, value, where)
    return dataclasses.replace(base, **values)


def _scalar(default: Any, value: Any, where: str) -> Any:
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where} must be true or false, got {value!r}")
    if isinstance(value, bool):
        raise ConfigError(f"{where} must be a number, got {value!r}")
    if isinstance(default, int) and isinstance(value, int):
        return value
    if isinstance(default, float) and isinstance(value, (int, float)):
        return float(value)
    raise ConfigError(f"{where} must be {'an integer' if isinstance(default, int) else 'a number'}, got {value!r}")

"""One run in, every finding out: each detector on the series of its role, then the
findings that belong together joined into one incident (a grad-norm explosion and the loss
spike it leads)."""

from __future__ import annotations

import numpy as np

from analyzers.config import AnalysisConfig
from analyzers.findings import Finding, Kind
from analyzers.gradnorm import GradNormDetector
from analyzers.incidents import (
    after_warm_restart,
    explained_by_spike,
    inside_explosion,
    join_explosions,
    overfitting_tells,
    rise_after_warm_restart,
    spike_tells_eval_rise,
    told_by_loss_nan,
    unfelt,
)
from analyzers.lossscale import LossScaleDetector
from analyzers.nonfinite import NonFiniteDetector
from analyzers.overfitting import EvalRiseDetector, judge, train_counterpart
from analyzers.plateau import InitialLevelDetector, ZeroLRDetector, merge_plateaus, stalled_plateaus, warming_up
from analyzers.restarts import RestartDetector
from analyzers.roles import Role
from analyzers.running_mean import noted
from analyzers.schedule import WarmRestartDetector
from analyzers.series import RunSeries
from analyzers.spikes import LossSpikeDetector
from analyzers.trend import DivergenceDetector


def analyze_run(run: RunSeries, config: AnalysisConfig = AnalysisConfig()) -> list[Finding]:
    """Findings for one prepared run, ordered by step."""
    # Values near the float64 limits overflow to inf in differences and ratios; inf compares
    # as it should, so the warnings say nothing the results do not.
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        findings = _analyze(run, config)
    return noted(findings, {s.tag: s.averaged for s in run.series.values() if s.averaged})


def _analyze(run: RunSeries, config: AnalysisConfig) -> list[Finding]:
    losses = run.with_role(Role.LOSS) + run.with_role(Role.EVAL_LOSS)
    detectors = {role: LossSpikeDetector(config.spikes, evaluations=role is Role.EVAL_LOSS) for role in (Role.LOSS, Role.EVAL_LOSS)}
    spikes = [f for s in losses for f in detectors[s.role].detect(s)]
    explosions = [f for s in run.with_role(Role.GRAD_NORM) for f in GradNormDetector(config.grad_norm).detect(s)]
    explosions, spikes = join_explosions(explosions, spikes, config.incident_steps)
    lr_restarts = [
        (f.start_step, f.end_step, f.evidence["cycle"]) for s in run.with_role(Role.LEARNING_RATE) for f in WarmRestartDetector(config.schedule).detect(s)
    ]
    trends = _trends(run, config, spikes, explosions, lr_restarts)
    spikes = [s for s in spikes if not overfitting_tells(s, trends)]
    now = {s.tag: int(s.step[-1]) for s in losses if len(s.step)}
    reported = [s for s in spikes if not after_warm_restart(s, lr_restarts, config.schedule, now[s.tag])]
    nonfinite = NonFiniteDetector(config.nonfinite).detect(run)
    loss_tags, grad_tags = {s.tag for s in losses}, {s.tag for s in run.with_role(Role.GRAD_NORM)}
    explosions = unfelt(explosions, spikes + trends + nonfinite, loss_tags, config.incident_steps, config.grad_norm.quiet_points)
    findings = (
        reported
        + explosions
        + [f for f in nonfinite if not told_by_loss_nan(f, nonfinite, loss_tags, grad_tags) and not inside_explosion(f, explosions)]
        + [f for s in run.with_role(Role.LOSS_SCALE) for f in LossScaleDetector(config.loss_scale).detect(s)]
        + trends
        + RestartDetector(config.restarts).detect(run, spikes)
    )
    return sorted(findings, key=lambda f: (f.start_step, f.kind.value, f.tag))


def _trends(
    run: RunSeries, config: AnalysisConfig, spikes: list[Finding], grad: list[Finding], lr_restarts: list[tuple[int, int | None, int]],
) -> list[Finding]:
    """Divergence and plateaus on each train loss; overfitting (or divergence) and plateaus
    on each eval loss, judged against the train loss of the same run, but for the rises
    warm restarts of the LR caused."""
    p = config.plateau
    train = run.with_role(Role.LOSS)
    # what stops a loss from learning, found on the LR and grad-norm tags
    causes = [f for s in run.with_role(Role.LEARNING_RATE) for f in ZeroLRDetector(p).detect(s)]
    causes += [f for f in grad if f.kind is Kind.GRAD_NORM_STUCK and f.peak_value == 0]
    lr = next(iter(run.with_role(Role.LEARNING_RATE)), None)
    found = []
    for series in train:
        rises = [f for f in DivergenceDetector(config.trend).detect(series) if not explained_by_spike(f, spikes)]
        found += [f for f in rises if not rise_after_warm_restart(f, lr_restarts, int(series.step[-1]))]
        unmoved = [f for f in InitialLevelDetector(p).detect(series) if not warming_up(lr, f)]
        found += merge_plateaus(unmoved + stalled_plateaus(series, causes, p))
    for series in run.with_role(Role.EVAL_LOSS):
        twin = train_counterpart(series.tag, {s.tag: len(s.fstep) for s in train})
        counterpart = next((s for s in train if s.tag == twin), None)
        judged = [judge(r, series, counterpart, config.overfitting) for r in EvalRiseDetector(config.overfitting).detect(series)]
        judged = [f for f in judged if not spike_tells_eval_rise(f, spikes)]
        found += [f for f in judged if not rise_after_warm_restart(f, lr_restarts, int(series.step[-1]))]
        found += [f for f in InitialLevelDetector(p, evaluations=True).detect(series) if not warming_up(lr, f)]
    return found

"""One run in, every finding out: each detector on the series of its role, then the
findings that belong together joined into one incident (a grad-norm explosion and the loss
spike it leads)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from analyzers.config import AnalysisConfig
from analyzers.findings import Finding, Kind, Severity, SpikeClass
from analyzers.gradnorm import GradNormDetector
from analyzers.lossscale import LossScaleDetector
from analyzers.nonfinite import NonFiniteDetector
from analyzers.overfitting import EvalRiseDetector, judge, train_counterpart
from analyzers.plateau import InitialLevelDetector, ZeroLRDetector, merge_plateaus, stalled_plateaus, warming_up
from analyzers.restarts import RestartDetector
from analyzers.roles import Role
from analyzers.series import RunSeries
from analyzers.spikes import LossSpikeDetector
from analyzers.trend import DivergenceDetector


def analyze_run(run: RunSeries, config: AnalysisConfig = AnalysisConfig()) -> list[Finding]:
    """Findings for one prepared run, ordered by step."""
    # Values near the float64 limits overflow to inf in differences and ratios; inf compares
    # as it should, so the warnings say nothing the results do not.
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return _analyze(run, config)


def _analyze(run: RunSeries, config: AnalysisConfig) -> list[Finding]:
    losses = run.with_role(Role.LOSS) + run.with_role(Role.EVAL_LOSS)
    spike_detector = LossSpikeDetector(config.spikes)
    spikes = [f for s in losses for f in spike_detector.detect(s)]
    explosions = [f for s in run.with_role(Role.GRAD_NORM) for f in GradNormDetector(config.grad_norm).detect(s)]
    explosions, spikes = _join(explosions, spikes, config.incident_steps)
    trends = _trends(run, config, spikes, explosions)
    spikes = [s for s in spikes if not overfitting_tells(s, trends)]
    findings = (
        spikes
        + explosions
        + NonFiniteDetector(config.nonfinite).detect(run)
        + [f for s in run.with_role(Role.LOSS_SCALE) for f in LossScaleDetector(config.loss_scale).detect(s)]
        + trends
        + RestartDetector(config.restarts).detect(run, spikes)
    )
    return sorted(findings, key=lambda f: (f.start_step, f.kind.value, f.tag))


def _trends(run: RunSeries, config: AnalysisConfig, spikes: list[Finding], grad: list[Finding]) -> list[Finding]:
    """Divergence and plateaus on each train loss; overfitting (or divergence) and plateaus
    on each eval loss, judged against the train loss of the same run."""
    p = config.plateau
    train = run.with_role(Role.LOSS)
    # what stops a loss from learning, found on the LR and grad-norm tags
    causes = [f for s in run.with_role(Role.LEARNING_RATE) for f in ZeroLRDetector(p).detect(s)]
    causes += [f for f in grad if f.kind is Kind.GRAD_NORM_STUCK and f.peak_value == 0]
    lr = next(iter(run.with_role(Role.LEARNING_RATE)), None)
    found = []
    for series in train:
        found += [f for f in DivergenceDetector(config.trend).detect(series) if not _explained(f, spikes)]
        unmoved = [f for f in InitialLevelDetector(p).detect(series) if not warming_up(lr, f)]
        found += merge_plateaus(unmoved + stalled_plateaus(series, causes, p))
    for series in run.with_role(Role.EVAL_LOSS):
        counterpart = train_counterpart(series.tag, train)
        found += [judge(r, series, counterpart, config.overfitting) for r in EvalRiseDetector(config.overfitting).detect(series)]
        found += [f for f in InitialLevelDetector(p, evaluations=True).detect(series) if not warming_up(lr, f)]
    return found


def _join(explosions: list[Finding], spikes: list[Finding], lead: int) -> tuple[list[Finding], list[Finding]]:
    """Pair each explosion with the loss spike starting at most `lead` steps after it (or
    during it), and mark both; the explosion takes the spike's severity (clipping may have
    absorbed it: a fast-recovering spike makes it informational)."""
    spikes = list(spikes)
    joined = []
    for explosion in explosions:
        if explosion.kind is not Kind.GRAD_NORM_EXPLOSION:
            joined.append(explosion)
            continue
        start = explosion.start_step
        near = [
            (i, s) for i, s in enumerate(spikes)
            if start - lead <= s.start_step <= max(start + lead, explosion.end_step or start)
        ]
        if not near:
            joined.append(_absorbed(explosion) if explosion.evidence.get("points") == 1 and not explosion.ongoing else explosion)
            continue
        i, spike = min(near, key=lambda pair: abs(pair[1].start_step - start))
        spikes[i] = replace(spike, evidence={**spike.evidence, "grad_norm_explosion_step": start, "grad_norm_ratio": explosion.ratio})
        joined.append(
            replace(
                explosion,
                severity=spike.severity,  # one incident: as serious as what the loss did
                message=f"{explosion.message}; {spike.tag} spikes {spike.start_step - start:+d} steps later",
                evidence={**explosion.evidence, "loss_spike_step": spike.start_step, "loss_spike_tag": spike.tag},
            )
        )
    return joined, spikes


def _absorbed(explosion: Finding) -> Finding:
    """A one-point explosion no loss spike followed: clipping (or the optimizer) absorbed it."""
    return replace(
        explosion,
        severity=Severity.INFO,
        message=f"{explosion.message}; back at the next point and no loss spike followed",
    )


def _explained(divergence: Finding, spikes: list[Finding]) -> bool:
    """A rise that a spike on the same tag already accounts for is not news: one still up
    or gone divergent after the rise began, or, for a rise that came back, any spike
    within it."""
    end = divergence.end_step
    return any(
        s.tag == divergence.tag
        and s.start_step >= divergence.start_step
        and (s.classification is not SpikeClass.FAST_RECOVERING if end is None else s.start_step <= end)
        for s in spikes
    )


def overfitting_tells(spike: Finding, trends: list[Finding]) -> bool:
    """An evaluation loss's spike inside an overfitting finding of its tag (from the best
    evaluation to where it ends) is that rise seen point by point: the overfitting alert,
    which says where early stopping would have stopped, tells it (a Marian validation loss
    rising 15% over 4 evaluations while its train loss falls)."""
    return any(
        f.kind is Kind.OVERFITTING and f.tag == spike.tag
        and f.start_step <= spike.start_step <= (f.end_step if f.end_step is not None else spike.start_step)
        for f in trends
    )

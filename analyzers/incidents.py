"""Findings of different detectors that are one incident, shared by the one-shot analysis
(`analyzers.analyze`) and the streaming one (`analyzers.runstream`): a grad-norm explosion
and the loss spike it leads (or the loss not feeling it), a divergence a spike already
accounts for, an evaluation loss's spike an overfitting finding already tells, a loss spike
or an eval loss's rise a warm restart of the LR schedule caused, a grad norm's NaN a loss's
NaN already told, and a grad norm's overflow skip inside its explosion."""

from __future__ import annotations

from dataclasses import replace

from analyzers.findings import Finding, Kind, Severity, SpikeClass
from analyzers.schedule import ScheduleConfig


def join_explosions(explosions: list[Finding], spikes: list[Finding], lead: int) -> tuple[list[Finding], list[Finding]]:
    """Pair each explosion with the loss spike starting at most `lead` steps after it (or
    during it), and mark both; the explosion takes the spike's severity (clipping may have
    absorbed it: a fast-recovering spike makes it informational).  One over with no spike
    is informational: the loss never felt it."""
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
            joined.append(explosion if explosion.ongoing else _absorbed(explosion))
            continue
        i, spike = min(near, key=lambda pair: abs(pair[1].start_step - start))
        spikes[i] = replace(spike, evidence={**spike.evidence, "grad_norm_explosion_step": start, "grad_norm_ratio": explosion.ratio})
        joined.append(
            replace(
                explosion,
                severity=spike.severity,  # one incident: as serious as what the loss did
                message=f"{explosion.message}; {_spike_when(spike, start)}",
                evidence={**explosion.evidence, "loss_spike_step": spike.start_step, "loss_spike_tag": spike.tag},
            )
        )
    return joined, spikes


def _spike_when(spike: Finding, start: int) -> str:
    """When the loss spiked, told from the explosion's onset (a spike already under way when
    the norm exploded is one incident too: the norm blew up while the loss was up)."""
    lag = spike.start_step - start
    if lag > 0:
        return f"{spike.tag} spikes {lag} step{'s' if lag != 1 else ''} later"
    if lag < 0:
        return f"{spike.tag} had spiked {-lag} step{'s' if lag != -1 else ''} before"
    return f"{spike.tag} spikes at the same step"


def _absorbed(explosion: Finding) -> Finding:
    """An explosion over that no loss spike followed: clipping (or the optimizer) absorbed it."""
    back = "back at the next point" if explosion.evidence.get("points") == 1 else f"back by step {explosion.end_step}"
    return replace(explosion, severity=Severity.INFO, message=f"{explosion.message}; {back} and no loss spike followed")


def unfelt(explosions: list[Finding], found: list[Finding], loss_tags: set[str], lead: int, quiet_points: int) -> list[Finding]:
    """An explosion still going on, `quiet_points` points and `lead` steps past its onset,
    with nothing starting on a loss since `lead` steps before it (no spike, divergence or
    NaN among `found` on the `loss_tags`), is informational: the loss has not felt
    it.  A norm that grows 10-20x as the LR warms up and stays there while the loss keeps
    falling (a regression fine-tune, `aarugunj27__...` in bench/labels/wild_trainer_states.json)
    is the run's new level, not an alarm; a live run still hears of it as a warning first,
    at its second point, since an explosion usually leads a loss spike within `lead` steps."""
    out = []
    for e in explosions:
        length = int(e.evidence.get("length", 0))
        quiet = (
            e.kind is Kind.GRAD_NORM_EXPLOSION and e.ongoing and e.severity is Severity.WARNING
            and "loss_spike_step" not in e.evidence and length >= quiet_points
            and (e.end_step or e.start_step) - e.start_step >= lead
            and not any(f.tag in loss_tags and f.kind in _FELT and f.start_step >= e.start_step - lead for f in found)
        )
        out.append(replace(e, severity=Severity.INFO, message=f"{e.message}; the loss has not felt it in {length} points") if quiet else e)
    return out


_FELT = (Kind.LOSS_SPIKE, Kind.DIVERGENCE, Kind.NONFINITE)


def explained_by_spike(divergence: Finding, spikes: list[Finding]) -> bool:
    """A rise that a spike on the same tag, begun before the rise was first told, already
    accounts for is not news.  A spike that began after that is the rise's consequence, not
    its cause (a seq2seq loss near 0.0023 creeping up from step 1530, told at 2400, then
    jumping at 3130 on its way to 14x: the divergence is the news, and live it was already
    out), and so is one that began once the trend already stood over the 20% margin
    (`risen_by`), whose confirmation can lag by blocks of hundreds of steps on a coarse log
    (charlm_lr_ramp_interval_h: a climb with its LR ramp from 1200, 20% up by 1599, told at
    1919; a jump there at 1879 would have told nothing of it).  Such a spike explains:

    * if it was not fast, a rise that began before the loss came back from it, or at any
      time if the loss never did.  A rise after a spike that never came down is the
      spike's: the loss left its floor there, and the trend only crossed its margin once
      the spike's own noise had left the trend's noise window (charlm_lr_units_bug_c: a
      divergent spike at 1001, back down to a flat 3.2 from 1400, taken for a divergence
      "rising since 1624").  A rise that began while it was still up is its slow way back,
      seen through the trend's lagging blocks (charlm_lr_burst_b: an LR burst's spike at
      1301, back at 1733, taken for a divergence "from 1384" that was back by 1960);
    * if it was fast, only a rise that came back and that it began within."""
    end, told, risen = divergence.end_step, divergence.evidence["told_at"], divergence.evidence["risen_by"]
    latest = told if risen < 0 else min(told, risen)  # the last onset of a spike that may explain it

    def explains(s: Finding) -> bool:
        if s.tag != divergence.tag or s.start_step > latest:
            return False
        if s.classification is SpikeClass.FAST_RECOVERING:
            return end is not None and divergence.start_step <= s.start_step <= end
        return s.end_step is None or s.end_step >= divergence.start_step

    return any(explains(s) for s in spikes)


def spike_tells_eval_rise(rise: Finding, spikes: list[Finding]) -> bool:
    """An eval loss's divergence whose evaluations over its margin began where a spike on
    the same tag began, one that did not come back fast, is that spike told again: the
    spike, which says where the loss jumped and how it ended, tells it, as a train loss's
    spike tells the rise it caused (`explained_by_spike`).  charlm_lr_burst_m (bench/labels
    trained, retired): an LR x20 burst doubled the eval loss at the evaluation after its
    best, 1.465 -> 3.038, and it never came back; besides that divergent spike it was told
    as a divergence "risen for 16 evaluations since its best", two critical alerts for one
    event.  So was charlm_lr_burst_o's (retired), +59% at the second evaluation after its
    best, the first +1.8%, within its margin.  A rise that began before the spike (a creep,
    then a jump) is news of its own."""
    risen_from = rise.evidence.get("risen_from", -1)
    return rise.kind is Kind.DIVERGENCE and any(
        s.tag == rise.tag and s.classification is not SpikeClass.FAST_RECOVERING and rise.start_step < s.start_step <= risen_from
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


def after_warm_restart(spike: Finding, restarts: list[tuple[int, int | None, int]], config: ScheduleConfig, now: int) -> bool:
    """A loss spike that starts within a warm restart of the LR schedule (`restarts`: the
    (start, end, cycle) steps of those found on the LR tags by `analyzers.schedule`; end
    None while the LR still rises) or the first `follow_points` of its logged points or
    `follow_steps` steps after it: the loss rising with its LR, as the trainer's schedule
    meant.  Unless the loss did not come back (divergent) one cycle (the schedule's last,
    from its restart or peak to this restart) after the onset, at the tag's last step
    `now`: with 10,000-step cycles a loss stays up longer than the slow horizon, and only a
    loss still up when the schedule has had its cycle to bring it down is news.  Decided
    from steps alone, so that a stream cut anywhere decides it alike."""
    if spike.kind is not Kind.LOSS_SPIKE:
        return False
    after = max(config.follow_points * int(spike.evidence.get("interval", 1)), config.follow_steps)
    caused = [cycle for start, end, cycle in restarts if start <= spike.start_step <= (end if end is not None else spike.start_step) + after]
    if not caused:
        return False
    return spike.classification is not SpikeClass.DIVERGENT or now - spike.start_step < max(caused)


def rise_after_warm_restart(rise: Finding, restarts: list[tuple[int, int | None, int]], now: int) -> bool:
    """An eval loss's rise (overfitting or divergence) over a warm restart of the LR
    schedule: its best in the cycle the restart ended (or during the restart's climb to
    its peak LR, or while it still climbs), its highest after the restart, and
    back within a cycle of the restart (or, still up, not yet a cycle past it at `now`, the
    tag's last step).  The eval loss rises with the train loss after each restart and comes
    down as the LR anneals: evaluated every 20 steps over 1,000-step cycles, each restart
    was a divergence warning ("rose ... and train/loss rose with it").  A train loss's
    rise (a divergence, `analyzers.trend`) likewise, its onset being the middle of a block
    of points: one whose block began before the restart reached its peak LR is its
    doing (charlm_sgdr_lr_jump_c: onset 904, the block of 897-912, over the restart at
    900)."""
    peak = rise.peak_step if rise.peak_step is not None else rise.start_step
    last = rise.end_step if rise.end_step is not None else now
    began = rise.start_step - rise.evidence.get("block_steps", 0) // 2
    return any(
        start - cycle <= rise.start_step and (lr_peak is None or began < max(start, lr_peak)) and start <= peak and last - start < cycle
        for start, lr_peak, cycle in restarts
    )


def told_by_loss_nan(finding: Finding, nonfinite: list[Finding], losses: set[str], grad_norms: set[str]) -> bool:
    """A grad norm's non-finite episode (past its overflow skips) during a loss's, where the
    loss was non-finite by the time the grad norm's would be told (its `persist_step`): one
    incident, told by the loss (charlm_fp16_collapse_b: the loss NaN from 1116, the grad
    norm NaN from 1116 after an Inf at 1113, critical only at 1119).  Decided when the grad
    norm's would first be told, so neither appears and then vanishes; a grad norm NaN first
    (or while the loss looks finite: `hidden`) stands on its own."""
    told = finding.evidence.get("persist_step")
    if finding.kind is not Kind.NONFINITE or told is None or finding.evidence.get("hidden") or finding.tag not in grad_norms:
        return False
    return any(
        f.kind is Kind.NONFINITE and f.tag in losses
        and f.start_step <= told and (f.end_step if f.end_step is not None else f.start_step) >= finding.start_step
        for f in nonfinite
    )


def inside_explosion(finding: Finding, explosions: list[Finding]) -> bool:
    """An overflow skip of a grad norm after its explosion began, while it lasts, is part of
    it: the explosion's message counts its Infs (charlm_fp16_collapse_c: an Inf at 1012, in
    the explosion from 1001, was told again as an info overflow skip).  Skips at the
    explosion's first point stay: they are seen before the explosion is, so dropping them
    would make an alert vanish."""
    if finding.kind is not Kind.NONFINITE or not finding.evidence.get("overflow_skip"):
        return False
    return any(
        e.kind is Kind.GRAD_NORM_EXPLOSION and e.tag == finding.tag
        and e.start_step < finding.start_step <= (e.end_step if e.end_step is not None else finding.start_step)
        for e in explosions
    )

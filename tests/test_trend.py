"""Divergence and plateaus on curves whose truth is known, and the healthy curves where they
must stay silent: a plateau only when a loss is not learning for a reason to fix, never
because a run learned and flattened."""

from __future__ import annotations

import numpy as np
import pytest

from analyzers.analyze import analyze_run
from analyzers.findings import Kind, Severity
from analyzers.runstream import feed_run, start_run
from analyzers.series import TagWrites, prepare_run
from tests.curves import chance_curve, clean_curve, eval_corpus, labelled_corpus, score


def run(tags: dict[str, np.ndarray], steps: np.ndarray | None = None, name: str = ""):
    n = len(next(iter(tags.values())))
    steps = np.arange(n, dtype=np.int64) if steps is None else steps
    zero = np.zeros(n, np.int32)
    return prepare_run({t: TagWrites(steps, np.asarray(v, float), zero) for t, v in tags.items()}, run=name)


def kinds(findings, kind: Kind):
    return [f for f in findings if f.kind is kind]


def learned(n: int, seed: int = 0, noise: float = 0.02) -> np.ndarray:
    """A loss that falls and flattens."""
    steps = np.arange(n)
    return (1.8 + 4 * np.exp(-steps / (n / 10))) * (1 + noise * np.random.default_rng(seed).standard_normal(n))


# -- divergence ------------------------------------------------------------------------------


def test_a_rise_that_came_back_is_a_divergence_that_is_over():
    loss = learned(6000)
    bump = np.clip(1 - np.abs(np.arange(6000) - 3600) / 600, 0, None)  # up over 600 steps, down over 600
    loss *= 1 + 0.5 * bump
    [f] = kinds(analyze_run(run({"train/loss": loss})), Kind.DIVERGENCE)
    assert (f.severity, f.ongoing) == (Severity.WARNING, False)
    assert 2950 <= f.start_step <= 3250 and 3900 <= f.end_step <= 4300
    assert f.message == (
        f"train/loss rose from step {f.start_step}: its trend went {f.baseline:.4g} -> {f.peak_value:.4g}, "
        f"and was back by step {f.end_step} (divergence, over)"
    )


def test_divergence_onset_is_where_the_loss_left_its_floor_not_the_noisiest_low():
    steps = np.arange(5000)
    loss = np.where(steps < 3000, 2.0, 2.0 * (1 + (steps - 3000) / 2000)) * (1 + 0.02 * np.random.default_rng(1).standard_normal(5000))
    [f] = kinds(analyze_run(run({"train/loss": loss})), Kind.DIVERGENCE)
    assert 3000 <= f.start_step <= 3150 and f.ongoing and f.severity is Severity.CRITICAL
    assert f.message.endswith("and keeps climbing (divergence)")


def test_a_spike_long_after_a_divergence_was_told_does_not_take_it_back():
    """The rise is the news; a jump 1,500 steps into it is its consequence (a seq2seq loss
    creeping up from 0.0023, then jumping where the climb steepens on its way to 14x).
    Live, the divergence told first stays out when the spike comes."""
    steps = np.arange(5000)
    loss = np.where(steps < 3000, 2.0, 2.0 * (1 + (steps - 3000) / 2000)) * (1 + 0.02 * np.random.default_rng(1).standard_normal(5000))
    loss[4500:] *= 3
    found = analyze_run(run({"train/loss": loss}))
    [f] = kinds(found, Kind.DIVERGENCE)
    assert 3000 <= f.start_step <= 3150 and f.ongoing and f.evidence["told_at"] < 4500
    assert [s.start_step for s in kinds(found, Kind.LOSS_SPIKE)] == [4500]
    state = start_run()
    for a in range(0, 5000, 100):
        zero = np.zeros(100, np.int32)
        state, closed, open_ = feed_run(state, {"train/loss": TagWrites(steps[a : a + 100], loss[a : a + 100], zero)}, ())
        if a >= 4000:
            assert [g.start_step for g in closed + open_ if g.kind is Kind.DIVERGENCE] == [f.start_step], a


def creeping(n: int = 4000, at: int = 2000, per_1000: float = 0.1, seed: int = 3) -> np.ndarray:
    """A loss flat at 1.4 after its fall that creeps up by `per_1000` every 1,000 steps from
    `at` (an LR that grows a little every step), with 3% minibatch noise."""
    steps = np.arange(n)
    trend = 1.4 + 3 * np.exp(-steps / 200) + 1.4 * per_1000 * np.clip(steps - at, 0, None) / 1000
    return trend * (1 + 0.03 * np.random.default_rng(seed).standard_normal(n))


def test_a_loss_that_creeps_up_is_a_divergence_warning_long_before_it_is_20_percent_up():
    """charlm_lr_ramp_clip_g (bench/labels trained tuning): the LR doubling every 100 steps
    from 700, the loss +5% by 850-899, +10% by 1000-1049, +21% only by 1250-1299; told at
    1299 by the 20% rule, at 927 by the creep rule."""
    loss = creeping(n=2700, per_1000=0.2)  # +14% by the end
    [f] = kinds(analyze_run(run({"train/loss": loss})), Kind.DIVERGENCE)
    # +0.3% a block in 1% block noise: where it began is known to about ten blocks
    assert 1800 <= f.start_step <= 2150 and f.ongoing and f.severity is Severity.WARNING
    assert f.evidence["told_at"] <= 2400  # 5% up by 2250, 20% not before 3000
    assert f.message == (
        f"train/loss has been creeping up since step {f.start_step}: its trend went {f.baseline:.4g} -> "
        f"{f.evidence['level_now']:.4g} (+{(f.evidence['level_now'] / f.baseline - 1) * 100:.0f}%) and keeps climbing (divergence)"
    )


def test_a_creep_that_goes_on_to_20_percent_is_the_same_divergence_turned_critical():
    loss = creeping(per_1000=0.2, n=5000)
    state, seen = start_run(), []
    for a in range(0, 5000, 100):
        zero = np.zeros(100, np.int32)
        state, closed, open_ = feed_run(state, {"train/loss": TagWrites(np.arange(a, a + 100), loss[a : a + 100], zero)}, ())
        seen += [(a, g.start_step, g.severity) for g in closed + open_ if g.kind is Kind.DIVERGENCE]
    assert len({start for _, start, _ in seen}) == 1
    assert seen[0][2] is Severity.WARNING and seen[-1][2] is Severity.CRITICAL
    [f] = kinds(analyze_run(run({"train/loss": loss})), Kind.DIVERGENCE)
    assert (f.start_step, f.severity) == (seen[-1][1], Severity.CRITICAL)
    assert f.message.startswith(f"train/loss has been rising since step {f.start_step}: ")


@pytest.mark.parametrize("seed", range(5))
def test_a_loss_logged_every_10_steps_is_told_in_blocks_of_80_steps_not_160(seed):
    """charlm_lr_ramp_interval_g (bench/labels trained tuning), logged every 10 steps: in
    blocks of 16 points (160 steps) its creep was told 1,009 steps after it began, in blocks
    of 8, 529.  Here a loss +5% per 100 steps from step 15,000 is 5% up by 15,100, then 4
    blocks of 80 steps: told by 15,450 (at 16 points a block, at 15,670)."""
    step = np.arange(0, 20000, 10, dtype=np.int64)
    trend = 1.4 + 3 * np.exp(-step / 2000) + 0.7 * np.clip(step - 15000, 0, None) / 1000
    loss = trend * (1 + 0.03 * np.random.default_rng(seed).standard_normal(len(step)))
    [f] = kinds(analyze_run(run({"train/loss": loss}, step)), Kind.DIVERGENCE)
    assert 14900 <= f.start_step <= 15100 and f.evidence["told_at"] <= 15450
    assert f.evidence["block_steps"] == 80


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("every", [1, 10])
def test_a_flat_noisy_loss_never_creeps(seed, every):
    """3% noise around a flat 1.4 for 20,000 points: the lowest of many block medians lies a
    few sigmas under their level; the floor, their lowest median of 3 in a row, less.  Logged
    every 10 steps, a block is 8 points (at 6 points a block, 4 of 20 such series diverged)."""
    loss = creeping(n=20000, at=20000, seed=seed)
    step = np.arange(0, 20000 * every, every, dtype=np.int64)
    assert kinds(analyze_run(run({"train/loss": loss}, step)), Kind.DIVERGENCE) == []


def test_a_flat_loss_that_wanders_does_not_creep_over_its_luckiest_block():
    """sample_runs/stalled_lr: flat from step 200 at 10% noise whose 16-point medians wander
    by a few percent; measured from its lowest block (0.864) it stood 5-14% up for 4 blocks
    in a row, "rose from step 1448 ... back by step 2104"; from its floor, it does not."""
    from app.analysis import analyze
    from app.ingest.sources import read_path
    from tests.conftest import REPO

    [stalled] = read_path(str(REPO / "sample_runs" / "stalled_lr")).runs.values()
    assert [a.finding for a in analyze("s", stalled) if a.finding.kind is Kind.DIVERGENCE] == []


def test_constant_zero_and_negative_losses_do_not_diverge():
    assert kinds(analyze_run(run({"train/loss": np.zeros(2000)})), Kind.DIVERGENCE) == []
    falling = -np.linspace(1, 5, 2000)  # an ELBO-like loss going more negative is improving
    assert kinds(analyze_run(run({"train/loss": falling})), Kind.DIVERGENCE) == []


# -- plateaus: only when there is something to do ----------------------------------------------


def test_the_clean_sample_run_that_converged_raises_no_plateau():
    from app.analysis import analyze
    from app.ingest.sources import read_path
    from tests.conftest import REPO

    [clean] = read_path(str(REPO / "sample_runs" / "clean")).runs.values()
    assert [a.finding for a in analyze("s", clean) if a.finding.kind is Kind.PLATEAU] == []


@pytest.mark.parametrize("schedule", ["cosine", "step", "constant"])
def test_a_run_that_learned_and_flattened_is_no_plateau(schedule):
    curve = clean_curve(11, points=6000, schedule=schedule)
    assert kinds(curve.findings(), Kind.PLATEAU) == []


def test_a_step_schedules_last_stage_at_one_percent_is_no_stalled_schedule():
    n = 6000
    lr = 0.1 * np.select([np.arange(n) < 2000, np.arange(n) < 4000], [1.0, 0.1], 0.01)
    loss = learned(n, seed=2)
    findings = analyze_run(run({"train/loss": loss, "train/lr": lr}))
    assert [f for f in findings if f.severity >= Severity.WARNING] == []


def test_a_cosine_decayed_to_exactly_zero_with_a_long_tail_is_no_plateau():
    n = 200_000
    lr = 3e-4 * 0.5 * (1 + np.cos(np.pi * np.arange(n) / (n - 1)))
    findings = analyze_run(run({"train/loss": learned(n, seed=3), "train/lr": lr}))
    assert kinds(findings, Kind.PLATEAU) == []


def test_an_lr_at_zero_from_the_start_and_a_loss_that_never_moved_are_one_plateau():
    n = 3000
    loss = 2.3 * (1 + 0.01 * np.random.default_rng(4).standard_normal(n))
    [f] = kinds(analyze_run(run({"train/loss": loss, "train/lr": np.zeros(n)})), Kind.PLATEAU)
    assert (f.start_step, f.severity, f.ongoing) == (0, Severity.WARNING, True)
    assert f.evidence["reason"] == "lr_zero" and f.evidence["also"] == ["chance_level"]
    assert f.message == (
        "train/loss is not learning: train/lr has been 0 since step 0 (its level: 2.299 then, 2.3 now); "
        "it has stayed at its initial level 2.298 since step 0 (2999 steps): chance level for 10 classes (ln 10 = 2.303)"
    )
    assert "scheduler" in f.remediation and "labels match the inputs" in f.remediation


def test_an_lr_that_comes_back_closes_its_plateau():
    n = 6000
    loss = learned(n, seed=5)
    loss[2000:4000] = loss[2000] * (1 + 0.02 * np.random.default_rng(6).standard_normal(2000))
    lr = np.where((np.arange(n) >= 2000) & (np.arange(n) < 4000), 0.0, 1e-3)
    [f] = kinds(analyze_run(run({"train/loss": loss, "train/lr": lr})), Kind.PLATEAU)
    assert (f.start_step, f.end_step, f.ongoing) == (2000, 4000, False)
    assert f.message.startswith("train/loss was not learning until step 4000: train/lr has been 0 (its peak was 0.001) since step 2000")


def test_an_lr_that_is_zero_while_the_loss_still_falls_is_not_quoted_as_a_plateau():
    n = 4000
    lr = np.where(np.arange(n) < 1000, 1e-3, 0.0)  # logged wrong: the loss keeps falling
    assert kinds(analyze_run(run({"train/loss": learned(n, seed=7, noise=0.005), "train/lr": lr})), Kind.PLATEAU) == []


def test_a_grad_norm_stuck_at_zero_stops_the_loss():
    n = 3000
    loss = learned(n, seed=8)
    loss[1000:] = loss[1000] * (1 + 0.02 * np.random.default_rng(9).standard_normal(n - 1000))
    grad = np.where(np.arange(n) < 1000, 0.5 + 0.05 * np.random.default_rng(10).standard_normal(n), 0.0)
    findings = analyze_run(run({"train/loss": loss, "train/grad_norm": grad}))
    [f] = kinds(findings, Kind.PLATEAU)
    assert (f.tag, f.start_step, f.evidence["reason"]) == ("train/loss", 1000, "grad_norm_zero")
    assert f.message.startswith("train/loss is not learning: train/grad_norm has been 0 since step 1000 (its level: ")
    assert "requires grad" in f.remediation or "require grad" in f.remediation
    assert [s.start_step for s in kinds(findings, Kind.GRAD_NORM_STUCK)] == [1000]


def test_a_model_at_chance_level_is_told_so_on_its_train_and_eval_loss():
    curve = chance_curve(12, 4, points=1500)
    plateaus = {f.tag: f for f in kinds(curve.findings(), Kind.PLATEAU)}
    assert set(plateaus) == {"train/loss", "eval/loss"}
    ev = plateaus["eval/loss"]
    first, last = (int(s) for s in curve.evals["eval/loss"][0][[0, -1]])
    assert ev.message == (
        f"eval/loss is not learning: it has stayed at its initial level 1.386 since step {first} "
        f"({last - first} steps): chance level for 4 classes (ln 4 = 1.386)"
    )
    assert ev.evidence["chance_classes"] == 4


def test_a_flat_loss_that_is_not_at_chance_needs_the_longer_window():
    loss = 2.9 * (1 + 0.01 * np.random.default_rng(13).standard_normal(6000))
    [f] = kinds(analyze_run(run({"train/loss": loss})), Kind.PLATEAU)
    assert f.start_step == 0 and f.evidence["reason"] == "initial_level"
    assert kinds(analyze_run(run({"train/loss": loss[:3000]})), Kind.PLATEAU) == []  # under 4000 steps: not yet


def test_a_loss_waiting_for_its_lr_to_warm_up_is_not_stuck():
    n = 2000
    lr = 3e-4 * np.minimum(1, np.arange(1, n + 1) / 1500)  # a long warm-up
    loss = 6.9 * (1 + 0.005 * np.random.default_rng(14).standard_normal(n))  # at ln 1000 ...
    loss[1200:] *= np.exp(-np.arange(n - 1200) / 300)  # ... until the LR is up
    findings = analyze_run(run({"train/loss": loss, "train/lr": lr}))
    assert kinds(findings, Kind.PLATEAU) == []
    flat = analyze_run(run({"train/loss": 6.9 * (1 + 0.005 * np.random.default_rng(15).standard_normal(n)),
                            "train/lr": np.minimum(lr, 1e-4)}))  # warmed up by step 666, still at chance
    assert [f.evidence["reason"] for f in kinds(flat, Kind.PLATEAU)] == ["chance_level"]


def test_generated_plateaus_are_found_and_clean_runs_stay_silent():
    scores, loud = score(eval_corpus() + labelled_corpus()[::2])
    plateau = scores[Kind.PLATEAU]
    assert plateau.precision == 1.0, plateau.false_alarms
    assert plateau.recall >= 0.95, plateau.misses
    assert loud == []


def cosine(n: int, peak: float = 1e-3, floor: float = 0.0, warmup: int = 100) -> np.ndarray:
    t = np.arange(n)
    decay = floor + (peak - floor) * 0.5 * (1 + np.cos(np.pi * np.clip(t - warmup, 0, None) / (n - warmup)))
    return np.where(t < warmup, peak * (t + 1) / warmup, decay)


def test_an_lr_frozen_mid_decay_while_the_loss_stops_improving_is_a_plateau():
    n = 6000
    lr = cosine(n)
    lr[2500:] = lr[2500]  # the scheduler is no longer stepped: 0.64 of the peak
    loss = learned(n, seed=11)
    loss[2500:] = loss[2500] * (1 + 0.02 * np.random.default_rng(12).standard_normal(n - 2500))
    [f] = kinds(analyze_run(run({"train/loss": loss, "train/lr": lr})), Kind.PLATEAU)
    assert (f.tag, f.start_step, f.evidence["reason"], f.ongoing) == ("train/loss", 2500, "lr_frozen", True)
    assert f.message.startswith(
        "train/loss is not learning: train/lr has been frozen at 0.000644 (0.64 of its 0.001 peak) after falling "
        "at every point since step 2500 (its level: "
    )
    assert "scheduler.step()" in f.remediation


@pytest.mark.parametrize("case", ["floor", "constant", "steps"])
def test_an_lr_held_as_planned_is_no_plateau(case):
    n = 6000
    t = np.arange(n)
    if case == "floor":  # a linear decay to 10% of the peak, then held there
        lr = np.where(t < 4000, 1e-3 - 0.9e-3 * t / 4000, 1e-4)
    elif case == "constant":  # a warm-up, then a constant LR (a WSD schedule's stable phase)
        lr = np.minimum(1e-3 * (t + 1) / 500, 1e-3)
    else:  # a step schedule: each stage held for 1500 steps
        lr = 1e-3 * 0.1 ** (t // 1500)
    loss = learned(n, seed=13)
    loss[3000:] = loss[3000] * (1 + 0.02 * np.random.default_rng(14).standard_normal(n - 3000))  # flat from 3000
    assert kinds(analyze_run(run({"train/loss": loss, "train/lr": lr})), Kind.PLATEAU) == []


@pytest.mark.parametrize("bug", ["lr_frozen", "lr_zero"])
def test_a_frozen_or_dropped_lr_is_found_the_same_in_any_split(bug):
    from analyzers.plateau import ZeroLRDetector
    from analyzers.stream import feed_in_pieces

    lr = cosine(3000)
    if bug == "lr_frozen":
        lr[1200:] = lr[1200]
    else:
        lr[1200:] *= 1e-8
    steps = np.arange(3000, dtype=np.int64)
    detector = ZeroLRDetector()
    whole = detector.detect(run({"train/lr": lr}).series["train/lr"])
    assert [(f.start_step, f.evidence["reason"]) for f in whole] == [(1200, bug)]
    for cuts in ([1199], [1200], [1201], [600, 1200, 1231, 2000], list(range(1190, 1240))):
        assert feed_in_pieces(detector, steps, lr, cuts, "train/lr", checks=3) == whole


@pytest.mark.parametrize("sudden", [False, True])
def test_an_lr_set_to_zero_at_once_is_told_sooner_than_one_that_decayed_into_it(sudden):
    # llm.c logs its linear decay to 6 decimals and trains its last ~350 steps at 0: a
    # schedule run to its end, told after 1000 steps; a scheduler that sets 6e-4 to 0 at
    # once, after 200
    n = 4000
    t = np.arange(n)
    lr = np.round(np.where(t < 3600, 6e-4 * (1 - t / 3600), 0.0), 6)
    if sudden:
        lr = np.where(t < 3600, 6e-4, 0.0)
    loss = learned(n, seed=15)
    loss[3500:] = loss[3500] * (1 + 0.02 * np.random.default_rng(16).standard_normal(n - 3500))
    plateaus = kinds(analyze_run(run({"train/loss": loss, "train/lr": lr})), Kind.PLATEAU)
    assert [(f.start_step, f.evidence["reason"]) for f in plateaus] == ([(3600, "lr_zero")] if sudden else [])


def test_an_lr_scaled_down_eight_orders_at_once_is_zero_though_it_still_moves():
    # charlm_lr_tiny: a bug multiplies the LR by 1e-8 at step 700; it keeps following its
    # cosine, eight orders of magnitude down, and the loss stops improving
    n = 3000
    lr = cosine(n, peak=3e-3)
    lr[700:] *= 1e-8
    loss = learned(n, seed=17)
    loss[700:] = loss[700] * (1 + 0.02 * np.random.default_rng(18).standard_normal(n - 700))
    [f] = kinds(analyze_run(run({"train/loss": loss, "train/lr": lr})), Kind.PLATEAU)
    assert (f.start_step, f.evidence["reason"]) == (700, "lr_zero")
    assert f.message.startswith("train/loss is not learning: train/lr has been 2.69e-11 (9e-09 of its 0.003 peak) since step 700")

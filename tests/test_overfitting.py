"""Eval losses as first-class series: overfitting (an eval loss past its best while the
train loss keeps falling), an eval loss that diverges with its train loss, a model that
never learns, on short series (5-50 evaluations, epochs as steps) and long ones; and the
healthy eval curves where nothing is said."""

from __future__ import annotations

import numpy as np
import pytest

from analyzers.analyze import analyze_run
from analyzers.findings import Kind, Severity
from analyzers.overfitting import EvalRiseDetector
from analyzers.roles import Role, infer_role
from analyzers.series import TagWrites, prepare_run
from analyzers.stream import feed_in_pieces
from app.analysis import analyze
from app.ingest.sources import read_path
from tests.conftest import REPO
from tests.curves import eval_corpus, score
from tests.test_run_stream import stream

SHARED = REPO.parent / "shared"


def run(series: dict[str, tuple[np.ndarray, np.ndarray]], name: str = ""):
    writes = {t: TagWrites(np.asarray(s, np.int64), np.asarray(v, float), np.zeros(len(s), np.int32)) for t, (s, v) in series.items()}
    return prepare_run(writes, run=name)


def found(findings, kind: Kind):
    return [f for f in findings if f.kind is kind]


# A Keras IMDB run's validation loss, 20 epochs (shaped like TheCodeheadMT's: best at epoch 4)
VAL = [0.4265, 0.3306, 0.29, 0.3059, 0.2751, 0.2852, 0.2855, 0.3239, 0.3075, 0.3212, 0.3402, 0.3625, 0.3749,
       0.3992, 0.4125, 0.4314, 0.4575, 0.4761, 0.4981, 0.5183]
TRAIN = [0.5466, 0.3504, 0.2629, 0.2113, 0.1808, 0.1552, 0.1327, 0.1177, 0.102, 0.0875, 0.0766, 0.0661, 0.058,
         0.049, 0.0437, 0.0366, 0.0311, 0.026, 0.0251, 0.02]
EPOCHS = np.arange(20)


def test_twenty_epochs_overfitting_with_the_best_epoch_and_the_rise():
    findings = analyze_run(run({"epoch_loss": (EPOCHS, TRAIN), "val_loss": (EPOCHS, VAL)}))
    [f] = found(findings, Kind.OVERFITTING)
    assert (f.tag, f.start_step, f.severity, f.ongoing) == ("val_loss", 4, Severity.WARNING, True)
    assert (f.baseline, f.peak_value) == (0.2751, 0.5183)
    assert f.message == (
        "val_loss has risen for 15 evaluations since its best at step 4: 0.2751 -> 0.5183 (+88.4%) "
        "while epoch_loss fell 0.1808 -> 0.02 (overfitting)"
    )
    assert f.remediation.startswith("Early stopping would have stopped at step 4 (eval loss 0.2751): keep that checkpoint.")
    assert f.evidence["train"] == "fell" and f.evidence["best_step"] == 4


def test_overfitting_fires_three_evaluations_after_the_best_when_fed_live():
    findings = [analyze_run(run({"epoch_loss": (EPOCHS[:k], TRAIN[:k]), "val_loss": (EPOCHS[:k], VAL[:k])})) for k in range(1, 21)]
    first = next(k for k, f in enumerate(findings, 1) if found(f, Kind.OVERFITTING))
    assert first == 8  # epochs 5, 6, 7 above the best: known once epoch 7 (the 8th) is in


def test_a_keras_validation_run_is_an_eval_run_even_without_a_train_loss():
    assert infer_role("epoch_loss") is Role.LOSS
    assert infer_role("epoch_loss", "logs/imdb-1690485351/validation") is Role.EVAL_LOSS
    assert infer_role("epoch_loss", "logs/imdb-1690485351/train") is Role.LOSS
    assert infer_role("loss", "estimator/eval") is Role.EVAL_LOSS and infer_role("loss", "validation#2") is Role.EVAL_LOSS
    assert infer_role("loss", "runs/test-lr3e-4") is Role.LOSS and infer_role("loss", "evaluator") is Role.LOSS
    [f] = found(analyze_run(run({"epoch_loss": (EPOCHS, VAL)}, name="logs/imdb/validation")), Kind.OVERFITTING)
    assert f.start_step == 4
    assert f.message == (
        "epoch_loss has risen for 15 evaluations since its best at step 4: 0.2751 -> 0.5183 (+88.4%); "
        "no train loss in this run to compare (overfitting)"
    )


def test_five_evaluations_are_enough():
    steps = np.arange(0, 2501, 10)
    train = 0.9 * np.exp(-steps / 3000) + 0.4
    evals = np.array([500, 1000, 1500, 2000, 2500])
    findings = analyze_run(run({"loss": (steps, train), "eval_loss": (evals, [0.95, 0.88, 0.93, 0.97, 1.02])}))
    [f] = found(findings, Kind.OVERFITTING)
    assert (f.start_step, f.evidence["evaluations"]) == (1000, 3)
    assert f.message.startswith("eval_loss has risen for 3 evaluations since its best at step 1000: 0.88 -> 1.02 (+15.9%) while loss fell")


def test_an_eval_loss_that_diverges_with_its_train_loss_is_a_divergence():
    steps = np.arange(3000)
    train = np.where(steps < 2000, 2 + np.exp(-steps / 300), 2 * (1 + (steps - 2000) / 1000)) * (1 + 0.01 * np.random.default_rng(0).standard_normal(3000))
    evals = np.arange(99, 3000, 100)
    val = np.interp(evals, steps, np.where(steps < 2000, 2.1 + np.exp(-steps / 300), 2.1 * (1 + (steps - 2000) / 1000)))
    findings = analyze_run(run({"train/loss": (steps, train), "val/loss": (evals, val)}))
    ev = [f for f in found(findings, Kind.DIVERGENCE) if f.tag == "val/loss"]
    assert len(ev) == 1 and ev[0].severity is Severity.CRITICAL and 1899 <= ev[0].start_step <= 2099
    assert ", and train/loss rose with it: " in ev[0].message and ev[0].message.endswith("(divergence)")
    assert found(findings, Kind.OVERFITTING) == []
    assert [f.tag for f in found(findings, Kind.DIVERGENCE) if f.tag == "train/loss"] == ["train/loss"]


def jumped_and_stayed(after: list[float]):
    """A word-LM's twelve epochs (an evaluation every 3,000 steps, loss every 200): the
    validation loss bottoms at epoch 3, then `after`; the train loss jumps by 1.2 nats with it."""
    evals = np.arange(1, 13) * 3000
    val = [5.6, 5.5, 5.33, *after]
    steps = np.arange(200, 36_001, 200)
    noise = 1 + 0.01 * np.random.default_rng(3).standard_normal(len(steps))
    train = np.where(steps < 10_000, 5.2 + 3 * np.exp(-steps / 1500), 6.4) * noise
    return run({"train/loss": (steps, train), "val/loss": (evals, val)})


def test_an_eval_loss_that_jumped_and_stays_up_while_drifting_down_is_a_divergence():
    # Each evaluation is the lowest of the last three, so the loss is "coming back down", but
    # at 0.3% an epoch from +13%: past 10% and not half way back, it is risen.
    after = [6.2, 6.1, 6.05, 6.03, 6.0, 5.99, 5.98, 5.97, 5.96]
    findings = analyze_run(jumped_and_stayed(after))
    [f] = [f for f in found(findings, Kind.DIVERGENCE) if f.tag == "val/loss"]
    assert (f.start_step, f.severity, f.peak_value) == (9000, Severity.CRITICAL, 6.2)
    assert f.message.startswith("val/loss has risen for 9 evaluations since its best at step 9000: 5.33 -> 5.96 (+11.8%), and train/loss rose with it")
    # live, it is told at the third evaluation above the best, under 10 evaluations in
    first = next(k for k in range(4, 13) if found(analyze_run(jumped_and_stayed(after[: k - 3])), Kind.DIVERGENCE))
    assert first == 6


def test_a_noisy_eval_loss_that_moved_up_and_stays_is_overfitting():
    """A sentiment classifier's eval loss, 10% noise after its best, sits 45-55% above it
    for five evaluations: none alone clears 3 noise sigmas past the best's luck, five in a
    row at 1.5 are no noise.  Told at the fifth, with the best as where to stop."""
    val = [0.5, 0.35, 0.28, 0.25, 0.23, 0.222, 0.208, 0.203, 0.236, 0.256, 0.226, 0.193, 0.199, 0.255, 0.224, 0.182,
           0.218, 0.194, 0.206, 0.209, 0.204, 0.232, 0.219, 0.207, 0.229, 0.278, 0.285, 0.285, 0.283, 0.279]
    evals = np.arange(1, 31) * 500
    steps = np.arange(10, 15_001, 10)
    train = 0.05 + 0.6 * np.exp(-steps / 3000)

    def rises(upto: int) -> list[str]:
        shown = run({"loss": (steps, train), "eval_loss": (evals[:upto], val[:upto])})
        return [f.message for f in analyze_run(shown) if f.tag == "eval_loss"]

    # its first rise, +16% and +26% over 0.203 after a smooth fall, before any noise was
    # known: a spike back two evaluations later, for information (the early rule of
    # analyzers/spikes.py)
    first_rise = "eval_loss spiked at step 4500: 0.203 -> 0.256 (1.3x baseline), back in 1000 steps (fast-recovering)"
    assert rises(30) == [first_rise, "eval_loss has risen for 14 evaluations since its best at step 8000: 0.182 -> 0.279 "
                         "(+53.3%) while loss fell 0.09524 -> 0.05439 (overfitting)"]
    assert rises(29) == [first_rise]  # four in a row are not yet five


def test_an_eval_loss_that_reaches_exactly_zero_and_stays_there_never_rises():
    """An evaluation equal to the best is no rise, even when the margin is 0: a loss at
    exactly 0 (masked labels, a tiny eval set learned by heart) told "0 -> 0" overfitting
    every three evaluations."""
    steps = np.arange(40) * 10
    val = np.r_[np.linspace(1, 0, 10), np.zeros(30)]
    findings = analyze_run(run({"loss": (steps, np.linspace(2, 1, 40)), "eval_loss": (steps, val)}))
    assert [f.message for f in findings if f.tag == "eval_loss"] == []


@pytest.mark.parametrize("after", [
    [5.65, 5.6, 5.57, 5.55, 5.54, 5.53, 5.52, 5.51, 5.5],  # +6%, drifting down: inside an evaluation's noise
    [6.2, 6.1, 5.7, 5.5, 5.45, 5.4, 5.38, 5.36, 5.34],  # +16%, under +10% by its third evaluation: coming back
])
def test_a_rise_under_ten_percent_or_back_under_it_by_the_third_evaluation_is_coming_back_down(after):
    findings = analyze_run(jumped_and_stayed(after))
    assert [f.message for f in findings if f.tag == "val/loss" and f.kind in (Kind.DIVERGENCE, Kind.OVERFITTING)] == []


def test_hf_trainers_closing_train_loss_of_one_point_is_not_the_eval_losss_twin():
    # A Whisper fine-tune's trainer_state.json: `loss` every 25 steps falls to ~0, `eval_loss`
    # every 1,000 rises from its first evaluation, and the closing summary logs `train_loss`
    # (the run's average) once, at the last step.
    steps = np.arange(25, 5001, 25)
    train = 0.3 * np.exp(-steps / 300) + 0.0002
    evals = np.arange(1000, 5001, 1000)
    writes = {"loss": (steps, train), "eval_loss": (evals, [0.321, 0.36, 0.394, 0.412, 0.42]), "train_loss": ([5000], [0.04])}
    [f] = found(analyze_run(run(writes)), Kind.OVERFITTING)
    assert f.message.startswith("eval_loss has risen for 4 evaluations since its best at step 1000: 0.321 -> 0.42 (+30.8%) while loss fell ")
    tag_writes = {t: TagWrites(np.asarray(s, np.int64), np.asarray(v, float), np.zeros(len(s), np.int32)) for t, (s, v) in writes.items()}
    _, streamed, _ = stream(tag_writes, (), [0.3, 0.6, 0.9])
    assert [x.message for x in found(streamed, Kind.OVERFITTING)] == [f.message]


def test_an_eval_loss_that_rose_before_it_ever_improved_is_a_divergence():
    steps = np.arange(1, 120)
    val = np.where(steps < 8, 4.12, 4.12 * (1 + 0.4 * np.minimum(1, (steps - 8) / 34)))
    [f] = found(analyze_run(run({"val/loss": (steps, val)})), Kind.DIVERGENCE)
    assert f.start_step == 1 and f.evidence["fell_before"] == 0.0
    assert "before it ever improved much (it fell 0.0% from 4.12 first)" in f.message


def test_a_rise_that_came_back_is_over_and_the_next_one_is_new():
    evals = np.arange(5000, 400_001, 5000)
    val = 1.4 - 0.05 * np.linspace(0, 1, len(evals))
    for best, length in ((30, 12), (60, 8)):  # two blocks of rise, each coming back
        val[best + 1 : best + 1 + length] = val[best] * (1 + 0.03 * np.arange(1, length + 1))
        val[best + 1 + length : best + 4 + length] = val[best] - 0.001
    train = (evals, 2.0 - 0.1 * np.linspace(0, 1, len(evals)))
    rises = found(analyze_run(run({"train/loss": train, "val/loss": (evals, val)})), Kind.OVERFITTING)
    assert [(f.start_step, f.ongoing, f.severity) for f in rises] == [
        (int(evals[30]), False, Severity.INFO), (int(evals[60]), False, Severity.INFO)]
    assert rises[0].end_step == int(evals[43]) and "(overfitting, over)" in rises[0].message


@pytest.mark.parametrize("noise", [0.0, 0.003, 0.01])
def test_an_eval_loss_that_follows_its_train_loss_stays_silent(noise):
    steps = np.arange(20_000)
    train = (1.9 + 5 * np.exp(-steps / 3000)) * (1 + 0.03 * np.random.default_rng(1).standard_normal(len(steps)))
    evals = np.arange(499, 20_000, 500)
    val = (2.0 + 5 * np.exp(-evals / 3000)) * (1 + noise * np.random.default_rng(2).standard_normal(len(evals)))
    findings = analyze_run(run({"train/loss": (steps, train), "val/loss": (evals, val)}))
    assert [f.message for f in findings if f.kind in (Kind.OVERFITTING, Kind.DIVERGENCE, Kind.PLATEAU)] == []


def test_a_flattening_eval_loss_with_a_small_drift_is_not_overfitting():
    evals = np.arange(1, 31)
    val = 1.301 + 0.0015 * np.maximum(0, evals - 15)  # +0.6% over the last 5 evaluations: Marian's authentic blocks
    assert found(analyze_run(run({"val/loss": (evals, val)})), Kind.OVERFITTING) == []


def test_generated_eval_runs_scored():
    scores, loud = score(eval_corpus())
    for kind in (Kind.OVERFITTING, Kind.DIVERGENCE, Kind.PLATEAU):
        assert scores[kind].precision == 1.0, scores[kind].false_alarms
        assert scores[kind].recall >= 0.95, scores[kind].misses
    assert loud == []


def test_the_hf_trainer_sample_with_five_evaluations_is_healthy():
    [hf] = read_path(str(REPO / "sample_runs" / "hf_trainer" / "trainer_state.json")).runs.values()
    assert [a.finding.kind for a in analyze("hf", hf) if a.finding.kind in (Kind.OVERFITTING, Kind.PLATEAU, Kind.DIVERGENCE)] == []


# -- the real public logs of the tuning part (skipped without ../shared) -----------------------


def shared(path: str):
    if not (SHARED / path).exists():
        pytest.skip(f"{SHARED / path} not found (shared/ is laid beside the repo)")
    return read_path(str(SHARED / path)).runs


def test_real_keras_imdb_validation_overfits_after_epoch_4():
    runs = shared("reference-runs/TheCodeheadMT_TensorBoard-Tutorial/archive/logs/imdb-model-1690485351")
    by_run = {name: [a.finding for a in analyze("k", r)] for name, r in runs.items()}
    assert [(f.tag, f.start_step) for f in by_run["validation"] if f.tag == "epoch_loss"] == [("epoch_loss", 4)]
    assert [f for f in by_run["train"] if f.severity >= Severity.WARNING] == []


def test_real_marian_back_translation_blocks_overfit_three_times():
    [marian] = shared("reference-runs-2/json/ext2_marian_wmt_encs.json").values()
    rises = [a.finding for a in analyze("m", marian) if a.finding.kind is Kind.OVERFITTING]
    assert [f.start_step for f in rises] == [980_000, 1_105_000, 1_175_000]
    assert all(f.evidence["train"] == "fell" for f in rises)


def test_real_lrqa_at_chance_for_twenty_epochs_is_a_plateau_on_both_losses():
    [lrqa] = shared("reference-runs-2/json/ext2_hf_lrqa_quality.json").values()
    plateaus = {a.finding.tag: a.finding for a in analyze("q", lrqa) if a.finding.kind is Kind.PLATEAU}
    assert {t: (f.start_step, f.evidence["chance_classes"]) for t, f in plateaus.items()} == {
        "train/loss": (50, 4), "val/loss": (50, 4)}


def test_real_deepspeed_fine_tune_validation_rise_is_a_divergence_that_came_back():
    [ds] = shared("reference-runs-2/json/ext2_ds_gpt2_ptb_fp16.json").values()
    [f] = [a.finding for a in analyze("d", ds) if a.finding.kind is Kind.DIVERGENCE]
    assert (f.tag, f.start_step, f.ongoing) == ("val/loss", 5, False)


def test_a_flat_eval_loss_of_pure_noise_rarely_rises():
    """The best of many noisy evaluations is an outlier: rises are measured past what noise
    alone does from there."""
    def rises(noise: float) -> tuple[int, int]:
        count = evals = 0
        for seed in range(10):
            for n in (20, 200, 1000):
                v = 2 * (1 + noise * np.random.default_rng(seed).standard_normal(n))
                count += len(EvalRiseDetector().detect(run({"val/loss": (np.arange(n), v)}).series["val/loss"]))
                evals += n
        return count, evals

    assert rises(0.005)[0] == 0
    count, evals = rises(0.02)  # 12 in 12,200, nine of them in the first ten evaluations
    assert count * 1000 <= evals, count


def test_a_validation_rise_told_as_overfitting_is_not_also_a_spike():
    # Marian's back-translated blocks: a smooth validation loss (every 5k updates) rises 15%
    # over 4 validations while the train loss falls, then comes back; its points stand far
    # out of its tiny noise, but the rise is one overfitting alert, not a spike too
    rng = np.random.default_rng(2)
    steps = np.arange(0, 400_000, 5000)
    val = 1.45 - 0.15 * steps / steps[-1] + 0.002 * rng.standard_normal(len(steps))
    val[60:66] += np.array([0.05, 0.1, 0.16, 0.19, 0.1, 0.03]) * 1.3
    train_steps = np.arange(0, 400_000, 500)
    train = 2.2 - 0.4 * train_steps / train_steps[-1] + 0.01 * rng.standard_normal(len(train_steps))
    findings = analyze_run(run({"train/loss": (train_steps, train), "val/loss": (steps, val)}))
    assert [(f.kind, f.tag) for f in findings if f.tag == "val/loss"] == [(Kind.OVERFITTING, "val/loss")]


# -- dense eval series: an eval loss logged at every step (issue 10, "never cry wolf") --------


def dense_run(noise: float, seed: int, rise_from: int | None = None, n: int = 100_000):
    """bench/scale.py's healthy run: a train loss falling to a flat 2 with
    `noise`, and an eval loss at every step, 5% above it with the same noise; from
    `rise_from`, the eval loss climbs 20% per 20,000 steps while the train loss stays flat."""
    step = np.arange(n)
    train = (2 + 3 * np.exp(-step / 3000)) * (1 + noise * np.random.default_rng(seed).standard_normal(n))
    rise = 1 + 0.2 * np.clip((step - rise_from) / 20_000, 0, None) if rise_from is not None else 1
    return run({"train/loss": (step, train), "eval/loss": (step, 1.05 * train * rise)})


@pytest.mark.parametrize("noise", [0.01, 0.02])
def test_a_long_flat_noisy_eval_loss_at_every_step_stays_silent(noise):
    """The best of 100,000 noisy evaluations is an outlier and the noise of 64 of them swings:
    with a patience of 3 whatever the count, this run told 9 rises, 8 as divergences (the
    train level at an evaluation was its one noisy point)."""
    findings = analyze_run(dense_run(noise, seed=1))
    assert [f.message for f in findings if f.kind in (Kind.OVERFITTING, Kind.DIVERGENCE)] == []


@pytest.mark.parametrize("noise", [0.01, 0.02])
def test_a_rise_on_an_eval_loss_at_every_step_is_found_and_judged_on_train_levels(noise):
    findings = analyze_run(dense_run(noise, seed=0, rise_from=70_000))
    [f] = [f for f in findings if f.kind in (Kind.OVERFITTING, Kind.DIVERGENCE)]
    assert (f.kind, f.ongoing, f.evidence["train"]) == (Kind.OVERFITTING, True, "flat")
    assert f.start_step < 70_000 and f.evidence["rise"] > 0.3


def test_a_dense_eval_rise_fed_in_pieces_is_found_as_at_once():
    series = dense_run(0.02, seed=3, rise_from=30_000, n=50_000).series["eval/loss"]
    rng = np.random.default_rng(4)
    cuts = sorted(set(rng.integers(1, len(series), 40).tolist()) | set(range(34_800, 35_100)))  # it opens at 34,956
    detector = EvalRiseDetector()
    whole = detector.detect(series)
    assert whole and feed_in_pieces(detector, series.step, series.value, cuts, series.tag) == whole

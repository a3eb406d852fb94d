"""A train loss logged as its epoch's running mean is told from its curve and worked back to
each batch's own loss; a loss logged as it is never is (analyzers/running_mean.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzers import running_mean
from analyzers.config import AnalysisConfig
from analyzers.roles import Role
from analyzers.running_mean import MeanState, RunningMeanConfig, feed, worked_back
from analyzers.series import prepare_run
from app.analysis import analyze, tag_writes
from app.ingest.sources import read_path
from tests.curves import clean_curve, epoch_means, labelled_corpus, resumed_mid_epoch, running_mean_curve
from tests.test_run_stream import REPO, SAMPLES

TRAINED = REPO / "bench" / "trained" / "runs"


@pytest.mark.parametrize("epoch", [40, 200, 1000])
def test_each_batchs_loss_comes_back_from_the_running_means(epoch):
    curve, batches = running_mean_curve(1, epoch, points=max(3000, 4 * epoch))
    out, period = worked_back(curve.steps, curve.tags["train/loss"])
    assert period == epoch
    np.testing.assert_allclose(out, batches, rtol=1e-9)


def test_a_meter_logged_every_n_batches_gives_each_point_the_mean_of_its_n():
    curve, batches = running_mean_curve(2, 400, every=10)
    out, period = worked_back(curve.steps, curve.tags["train/loss"])
    assert period == 400
    first = curve.steps % 400 == 0  # an epoch's first point: its first batch alone
    np.testing.assert_allclose(out[first], batches[curve.steps[first]], rtol=1e-9)
    own = [batches[s - 9 : s + 1].mean() for s in curve.steps[~first]]  # the others: their 10 batches
    np.testing.assert_allclose(out[~first], own, rtol=1e-9)


def test_epochs_too_short_to_judge_are_left_as_logged():
    curve, _ = running_mean_curve(3, 30)
    out, period = worked_back(curve.steps, curve.tags["train/loss"])
    assert period == 0 and out is curve.tags["train/loss"]


def _train_losses():
    for curve in labelled_corpus(0):
        yield curve.name, curve.steps, curve.tags["train/loss"]
    for name, (writes, resumes) in SAMPLES.items():
        for s in prepare_run(writes, resumes, None, name, RunningMeanConfig(enabled=False)).with_role(Role.LOSS):
            yield name, s.step, s.value
    for path in sorted(TRAINED.iterdir()):
        if "epoch_mean" not in path.name:
            for s in prepare_run(tag_writes(read_path(str(path)).runs[path.name])).with_role(Role.LOSS):
                yield path.name, s.step, s.value


def test_no_loss_logged_as_it_is_is_taken_for_a_running_mean():
    told = [name for name, step, value in _train_losses() if worked_back(step, value)[1]]
    assert told == []


def test_no_real_public_loss_is_taken_for_a_running_mean(reference_runs):
    """Every train loss of the public logs beside the repo (LLM pretraining, NMT, word-LMs,
    HF trainer states, Keras epoch logs): each logged as it is."""
    paths = [reference_runs / "TheCodeheadMT_TensorBoard-Tutorial", reference_runs / "janosh_tensorboard-reducer"]
    paths += sorted((reference_runs / "json").glob("*.json")) + sorted((reference_runs.parent / "reference-runs-2" / "json").glob("*.json"))
    losses = [(f"{path.name}:{name}:{s.tag}", s) for path in paths for name, run in read_path(str(path)).runs.items()
              for s in prepare_run(tag_writes(run), (), None, name, RunningMeanConfig(enabled=False)).with_role(Role.LOSS)]
    assert len(losses) >= 20
    assert [label for label, s in losses if worked_back(s.step, s.value)[1]] == []


def test_a_bad_batch_at_the_same_place_of_every_epoch_is_no_running_mean():
    """Its jumps recur exactly every epoch, but the steps after them do not shrink."""
    curve = clean_curve(4, points=4000)
    loss = curve.tags["train/loss"].copy()
    loss[50::200] *= 1.8
    assert worked_back(curve.steps, loss)[1] == 0


def test_two_epochs_that_stop_settling_leave_the_curve_as_logged_from_the_epoch_before_them():
    """The run changed its epoch length at step 2000: its first 300-step epoch also reset at
    2000, and the 200-step epochs [2200, 2400) and [2400, 2600) do not settle.  From 2000 on
    (the epoch before them) the curve is as logged; before, each batch's loss."""
    batches, means = _changed_epochs(5)
    out, period = worked_back(np.arange(4000), means)
    assert period == 0
    np.testing.assert_allclose(out[:2000], batches[:2000], rtol=1e-9)
    np.testing.assert_array_equal(out[2000:], means[2000:])
    state, _, changed = feed(running_mean.start(), np.arange(2500), means[:2500])
    assert state.period == 200 and not state.off
    state, _, changed = feed(state, np.arange(2500, 2700), means[2500:2700])
    assert state.off and changed == 2000  # a stream that fed the steps since 2000 worked back feeds them again


def test_a_nan_passes_through_and_the_finite_points_are_worked_back():
    curve, batches = running_mean_curve(6, 200)
    means = curve.tags["train/loss"].copy()
    means[1210:1400] = np.nan  # a NaN batch: the epoch's mean stays NaN until the next reset
    out, period = worked_back(curve.steps, means)
    assert period == 200
    assert np.isnan(out[1210:1400]).all()
    np.testing.assert_allclose(out[1400:], batches[1400:], rtol=1e-9)


def test_turned_off_every_loss_is_taken_as_logged():
    curve, _ = running_mean_curve(1, 200)
    out, period = worked_back(curve.steps, curve.tags["train/loss"], RunningMeanConfig(enabled=False))
    assert period == 0 and out is curve.tags["train/loss"]


def _changed_epochs(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Batches logged as running means of 200-step epochs, then of 300-step ones."""
    rng = np.random.default_rng(seed)
    batches = 2.0 * (1 + 0.03 * rng.standard_normal(4000))
    return batches, np.concatenate([epoch_means(batches[:2000], 200)[1], epoch_means(batches[2000:], 300)[1]])


CURVES = [(c.steps, c.tags["train/loss"]) for c in (running_mean_curve(7, 150)[0], running_mean_curve(8, 400, every=5)[0])]
CURVES += [(np.arange(4000), _changed_epochs(5)[1]), (np.arange(4000), clean_curve(9, points=4000).tags["train/loss"])]


def fed_in_pieces(steps: np.ndarray, means: np.ndarray, cuts: list[int]) -> tuple[MeanState, np.ndarray]:
    """Feed a curve cut at `cuts`, the state through its stored form between feeds; a feed
    that changes steps already fed is made again from the newest state before them, as the
    callers do.  The last state and the values the detectors were last given."""
    state, saved, out = running_mean.start(), [], np.full(len(means), np.nan)
    bounds = [0, *sorted(set(cuts)), len(means)]
    for a, b in zip(bounds, bounds[1:]):
        state = MeanState.from_dict(json.loads(json.dumps(state.to_dict())))  # as a store keeps it
        saved.append((state, a))
        state, out[a:b], changed = feed(state, steps[a:b], means[a:b])
        while changed is not None and changed < steps[a]:  # a feed from an older state may change older steps
            base, a = next((s, i) for s, i in reversed(saved) if i == 0 or steps[i - 1] < changed)
            state, out[a:b], changed = feed(base, steps[a:b], means[a:b])
    return state, out


@settings(max_examples=60, deadline=None)
@given(which=st.sampled_from(range(len(CURVES))), cuts=st.lists(st.integers(1, 3999), max_size=25))
def test_any_split_reaches_the_state_and_values_of_one_feed(which, cuts):
    steps, means = CURVES[which]
    whole_state, whole, _ = feed(running_mean.start(), steps, means)
    state, out = fed_in_pieces(steps, means, [c for c in cuts if c < len(means)])
    assert state.to_dict() == whole_state.to_dict()
    np.testing.assert_array_equal(out, whole)


def test_alerts_on_a_worked_back_loss_say_so():
    """The LR x10 edit logged as Keras logs it: the slow-recovering warning the same edit
    logged per step gives (bench/trained), where the means as logged gave info spikes."""
    name = "charlm_epoch_mean_lr_jump"
    [alert] = analyze(str(TRAINED), read_path(str(TRAINED / name)).runs[name])
    f = alert.finding
    assert (f.kind.value, f.classification.value, f.start_step, f.severity.name) == ("loss_spike", "slow_recovering", 1101, "WARNING")
    assert f.message == ("train/loss spiked at step 1101: 1.275 -> 1.995 (1.6x baseline), back only after 309 steps "
                         "(slow-recovering) (each batch's loss, worked back from the running mean of 250-step epochs the run logs)")
    assert f.evidence["running_mean_epoch"] == 250


def test_a_clean_run_logged_as_running_means_has_no_alert():
    name = "charlm_epoch_mean_a"
    assert analyze(str(TRAINED), read_path(str(TRAINED / name)).runs[name]) == []
    assert analyze(str(TRAINED), read_path(str(TRAINED / name)).runs[name],
                   AnalysisConfig(running_mean=RunningMeanConfig(enabled=False))) != []  # as logged: epoch starts spike


def test_a_run_resumed_mid_epoch_starts_its_mean_afresh_there():
    writes, resumes, batches = resumed_mid_epoch(3)
    s = prepare_run(writes, resumes).series["train/loss"]
    assert s.averaged == 200
    np.testing.assert_allclose(s.value, batches, rtol=1e-9)
    unaware = prepare_run(writes, ()).series["train/loss"]  # the resume not known: one segment's writes, the later won
    assert np.abs(unaware.value - batches).max() > 1.0  # its mean's restart worked back as a jump times the batches averaged

"""A run's health: one word from its findings and series, with the numbers behind it, on the
sample runs (each caused on purpose) and on curves made for each word."""

from __future__ import annotations

import numpy as np
import pytest

from analyzers.analyze import analyze_run
from analyzers.health import Health, run_health
from analyzers.series import TagWrites, prepare_run
from app.analysis import assess_run
from app.ingest.sources import read_path
from tests.conftest import REPO

SAMPLES = REPO / "sample_runs"


@pytest.fixture(scope="module")
def samples():
    runs = read_path(str(SAMPLES)).runs
    runs.update(read_path(str(SAMPLES / "hf_trainer" / "trainer_state.json")).runs)
    return {name: assess_run("s", run)[1] for name, run in runs.items()}


@pytest.mark.parametrize(("run", "status", "reason"), [
    ("clean", Health.CONVERGED,
     "train/loss fell from 2.276 to 0.8246 and has been flat over its last 1000 steps, as train/lr decayed to 10.0% of its peak"),
    ("bad_batch", Health.CONVERGED, None),  # one fast spike is no instability
    ("lr_burst", Health.UNSTABLE, "loss_spike (slow_recovering) on train/loss at step 1201"),
    ("lr_too_high", Health.DIVERGED, "divergence on train/loss since step 40"),
    ("fp16_overflow", Health.DIVERGED, "divergence on train/loss since step 1512"),
    ("stalled_lr", Health.STALLED, "plateau on train/loss since step 200"),
    ("resume", Health.CONVERGED, None),
])
def test_each_sample_run_gets_the_word_for_what_was_done_to_it(samples, run, status, reason):
    health = samples[run]
    assert health.status is status, health.line()
    if reason is not None:
        assert health.reason == reason


def test_the_numbers_beside_the_word(samples):
    bad = samples["bad_batch"]
    assert (bad.spikes, bad.spikes_per_1k_steps, bad.last_step, bad.best_eval) == (1, 0.333, 2999, None)
    assert bad.largest_spike == {"tag": "train/loss", "step": 1500, "ratio": pytest.approx(45.3, abs=0.1),
                                 "peak_value": pytest.approx(38.49, abs=0.01), "baseline": pytest.approx(0.8505, abs=1e-4)}
    assert bad.steps_above_band == 13
    hf = samples["hf_trainer"]
    assert hf.best_eval == {"tag": "eval_loss", "step": 3000, "value": pytest.approx(0.855, abs=1e-3)}
    assert samples["clean"].line() == (
        "converged: train/loss fell from 2.276 to 0.8246 and has been flat over its last 1000 steps, as train/lr "
        "decayed to 10.0% of its peak; 0 loss spikes; last step 2999"
    )


def run(tags: dict[str, tuple[np.ndarray, np.ndarray]]):
    return prepare_run({t: TagWrites(np.asarray(s, np.int64), np.asarray(v, float), np.zeros(len(s), np.int32))
                        for t, (s, v) in tags.items()})


def health_of(tags) -> object:
    r = run(tags)
    return run_health(r, analyze_run(r))


def test_a_run_still_learning_is_healthy_and_one_that_overfits_says_so():
    steps = np.arange(5000)
    loss = (2 + 4 * np.exp(-steps / 2000)) * (1 + 0.02 * np.random.default_rng(0).standard_normal(5000))
    assert health_of({"train/loss": (steps, loss)}).status is Health.HEALTHY
    evals = np.arange(499, 5000, 500)
    val = np.array([3.6, 3.0, 2.7, 2.6, 2.7, 2.8, 2.95, 3.1, 3.3, 3.5])
    h = health_of({"train/loss": (steps, loss), "val/loss": (evals, val)})
    assert (h.status, h.best_eval) == (Health.OVERFITTING, {"tag": "val/loss", "step": 1999, "value": 2.6})
    assert h.reason == "overfitting on val/loss since step 1999"


def test_a_nan_loss_is_diverged_and_a_run_with_no_loss_is_healthy_with_nothing_to_count():
    loss = np.r_[np.linspace(3, 2, 500), np.full(100, np.nan)]
    h = health_of({"loss": (np.arange(600), loss)})
    assert (h.status, h.reason, h.last_step) == (Health.DIVERGED, "nonfinite on loss since step 500", 599)
    empty = health_of({"accuracy": (np.arange(10), np.linspace(0, 1, 10))})
    assert (empty.status, empty.reason, empty.spikes, empty.spikes_per_1k_steps, empty.largest_spike) == (
        Health.HEALTHY, "no loss logged", 0, None, None)


def test_a_spike_that_has_not_come_back_counts_its_steps_to_the_end():
    steps = np.arange(3000)
    loss = 2 * (1 + 0.01 * np.random.default_rng(1).standard_normal(3000))
    loss[2900:] *= 3
    h = health_of({"loss": (steps, loss)})
    assert h.spikes == 1 and h.steps_above_band == 99 and h.largest_spike["step"] == 2900


def test_health_is_plain_json():
    import json

    h = health_of({"loss": (np.arange(100), np.r_[np.ones(50), np.full(50, np.inf)])})
    assert json.loads(json.dumps(h.to_dict(), allow_nan=False))["status"] == "diverged"

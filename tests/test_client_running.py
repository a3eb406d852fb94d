"""`losswatch_client.running.EpochMeans`: each batch's loss back from Keras's running means,
and what losswatch then tells of real runs so logged."""

from __future__ import annotations

import math

import numpy as np
import pytest
from losswatch_client.running import EpochMeans

from app.analysis import assess_writes, tag_writes
from app.ingest.sources import read_path
from tests.conftest import REPO


def running_means(losses: list[float]) -> list[float]:
    """What Keras logs after each batch: the mean of the epoch's batches so far."""
    return [sum(losses[: k + 1]) / (k + 1) for k in range(len(losses))]


def test_each_batchs_own_loss_comes_back_from_the_running_means():
    losses = [3.0, 1.0, 2.0, 10.0, 2.0, 2.5]
    means = EpochMeans()
    back = [means.batch(k, {"loss": m})["loss"] for k, m in enumerate(running_means(losses))]
    assert back == pytest.approx(losses, abs=1e-12)


def test_a_spike_late_in_an_epoch_is_posted_at_its_own_size():
    losses = [2.0] * 199 + [9.0]
    logged = running_means(losses)
    assert logged[-1] - logged[-2] == pytest.approx(7.0 / 200)  # what the mean shows of it
    means = EpochMeans()
    assert [means.batch(k, {"loss": m})["loss"] for k, m in enumerate(logged)][-1] == pytest.approx(9.0)


def test_each_epoch_starts_again():
    means = EpochMeans()
    for k, m in enumerate(running_means([4.0, 2.0, 3.0])):
        means.batch(k, {"loss": m})
    means.start_epoch()
    assert means.batch(0, {"loss": 1.5}) == {"loss": 1.5}
    assert means.batch(1, {"loss": 1.25})["loss"] == pytest.approx(1.0)


def test_every_nth_batch_gives_the_mean_of_the_batches_since_the_last_call():
    """Keras's `steps_per_execution=3`: the callback runs after batches 2, 5, 8."""
    losses = [1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 4.0, 4.0, 4.0]
    logged = running_means(losses)
    means = EpochMeans()
    assert [means.batch(k, {"loss": logged[k]})["loss"] for k in (2, 5, 8)] == pytest.approx([2.0, 11.0, 4.0])


def test_a_nan_batch_is_posted_as_nan_and_so_is_the_epochs_mean_after_it():
    means = EpochMeans()
    logged = running_means([2.0, math.nan, 2.0])
    out = [means.batch(k, {"loss": m})["loss"] for k, m in enumerate(logged)]
    assert out[0] == 2.0 and math.isnan(out[1]) and math.isnan(out[2])
    means.start_epoch()
    assert means.batch(0, {"loss": 1.9}) == {"loss": 1.9}


def test_an_index_that_did_not_move_gives_nothing():
    means = EpochMeans()
    assert means.batch(0, {"loss": 2.0}) == {"loss": 2.0}
    assert means.batch(0, {"loss": 2.0}) == {}


def test_float32_means_of_a_long_epoch_come_back_within_their_rounding():
    """Keras's metrics are float32: the batch's loss comes back within k float32 steps."""
    rng = np.random.default_rng(0)
    losses = 2.0 + 0.05 * rng.standard_normal(2000)
    logged = np.cumsum(losses) / np.arange(1, 2001)
    means = EpochMeans()
    back = np.array([means.batch(k, {"loss": float(np.float32(m))})["loss"] for k, m in enumerate(logged)])
    error = np.abs(back - losses)
    assert error.max() < 2000 * np.spacing(np.float32(2.0)) and error.max() < 0.01 * 0.05


def batch_losses(name: str, epoch_steps: int):
    """A trained run logged as Keras logs per batch (`bench/trained`), its train loss taken
    apart as the Keras callback takes Keras's means apart before posting them."""
    run = next(iter(read_path(str(REPO / "bench" / "trained" / "runs" / name)).runs.values()))
    writes = tag_writes(run)
    loss = writes["train/loss"]
    means, out = EpochMeans(), []
    for step, value in zip(loss.step.tolist(), loss.value.tolist()):
        if step % epoch_steps == 0:
            means.start_epoch()
        out.append(means.batch(step % epoch_steps, {"loss": value})["loss"])
    writes["train/loss"] = type(loss)(loss.step, np.array(out), loss.segment)
    return run.name, writes


@pytest.mark.parametrize("name, epoch_steps, told", [
    ("charlm_epoch_mean_a", 200, []),
    ("charlm_epoch_mean_lr_jump", 250, [("loss_spike", "slow_recovering", "WARNING", 1101)]),
])
def test_batch_losses_taken_apart_are_told_as_a_loop_logging_them_would_be(name, epoch_steps, told):
    """On the running means as logged, losswatch gives 6 and 11 info-level spikes and tells
    the LR x10 edit only as info (README, *Log each step's own loss*); on each batch's own
    loss it says nothing of the clean run and tells the edit as labelled: a slow-recovering
    spike from step 1101 (bench/labels/trained_runs.json)."""
    run, writes = batch_losses(name, epoch_steps)
    alerts, _ = assess_writes("trained", run, writes, ())
    assert [(a.finding.kind.value, a.finding.classification.value, a.finding.severity.name, a.finding.start_step)
            for a in alerts] == told

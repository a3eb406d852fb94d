"""Warm restarts of the LR schedule (analyzers/schedule.py): found on the LR tag, and the
loss rise each one causes not reported as a spike, in one pass and in any split of a
stream; spikes and LR jumps that are news still are."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzers.findings import Kind, Severity, SpikeClass
from analyzers.roles import Role
from analyzers.runstream import feed_run, start_run
from analyzers.schedule import WarmRestartDetector, _lowest_before
from analyzers.series import Series, TagWrites, logging_interval
from analyzers.stream import feed_in_pieces
from tests.curves import clean_curve, plant_spike, restart_curve
from tests.test_run_stream import _batch, _norm, stream


def _lr(curve) -> Series:
    step, value = curve.steps, curve.tags["train/lr"]
    finite = np.isfinite(value)
    return Series("train/lr", Role.LEARNING_RATE, step, value, finite, step[finite], value[finite], logging_interval(step))


def _restarts(curve) -> list[tuple[int, int | None]]:
    return [(f.start_step, f.end_step) for f in WarmRestartDetector().detect(_lr(curve))]


def test_each_jump_of_an_sgdr_schedule_back_to_its_peak_is_a_restart():
    curve = restart_curve(0, period=1000)
    assert _restarts(curve) == [(s, s) for s in range(1000, 6000, 1000)]
    found = WarmRestartDetector().detect(_lr(curve))
    assert [f.evidence["cycle"] for f in found] == [1000] * 5  # from the first new high (step 0), then restart to restart
    assert found[0].message == "train/lr restarted its schedule at step 1000: 1.5e-05 -> 0.0003"
    assert found[0].evidence == {"reason": "lr_warm_restart", "from": pytest.approx(1.5e-05, rel=1e-3), "to": 3e-4, "cycle": 1000}


def test_a_warm_up_back_to_the_peak_is_one_restart_over_its_ramp():
    """The LR drops to 1/20 of its peak at each cycle's first step and climbs back over 19."""
    curve = restart_curve(0, period=1000, ramp=20)
    assert _restarts(curve) == [(s + 1, s + 19) for s in range(1000, 6000, 1000)]


@pytest.mark.parametrize("schedule", ["cosine", "step", "constant"])
def test_a_schedule_that_never_goes_back_up_has_no_restart(schedule):
    """The first warm-up climbs to new highs: it restarts nothing."""
    assert _restarts(clean_curve(0, schedule=schedule)) == []


def test_an_lr_jump_past_its_peak_is_no_restart():
    """A bug that multiplied the LR (charlm_lr_jump_a: x10 at step 1100) is news."""
    curve = clean_curve(0)
    curve.tags["train/lr"][2000:] *= 10
    assert _restarts(curve) == []


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 5999), min_size=1, max_size=8).map(sorted), st.sampled_from([0, 20]))
def test_any_split_of_the_lr_finds_the_same_restarts(cuts, ramp):
    lr = _lr(restart_curve(0, period=1000, ramp=ramp))
    whole = WarmRestartDetector().detect(lr)
    assert feed_in_pieces(WarmRestartDetector(), lr.step, lr.value, sorted(set(cuts)), lr.tag, checks=3) == whole


odd_values = st.lists(st.one_of(st.floats(width=64), st.sampled_from([0.0, -1.0, 1.5e-5, 3e-4])), max_size=60)


@settings(max_examples=200, deadline=None)
@given(odd_values, st.lists(st.integers(1, 59), max_size=6))
def test_any_lr_whatever_its_values_finds_the_same_restarts_in_any_split(values, cuts):
    """NaN, Inf, 0, negatives, values near float64's limit: never an error, and the same
    restarts however the series is cut."""
    value = np.array(values, dtype=np.float64)
    step = np.arange(len(value), dtype=np.int64) * 3
    _, closed, still = WarmRestartDetector().feed(WarmRestartDetector().start(), step, value, "lr")
    assert feed_in_pieces(WarmRestartDetector(), step, value, cuts, "lr") == closed + still


RESTARTING = [
    restart_curve(seed, period=period, interval=interval, ramp=ramp, eval_every=every)
    for seed, period, interval, ramp, every in [
        (0, 1000, 1, 0, None), (1, 300, 1, 0, None), (2, 1000, 1, 20, None), (3, 10000, 10, 0, None), (4, 500, 1, 50, None),
        (5, 1000, 1, 0, 20), (6, 10000, 10, 0, 50), (7, 300, 1, 0, 50),
    ]
]


@pytest.mark.parametrize("curve", RESTARTING, ids=lambda c: c.name)
def test_a_healthy_run_on_warm_restarts_raises_nothing(curve):
    """Before the join, every restart read as a spike: 5 to 19 a run, a third of them
    warnings; and an eval loss evaluated every 20 steps as a divergence at each restart."""
    assert curve.findings() == []


@pytest.mark.parametrize("seed", range(3))
def test_a_spike_between_restarts_is_still_found(seed):
    curve = restart_curve(seed, period=1000)
    plant_spike(curve, 3500, SpikeClass.FAST_RECOVERING, np.random.default_rng(seed))
    found = curve.findings()
    assert [(f.kind, f.start_step, f.classification) for f in found] == [(Kind.LOSS_SPIKE, 3500, SpikeClass.FAST_RECOVERING)]


def test_a_loss_that_answers_a_restart_over_ten_steps_raises_nothing():
    """A real run's loss climbs over 10-20 steps after the LR jumps back (the char-LM at
    twice the LR without clipping): its spike onsets fell 6-8 points after the restart,
    past the 5 points of a spike's own rise."""
    curve = restart_curve(0, period=500, points=3000)
    t, into = curve.steps, curve.steps % 500
    answer = np.where(into >= 6, 0.3 * np.minimum(1, (into - 6) / 4) * np.exp(-(into - 10).clip(0) / 60), 0.0)
    noise = 1 + 0.01 * np.random.default_rng(0).standard_normal(len(t))
    curve.tags["train/loss"] = loss = (2 + 4 * np.exp(-t / 800)) * (1 + answer) * noise
    assert curve.findings() == []
    loss[1260:1263] *= 3  # a bad batch 260 steps after a restart is still news
    assert [(f.kind, f.start_step) for f in curve.findings()] == [(Kind.LOSS_SPIKE, 1260)]


def test_a_loss_that_does_not_come_back_from_a_restart_is_still_told():
    """The restart at step 3000 sends the loss up 50% for good: divergent, reported."""
    curve = restart_curve(0, period=1000)
    curve.tags["train/loss"][3000:] *= 1.5
    found = [f for f in curve.findings() if f.kind is Kind.LOSS_SPIKE]
    assert [(f.start_step, f.classification) for f in found] == [(3000, SpikeClass.DIVERGENT)]


def _live(curve, upto: int, every: int = 10) -> set[tuple]:
    """Every alert any feed returned while the run was posted `every` train points at a
    time (every tag's points over their steps), up to train point `upto`: (kind, start
    step, class, severity)."""
    state, seen, writes = start_run(), set(), curve.writes()
    bounds = [*curve.steps[:upto:every], curve.steps[upto - 1] + 1]
    for lo, hi in zip(bounds, bounds[1:]):
        cut = {t: (w.step >= lo) & (w.step < hi) for t, w in writes.items()}
        new = {t: TagWrites(w.step[cut[t]], w.value[cut[t]], w.segment[cut[t]]) for t, w in writes.items() if cut[t].any()}
        state, closed, still = feed_run(state, new)
        seen |= {(f.kind, f.start_step, f.classification, f.severity) for f in closed + still}
    return seen


def test_cycles_longer_than_the_slow_horizon_never_show_a_divergent_spike_live():
    """10,000-step cycles logged every 10, an eval loss every 500 steps: the loss stays up
    past the 1,000-step slow horizon after each restart.  Live, each restart showed a
    critical divergent spike until the loss came down, and the eval loss a divergence; now
    both wait a cycle."""
    curve = restart_curve(3, period=10000, interval=10, eval_every=50)
    assert _live(curve, len(curve.steps), every=50) == set()


def test_a_loss_left_up_by_a_restart_is_told_once_the_schedule_had_its_cycle():
    curve = restart_curve(0, period=1000)
    curve.tags["train/loss"][3000:] *= 1.5
    before = _live(curve, 3990)  # within a cycle of the restart: the schedule may still bring it down
    assert not any(kind is Kind.LOSS_SPIKE for kind, *_ in before)
    after = _live(curve, 4100)
    assert (Kind.LOSS_SPIKE, 3000, SpikeClass.DIVERGENT, Severity.CRITICAL) in after


@pytest.mark.parametrize("every", [20, 100])
def test_overfitting_across_warm_restarts_is_still_told(every):
    """The eval loss creeps up 15% over 2,000 steps from step 3,000 while the train loss
    goes on falling: past a cycle, it is no restart's doing."""
    curve = restart_curve(0, period=1000, eval_every=every)
    steps, values = curve.evals["eval/loss"]
    later = steps >= 3000
    values[later] *= 1 + 0.15 * (steps[later] - 3000) / 2000
    found = [f for f in curve.findings() if f.tag == "eval/loss"]
    assert [(f.kind, f.severity) for f in found] == [(Kind.OVERFITTING, Severity.WARNING)]
    assert 2900 <= found[0].start_step < 3000  # the best: the last evaluations before the restart at 3,000


def test_a_spike_on_an_lr_jump_past_its_peak_is_still_found():
    curve = restart_curve(0, period=1000)
    curve.tags["train/lr"][3500:3900] *= 10  # past the peak: a bug, not the schedule
    curve.tags["train/loss"][3500:3600] *= 1.5
    found = [f for f in curve.findings() if f.kind is Kind.LOSS_SPIKE]
    assert [f.start_step for f in found] == [3500]


cuts = st.lists(st.floats(0.001, 0.999), min_size=1, max_size=12).map(sorted)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(RESTARTING) - 1), cuts, st.sampled_from([4096, 256]))
def test_any_split_of_a_run_on_warm_restarts_finds_what_one_shot_finds(i, shares, tail):
    """Streamed with the full tail, or a short one that settles and forgets the restarts
    many times over: the same (no) findings as one pass, a spike planted between restarts
    and a divergence from one included."""
    curve = restart_curve(i, period=1000, eval_every=20 if i % 2 else None)
    plant_spike(curve, 2500, SpikeClass.SLOW_RECOVERING, np.random.default_rng(i))
    curve.tags["train/loss"][5000:] *= 1.5
    writes = curve.writes()
    state, found, open_ = stream(writes, (), shares, tail)
    assert _norm(found) == _batch(writes, ())[0]


@given(st.lists(st.floats(1e-8, 1.0), min_size=1, max_size=60), st.integers(0, 59), st.integers(1, 8))
def test_the_lowest_of_the_values_before_each_point_is_a_plain_minimum(values, first, points):
    """`_lowest_before` (a moving minimum) against the minimum of each window taken by hand."""
    v = np.array(values)
    first = min(first, len(v) - 1)
    expected = [min(v[max(i - points, 0) : i], default=np.inf) for i in range(first, len(v))]
    assert _lowest_before(v, first, points).tolist() == expected

"""Loss spikes shaped like the ones in public training logbooks, classified as the people
who lived through them would."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from analyzers.analyze import analyze_run
from analyzers.baseline import decimal_step, value_bits, value_decimals
from analyzers.findings import Kind, Severity, SpikeClass
from analyzers.roles import Role
from analyzers.series import TagWrites, prepare_run, prepare_series
from analyzers.spikes import LossSpikeDetector, SpikeConfig
from analyzers.stream import feed_in_pieces
from app.analysis import tag_writes
from app.ingest.sources import read_path
from tests.conftest import REFERENCE_RUNS, REPO
from tests.curves import clean_curve, regression_curve


def series(values: np.ndarray, interval: int = 1, start: int = 0):
    steps = start + np.arange(len(values), dtype=np.int64) * interval
    writes = TagWrites(steps, np.asarray(values, float), np.zeros(len(values), np.int32))
    return prepare_series("train/loss", Role.LOSS, writes, {})


def flat(n: int, level: float = 2.2, noise: float = 0.01, seed: int = 0) -> np.ndarray:
    return level * (1 + noise * np.random.default_rng(seed).standard_normal(n))


def bump(values: np.ndarray, at: int, peak: float, back_after: int) -> np.ndarray:
    """Multiply by `peak` at `at`, easing linearly back to 1 over `back_after` points."""
    out = values.copy()
    out[at : at + back_after] *= np.linspace(peak, 1.0, back_after)
    return out


def only(found):
    assert len(found) == 1, [f.message for f in found]
    return found[0]


def test_bloom_like_spike_is_fast_recovering():
    # BLOOM-176B: loss 2.2 -> 5.1, back about 36 iterations later
    f = only(LossSpikeDetector().detect(series(bump(flat(3000), 1500, 5.1 / 2.2, 36))))
    assert f.classification is SpikeClass.FAST_RECOVERING
    assert f.severity is Severity.INFO
    assert f.start_step == 1500 and f.peak_step == 1500
    assert 25 <= f.recovery_steps <= 36
    assert f.ratio == pytest.approx(5.1 / 2.2, rel=0.05)
    assert "back in" in f.message and "fast-recovering" in f.message


@pytest.mark.parametrize(("ratio", "steps"), [(1.9, 200), (3.0, 500)])
def test_idefics_and_13b_like_spikes_are_slow_recovering(ratio, steps):
    f = only(LossSpikeDetector().detect(series(bump(flat(4000), 1500, ratio, steps))))
    assert f.classification is SpikeClass.SLOW_RECOVERING
    assert f.severity is Severity.WARNING
    assert steps * 0.7 <= f.recovery_steps <= steps
    assert f.end_step == f.start_step + f.recovery_steps


def test_104b_like_spike_that_settles_higher_is_divergent():
    # 6.4 -> 14 within 10 iterations, down to about 7 after 200 iterations, flat there
    v = flat(3000, level=6.4)
    v[1000:1010] *= np.linspace(1.2, 14 / 6.4, 10)
    v[1010:1210] *= np.linspace(14 / 6.4, 7 / 6.4, 200)
    v[1210:] *= 7 / 6.4
    f = only(LossSpikeDetector().detect(series(v[:1800])))
    assert f.classification is SpikeClass.DIVERGENT
    assert f.severity is Severity.CRITICAL
    assert f.recovery_steps is None and f.end_step is None
    assert "settled at" in f.message
    assert "Roll back to a checkpoint from before the onset" in f.remediation


def test_a_further_jump_of_a_loss_that_settled_higher_is_a_spike_of_its_own():
    # charlm_lr_ramp_f: 1.8x at 1480, sat near 3.1, then blown up 300x from 1838
    v = flat(3000)
    v[1000:] *= 1.8
    v[1500:] *= np.geomspace(1.3, 300, 20)[np.minimum(np.arange(1500), 19)]  # up 300x over 20 steps, and stays
    first, second = LossSpikeDetector().detect(series(v))
    assert (first.start_step, first.classification, first.end_step) == (1000, SpikeClass.DIVERGENT, None)
    assert "settled at" in first.message and first.peak_value < 1.9 * 2.2  # its own peak, not the next one's
    assert first.evidence["points"] == 500  # it ends where the next begins
    assert (second.start_step, second.severity) == (1500, Severity.CRITICAL)
    assert second.peak_value > 100 * 2.2 * 1.8
    cuts = [1200, 1320, 1321, 1499, 1502]
    assert feed_in_pieces(LossSpikeDetector(), np.arange(3000), v, cuts, "train/loss", checks=5) == [first, second]


def test_a_further_jump_of_a_loss_still_rising_within_2x_is_a_spike_of_its_own_but_not_past_2x():
    # charlm_lr_ramp_clip_g: +24% at 1369, climbing with its LR ramp, blown up from 1648
    v = flat(3000)
    v[1000:] *= 1.25 * (1 + 0.0005 * np.arange(2000))  # up 25%, then climbing 0.05% a step
    v[1500:] *= 50
    first, second = LossSpikeDetector().detect(series(v))
    assert (first.start_step, first.classification, second.start_step) == (1000, SpikeClass.DIVERGENT, 1500)
    assert "still rising" in first.message and first.evidence["points"] == 500
    v = flat(3000)
    v[1000:] *= 2.5 * (1 + 0.0005 * np.arange(2000))  # past 2x: blown up, one event
    v[1500:] *= 50
    assert only(LossSpikeDetector().detect(series(v))).start_step == 1000


@pytest.mark.parametrize("seed", [8, 16, 17, 28])  # seeds whose point before the spike stood 5% up
def test_a_one_point_spike_on_a_noisy_loss_starts_at_its_point_not_at_the_noise_before(seed):
    # charlm_bad_batch_i: 1.22 with 5% noise, 9.41 at 1300, was "spiked at step 1300 (rising
    # from step 1298)": 1.31 and 1.35 stood over the band of a 25-point median
    v = flat(2000, level=1.22, noise=0.06, seed=seed)
    v[1300] = 9.4
    f = only(LossSpikeDetector().detect(series(v)))
    assert (f.start_step, f.classification) == (1300, SpikeClass.FAST_RECOVERING)
    assert f.message.startswith("train/loss spiked at step 1300: 1.2")


def test_spike_that_turns_nan_is_divergent():
    v = bump(flat(2000), 1000, 3.0, 50)
    v[1020:] = np.nan
    f = only(LossSpikeDetector().detect(series(v)))
    assert f.classification is SpikeClass.DIVERGENT
    assert f.evidence["outcome"] == "turned non-finite at step 1020"


def test_live_spike_is_pending_and_becomes_final_as_data_arrives():
    full = bump(flat(3000), 2000, 1.8, 300)
    detector = LossSpikeDetector()
    early = only(detector.detect(series(full[:2100])))
    assert early.classification is SpikeClass.PENDING
    assert early.severity is Severity.WARNING and early.ongoing
    later = only(detector.detect(series(full)))
    assert later.classification is SpikeClass.SLOW_RECOVERING
    assert later.start_step == early.start_step


def test_one_point_spike_in_a_run_logging_every_500_steps_is_fast():
    v = flat(200)
    v[120] *= 3
    f = only(LossSpikeDetector().detect(series(v, interval=500)))
    assert f.classification is SpikeClass.FAST_RECOVERING
    assert f.start_step == 60000 and f.recovery_steps == 500


def test_steady_climb_is_not_a_spike():
    v = np.concatenate([flat(500), flat(500) * np.linspace(1, 2.5, 500)])
    assert LossSpikeDetector().detect(series(v)) == []


@pytest.mark.parametrize("noise", [0.005, 0.02, 0.05])
def test_noise_alone_raises_nothing(noise):
    assert LossSpikeDetector().detect(series(flat(5000, noise=noise, seed=3))) == []


def test_bf16_rounding_raises_nothing():
    v = flat(5000, level=1.5, noise=0.003)
    bits = v.astype(np.float32).view(np.uint32)
    bf16 = ((bits + 0x8000) & 0xFFFF0000).view(np.float32).astype(float)
    assert len(np.unique(bf16)) < 10  # it really moves in 0.0078 steps
    assert LossSpikeDetector().detect(series(bf16)) == []


def test_a_smooth_climb_printed_to_three_decimals_raises_no_spike():
    # 2.0 + step / 1000, as a logger rounding to 3 decimals prints it: its residuals are zero
    # but for a double's last bits, and every third step was a "spike" of 10^12 sigmas
    v = np.round(2.0 + np.arange(2000) / 1000, 3)
    assert LossSpikeDetector().detect(series(v)) == []
    assert LossSpikeDetector().detect(series(v.astype(np.float32).astype(float))) == []  # an event file's float32


def test_a_loss_stuck_at_chance_moving_by_its_last_printed_digits_raises_no_spike():
    v = np.full(600, 0.6931)  # ln 2, as a logger printing 4 decimals shows it
    for moved in (0.6932, 0.6935):
        v[400] = moved
        assert LossSpikeDetector().detect(series(v)) == [], moved  # was a spike "0.6931 -> 0.6932"


@pytest.mark.parametrize("schedule", ["cosine", "step", "constant"])
def test_a_quiet_healthy_run_printed_to_two_decimals_raises_nothing(schedule):
    # noise of 0.05% under a grid of 0.01: the loss steps down the grid, and a step back up
    # (3.005 -> 3.01) was a "spike": six of them in four of these six runs
    for seed in range(2):
        curve = clean_curve(seed, points=3000, noise=0.0005, schedule=schedule)
        curve.tags = {tag: values if tag == "train/lr" else np.round(values, 2) for tag, values in curve.tags.items()}
        assert curve.findings() == [], (schedule, seed)


def test_a_spike_in_a_loss_printed_to_four_decimals_is_still_found():
    v = np.round(bump(flat(3000), 1500, 3.0, 5), 4)
    f = only(LossSpikeDetector().detect(series(v)))
    assert f.start_step == 1500 and f.classification is SpikeClass.FAST_RECOVERING


def test_the_decimals_a_value_was_printed_with():
    v = np.array([2.139, 2.1, 3.0, 0.0, 2.13899994, 1 / 3, 0.5, 1e-7])
    assert value_decimals(v, value_bits(v)).tolist() == [3, 1, 7, 7, 7, 7, 7, 7]  # 3.0, 0.5: bf16 values; zero, off-grid, too fine
    as32 = v.astype(np.float32).astype(float)  # what an event file holds: 2.13899994 is 2.139 there
    assert value_decimals(as32, value_bits(as32)).tolist() == [3, 1, 7, 7, 3, 7, 7, 7]


@settings(max_examples=300, deadline=None)
@given(st.floats(1e-3, 1e4) | st.floats(-1e4, -1e-3), st.integers(0, 6), st.booleans())
def test_a_value_printed_with_d_decimals_needs_at_most_d_where_its_precision_tells(x, d, as_float32):
    printed = np.array([round(x, d)])
    if as_float32:  # what an event file holds of it
        printed = printed.astype(np.float32).astype(float)
    assume(printed[0] != 0)
    bits = value_bits(printed)
    needs = int(value_decimals(printed, bits)[0])
    told = abs(printed[0]) * 2.0 ** -int(bits[0]) * 64 <= 10.0**-d  # a float32 near 1e4 tells 2 decimals, 3.0 (bf16) none
    assert needs <= d if told else needs in (*range(d + 1), 7)


def test_the_decimal_step_is_what_most_of_the_window_was_printed_with():
    v = np.concatenate([np.round(flat(300), 4), flat(300)])  # a logger that rounded, then one that did not
    step = decimal_step(v, value_bits(v), 128)
    assert step[100] == 1e-4 and step[300 + 63] == 1e-4 and step[300 + 64] == 0.0
    two = np.round(flat(300), 2)  # 2.2 needs one decimal, 2.25 is a bf16 value: most need two
    assert (decimal_step(two, value_bits(two), 128)[16:] == 0.01).all()


def test_warmup_and_fast_decay_raise_nothing():
    steps = np.arange(3000)
    v = (2 + 9 * np.exp(-steps / 150)) * (1 + 0.02 * np.random.default_rng(1).standard_normal(3000))
    assert LossSpikeDetector().detect(series(v)) == []


def test_the_spike_does_not_pollute_its_own_baseline():
    v = bump(flat(3000), 1000, 4.0, 150)
    f = only(LossSpikeDetector().detect(series(v)))
    assert f.baseline == pytest.approx(2.2, rel=0.02)
    assert f.ratio == pytest.approx(4.0, rel=0.05)


def test_two_spikes_close_together_are_two_findings():
    v = bump(bump(flat(3000), 1000, 3.0, 20), 1100, 2.5, 20)
    found = LossSpikeDetector().detect(series(v))
    assert [f.start_step for f in found] == [1000, 1100]


def test_horizons_are_configurable():
    v = bump(flat(3000), 1000, 3.0, 60)
    strict = LossSpikeDetector(SpikeConfig(fast_steps=30))
    assert only(strict.detect(series(v))).classification is SpikeClass.SLOW_RECOVERING


# -- the threshold: calibrated on the run's own residuals ---------------------------------


def smooth_llm(n: int, level: float = 3.3, noise: float = 0.006, seed: int = 0) -> np.ndarray:
    """A GPT-2-like pretraining loss logged every step: fast early decay, small noise."""
    steps = np.arange(n)
    return (level + 4 * np.exp(-steps / 300)) * (1 + noise * np.random.default_rng(seed).standard_normal(n))


def test_a_one_point_jump_far_outside_a_smooth_loss_is_a_spike_whatever_its_ratio():
    # modded-nanogpt's 124M speedrun: 3.86 -> 5.06 at step 919, back at the next step
    v = smooth_llm(3000, level=3.67)
    v[919] = 5.06
    f = only(LossSpikeDetector().detect(series(v)))
    assert (f.start_step, f.classification, f.severity) == (919, SpikeClass.FAST_RECOVERING, Severity.INFO)
    assert f.baseline == pytest.approx(3.86, rel=0.01)
    assert f.ratio == pytest.approx(5.06 / 3.86, rel=0.03)  # 1.3x: under the old 1.4x floor
    assert f.evidence["z"] > f.evidence["threshold"] == 6.0


def test_a_runs_rare_real_spikes_do_not_hide_the_next():
    # ten +25-35% one-step jumps in 6,000 steps: each one moves one block of the run's tail
    rng = np.random.default_rng(4)
    v = smooth_llm(6000, seed=4)
    at = np.arange(600, 6000, 600)
    v[at] *= rng.uniform(1.25, 1.35, len(at))
    found = LossSpikeDetector().detect(series(v))
    assert [f.start_step for f in found] == list(at)
    assert {f.classification for f in found} == {SpikeClass.FAST_RECOVERING}


def test_spikes_in_a_third_of_the_first_blocks_do_not_hide_the_next():
    # Megatron's Mixtral 8x7B: 28-108 sigma spikes in three of its first ten tail blocks
    # set the bar at 42 sigmas, over a +36% point at 37; each block now counts at most
    # twice the median block's height
    v = flat(900, noise=0.01, seed=3)
    for at, peak in ((150, 2.0), (280, 1.5), (400, 1.3)):
        v[at] *= peak
    v[700] *= 1.15
    capped = LossSpikeDetector().detect(series(v))
    assert [f.start_step for f in capped] == [150, 280, 400, 700]
    assert capped[-1].evidence["threshold"] < 10
    uncapped = LossSpikeDetector(SpikeConfig(tail_cap=1e9)).detect(series(v))
    assert [f.start_step for f in uncapped] == [150]  # a few blocks in, one spike's block is the 80th percentile


def test_a_bf16_spike_of_18_percent_logged_every_5_iterations_is_found():
    # Megatron's GPT-3 15B release test: bf16, loss every 5 iterations, one +18% point
    v = smooth_llm(4000, level=2.2, noise=0.003, seed=2)
    bits = v.astype(np.float32).view(np.uint32)
    v = ((bits + 0x8000) & 0xFFFF0000).view(np.float32).astype(float)
    v[2675] = v[2674] * 1.18
    f = only(LossSpikeDetector().detect(series(v, interval=5)))
    assert (f.start_step, f.classification) == (2675 * 5, SpikeClass.FAST_RECOVERING)


def test_the_blips_a_noisy_run_throws_set_its_own_bar():
    # 8-10 sigma blips every ~100 points are this run's noise; a 30-sigma jump is not
    rng = np.random.default_rng(6)
    v = flat(6000, noise=0.01, seed=6)
    blips = np.arange(150, 6000, 100) + rng.integers(0, 50, 59)
    v[blips] *= 1 + 0.01 * rng.uniform(8, 10, len(blips))
    v[4321] *= 1.3
    found = LossSpikeDetector().detect(series(v))
    assert 4321 in [f.start_step for f in found]
    later = [f for f in found if f.start_step > 2200]  # once the run's tail is known
    assert [f.start_step for f in later] == [4321]
    assert later[0].evidence["threshold"] > 10


@pytest.mark.parametrize("seed", range(3))
def test_the_2_to_3x_blips_of_a_regression_minibatch_loss_are_noise(seed):
    curve = regression_curve(seed)
    v = curve.tags["train/loss"]
    found = LossSpikeDetector().detect(series(v))
    level = np.median(v[500:])
    assert np.sum((v[500:] > 2 * level) & (v[500:] < 3 * level)) > 80  # it throws them every few dozen steps
    assert sum(f.ratio < 3 for f in found) <= 2, [f.message for f in found]  # of those, at most two
    assert all(f.severity is Severity.INFO for f in found) and len(found) <= 12  # and a few of its 3-50x ones


# -- alert early, then refine -------------------------------------------------------------


def feed_points(detector: LossSpikeDetector, values: np.ndarray, first: int = 0, chunk: int = 1):
    """Feed the points before `first` at once, then `chunk` at a time, as a live run posts
    them: for each point, (closed, open) of the feed that brought it."""
    state = detector.start()
    state, closed, still = detector.feed(state, np.arange(first), values[:first], "train/loss")
    out = [(closed, still)] * first
    for i in range(first, len(values), chunk):
        steps = np.arange(i, min(i + chunk, len(values)))
        state, closed, still = detector.feed(state, steps, values[i : i + chunk], "train/loss")
        out += [(closed, still)] * len(values[i : i + chunk])
    return out


def test_a_spike_still_up_three_points_after_its_onset_is_reported_at_once_as_pending():
    v = bump(flat(2400), 2000, 1.6, 300)
    feeds = feed_points(LossSpikeDetector(), v, first=1990)
    assert all(not closed and not still for closed, still in feeds[:2002])
    [early] = feeds[2002][1]  # the third point of the spike
    assert (early.start_step, early.classification, early.severity) == (2000, SpikeClass.PENDING, Severity.WARNING)
    assert early.message == "train/loss spiked at step 2000: 2.211 -> 3.535 (1.6x baseline); not back yet (pending)"
    [(done, _)] = [(c, s) for c, s in feeds if c]
    assert [f.classification for f in done] == [SpikeClass.SLOW_RECOVERING]
    assert done[0].start_step == 2000


def test_a_loss_that_jumped_2x_and_stayed_is_critical_at_once_then_divergent():
    v = flat(3500)
    v[2000:] *= 3.0
    feeds = feed_points(LossSpikeDetector(), v, first=1990, chunk=3)
    [early] = feeds[2002][1]
    assert (early.classification, early.severity) == (SpikeClass.PENDING, Severity.CRITICAL)
    [late] = feeds[-1][1]
    assert (late.classification, late.severity, late.ongoing) == (SpikeClass.DIVERGENT, Severity.CRITICAL, True)
    assert late.message == (
        "train/loss spiked at step 2000: 2.211 -> 6.796 (3.1x baseline) and did not recover: "
        "blown up, its last 6 points at 6.616, over 2x the 2.211 it left (divergent)")
    # called at the fast horizon (100 steps: the feed that brought step 2100), not after the settle window (300)
    assert [feeds[i][1][0].classification for i in (2097, 2100)] == [SpikeClass.PENDING, SpikeClass.DIVERGENT]


def test_a_one_point_spike_back_at_the_next_point_is_only_reported_as_fast():
    v = flat(2200)
    v[2000] *= 2.5
    feeds = feed_points(LossSpikeDetector(), v, first=1990)
    assert all(not still for _, still in feeds)
    [done] = [c for c, _ in feeds if c]
    assert [(f.classification, f.severity) for f in done] == [(SpikeClass.FAST_RECOVERING, Severity.INFO)]


# -- horizons in the run's own time -------------------------------------------------------


def test_a_word_lm_spike_logged_every_200_batches_back_after_30_points_is_slow():
    # PyTorch's word_language_model, loss every 200 batches: 5.25 -> 7.6 over three points,
    # back near its level about 30 points (~6,000 steps) later
    v = flat(170, level=5.25, noise=0.005)
    v[50:53] *= [1.05, 1.27, 1.45]
    v[53:83] *= np.linspace(1.4, 1.0, 30)
    f = only(LossSpikeDetector().detect(series(v, interval=200, start=200)))
    assert f.classification is SpikeClass.SLOW_RECOVERING
    assert 4000 <= f.recovery_steps <= 6400
    assert "back only after" in f.message


def test_a_jump_down_a_short_falling_coarse_curve_is_one_slow_spike_not_a_chain_of_fast_ones():
    # HF Trainer's logging_steps=20: 150 interval means, the first 20 falling 4.3 -> 1.6. At
    # point 80 an LR x10 edit lifts the loss +50%, back over 30 points. The warm-up's fall
    # still fills the baseline's noise window (sigma 0.2 against a real 0.015); the band
    # measured in it took each point of the way down for "back": four fast spikes.
    t = np.arange(150)
    v = (1.0 + 3.3 * np.exp(-t / 8) + 0.6 * np.exp(-t / 60)) * (1 + 0.01 * np.random.default_rng(5).standard_normal(150))
    v[80:110] *= np.linspace(1.5, 1.0, 30)
    f = only(LossSpikeDetector().detect(series(v, interval=20, start=19)))
    assert (f.start_step, f.classification) == (19 + 80 * 20, SpikeClass.SLOW_RECOVERING)
    assert 300 <= f.recovery_steps <= 600


def test_a_live_divergent_call_is_overturned_when_the_loss_comes_back():
    v = flat(4500)
    v[2000:3500] *= 1.8  # up for 1,500 steps, then back
    feeds = feed_points(LossSpikeDetector(), v, first=1990, chunk=10)
    [live] = feeds[3200][1]
    assert live.classification is SpikeClass.DIVERGENT and live.ongoing
    [f] = next(c for c, _ in feeds if c)
    assert (f.start_step, f.classification, f.ongoing) == (2000, SpikeClass.SLOW_RECOVERING, False)
    assert 1500 <= f.recovery_steps <= 1520
    assert f == only(LossSpikeDetector().detect(series(v)))  # the finished curve says the same


def test_a_divergent_call_is_final_once_the_watch_horizon_has_passed():
    v = flat(12500)
    v[2000:] *= 1.8
    feeds = feed_points(LossSpikeDetector(), v, first=11990)
    closed = [f for c, _ in feeds[11990:] for f in c]
    [f] = closed
    assert (f.classification, f.ongoing) == (SpikeClass.DIVERGENT, True)
    assert f.evidence["outcome"] == "not back within 10000 steps"
    assert feeds[-1][1] == []  # final: never re-emitted


def test_horizons_follow_the_logging_interval_and_the_runs_age():
    early = only(LossSpikeDetector().detect(series(bump(flat(3000), 1500, 3.0, 20))))
    assert (early.evidence["fast_steps"], early.evidence["slow_steps"]) == (100, 1000)
    coarse = only(LossSpikeDetector().detect(series(bump(flat(300), 150, 3.0, 1), interval=500)))
    assert (coarse.evidence["fast_steps"], coarse.evidence["slow_steps"]) == (1000, 5000)
    old = only(LossSpikeDetector().detect(series(bump(flat(3000), 1500, 3.0, 20), start=300_000)))
    assert old.evidence["slow_steps"] == 1000  # age counts from the first logged step
    aged = only(LossSpikeDetector().detect(series(bump(flat(3000), 1500, 3.0, 20), interval=100)))
    assert aged.evidence["slow_steps"] == 1500  # 1% of the 150,000 steps the run had lived


# -- real public logs (the tuning part of bench/labels; skipped without ../shared) --------

SHARED = REFERENCE_RUNS.parent


def public_series(path: str, tag: str = "train/loss"):
    file = SHARED / path
    if not file.exists():
        pytest.skip(f"reference run not found: {file}")
    read = read_path(str(file))
    [run] = read.runs.values()
    writes = tag_writes(run)
    return prepare_series(tag, Role.LOSS, writes[tag], {})


def test_megatron_gpt3_15b_bf16_one_point_spike_is_its_only_spike():
    f = only(LossSpikeDetector().detect(public_series("reference-runs-2/json/ext2_megatron_gpt3_15b.json")))
    assert (f.start_step, f.classification) == (13375, SpikeClass.FAST_RECOVERING)
    assert f.ratio == pytest.approx(1.18, abs=0.01)


def test_a_spike_that_climbs_before_its_onset_starts_where_its_rise_began():
    # Megatron's Mixtral 8x7B, loss every 5 iterations: 2.81, then +5-10% from 1625, each
    # point under 6 sigmas, and a point 7 sigmas out at 1640, back by 1670
    v = flat(600, level=2.8, noise=0.02, seed=8)
    v[400:404] = 2.8 * np.array([1.065, 1.07, 1.065, 1.07])
    v[404] = 2.8 * 1.25
    f = only(LossSpikeDetector().detect(series(v, interval=5)))
    assert (f.start_step, f.peak_step, f.classification) == (2000, 2020, SpikeClass.FAST_RECOVERING)
    assert f.message == "train/loss spiked at step 2020 (rising from step 2000): 2.826 -> 3.5 (1.2x baseline), back in 15 steps (fast-recovering)"
    assert f.remediation == (
        "No action needed: training recovered. Note step 2000 and inspect the batches just before it if spikes recur."
    )


def test_a_one_point_spike_starts_at_its_own_point():
    v = flat(600, level=2.8, noise=0.02, seed=8)
    v[404] = 2.8 * 1.25
    f = only(LossSpikeDetector().detect(series(v, interval=5)))
    assert f.start_step == f.peak_step == 2020
    assert f.message.startswith("train/loss spiked at step 2020: ")


def test_megatron_mixtral_one_point_spike_among_many_is_found():
    found = LossSpikeDetector().detect(public_series("reference-runs-2/json/ext2_megatron_mixtral_8x7b.json"))
    [f] = [f for f in found if f.start_step == 3285]  # 2.476 -> 3.410, back at the next point
    assert f.classification is SpikeClass.FAST_RECOVERING
    [climb] = [f for f in found if 1600 <= f.start_step <= 1645]  # 2.81, rising from 1605, 3.37 at 1645
    assert (climb.start_step, climb.classification) == (1625, SpikeClass.FAST_RECOVERING)


def test_word_lm_gru_spike_back_after_30_points_is_slow_not_divergent():
    f = only(LossSpikeDetector().detect(public_series("reference-runs-2/json/ext2_wordlm_gru_b.json")))
    assert f.classification is SpikeClass.SLOW_RECOVERING  # was "divergent: not back within 1000 steps"
    assert abs(f.start_step - 10349) <= 400


@pytest.mark.parametrize("tag", ["train/loss", "val/loss"])
def test_llmc_gpt2_124m_healthy_run_raises_no_warning(tag):
    found = LossSpikeDetector().detect(public_series("reference-runs/json/ext_llmc_gpt2_124m.json", tag))
    assert [f.message for f in found if f.severity >= Severity.WARNING] == []
    assert all(f.ratio < 1.15 for f in found)  # at most its optional +5-10% blips, as info


def test_a_jump_that_stays_is_a_spike_though_no_point_stands_out_enough():
    # charlm_lr_jump_a: an LR jump lifts a noisy loss ~5.5 sigmas for 40 steps, then it
    # comes back over ~300 steps; the point rule alone misses it
    rng = np.random.default_rng(0)
    v = 1.3 + 0.09 * rng.standard_normal(2000)
    v[1100:1140] += 0.5
    v[1140:1440] += np.linspace(0.5, 0.0, 300)
    assert not LossSpikeDetector(SpikeConfig(held_z=np.inf, long_z=np.inf)).detect(series(v))
    f = only(LossSpikeDetector().detect(series(v)))
    assert f.classification is SpikeClass.SLOW_RECOVERING
    assert f.start_step == 1100


def test_a_smaller_jump_that_stays_is_found_by_the_median_of_16_points():
    # charlm_lr_jump_c: an LR x5 lifts the loss +25% (about 3 sigmas) for ~250 steps; its
    # 3-point medians stay under the held rule's 4 sigmas
    rng = np.random.default_rng(1)
    v = 1.19 + 0.085 * rng.standard_normal(2000)
    v[1304:1354] += 0.34
    v[1354:1600] += np.linspace(0.34, 0.0, 246)
    assert not LossSpikeDetector(SpikeConfig(long_z=np.inf)).detect(series(v))
    f = only(LossSpikeDetector().detect(series(v)))
    assert (f.start_step, f.classification, f.severity) == (1304, SpikeClass.SLOW_RECOVERING, Severity.WARNING)
    steps = np.arange(2000)
    assert feed_in_pieces(LossSpikeDetector(), steps, v, [1310, 1318, 1319, 1325], "train/loss", checks=4) == [f]


def test_three_high_points_in_a_row_of_a_heavy_tailed_loss_set_their_own_bar():
    # a loss whose minibatch noise throws runs of high points now and then (Student t, 2 dof,
    # smoothed over 3 steps): its 3-point lows reach 4 sigmas by themselves; none is reported
    rng = np.random.default_rng(4)
    noise = np.convolve(rng.standard_t(2, 20000), np.ones(3) / 3, mode="same")
    v = 3.0 + 0.02 * noise
    assert not [f for f in LossSpikeDetector().detect(series(v)) if f.severity >= Severity.WARNING]


def early_fall(points: int, interval: int, noise: float, seed: int) -> np.ndarray:
    """A pretraining loss in its first steps, falling from 11 to 3.5 nats, with heavy-tailed
    (Student t, 3 degrees) minibatch noise of `noise` relative."""
    t = np.arange(points) * interval
    rng = np.random.default_rng(seed)
    return (3.2 + 7.6 * np.exp(-t / 150) + 0.8 / np.sqrt(1 + t / 50)) * (1 + noise * rng.standard_t(3, points))


@pytest.mark.parametrize(("at", "interval"), [(80, 5), (150, 5)])
def test_a_one_point_jump_while_the_loss_still_falls_steeply_is_a_spike(at, interval):
    # The trailing level lags above a steep fall, and the spread around that lag swells
    # as the fall slows: a +25% point at step 400 stood 0.6 sigma up, 17.5 by the labels' rule.
    v = early_fall(2000, interval, 0.006, seed=0)
    v[at] *= 1.25
    found = LossSpikeDetector().detect(series(v, interval=interval))
    assert (found[0].start_step, found[0].classification, found[0].severity) == (at * interval, SpikeClass.FAST_RECOVERING, Severity.INFO)
    assert found[1].start_step > 800 * interval  # the others: the heavy tail's rare blips, once the loss has settled


@pytest.mark.parametrize("interval", [1, 5])
def test_a_steep_early_fall_with_gaussian_noise_raises_nothing(interval):
    t = np.arange(3000) * interval
    v = (3.2 + 7.6 * np.exp(-t / 150) + 0.8 / np.sqrt(1 + t / 50)) * (1 + 0.01 * np.random.default_rng(5).standard_normal(3000))
    assert LossSpikeDetector().detect(series(v, interval=interval)) == []


def evaluations(values: np.ndarray, interval: int = 100):
    steps = np.arange(1, len(values) + 1, dtype=np.int64) * interval - 1
    writes = TagWrites(steps, np.asarray(values, float), np.zeros(len(values), np.int32))
    return prepare_series("eval/loss", Role.EVAL_LOSS, writes, {})


def falling_evaluations(points: int = 20) -> np.ndarray:
    """An eval loss every 100 steps falling smoothly, as the char-LMs' did (2.58 -> 1.41
    over 13 evaluations)."""
    return 1.3 + 1.3 * np.exp(-np.arange(points) / 4.5)


def test_a_jump_of_an_eval_loss_too_short_for_a_sigma_is_a_spike():
    # charlm_lr_jump_c: 1.414 -> 1.567 (+11%) at its 14th evaluation when the LR went x5,
    # back two evaluations later; the baseline knows no sigma before a tag's 40th point
    v = falling_evaluations()
    v[13:16] *= [1.14, 1.08, 1.02]
    f = only(LossSpikeDetector(evaluations=True).detect(evaluations(v)))
    assert (f.start_step, f.peak_step, f.classification) == (1399, 1399, SpikeClass.FAST_RECOVERING)
    assert f.baseline == pytest.approx(v[12]) and f.recovery_steps == 100
    # a train loss logs points fast enough to wait for its sigma: noisier, and no evaluation
    assert LossSpikeDetector().detect(series(v, interval=100)) == []


def test_an_eval_loss_that_jumps_manyfold_before_its_eighth_evaluation_is_a_spike_there():
    # charlm_interval_diverge: eval every 200 steps, 1.417 at its 7th evaluation, 114.7 at
    # its 8th (the LR 300x), 3.1-3.6 after; the divergence alert waited 3 more evaluations
    v = falling_evaluations(15)
    v[7], v[8:] = 80 * v[6], 2.5 * v[6]
    f = only(LossSpikeDetector(evaluations=True).detect(evaluations(v)))
    assert (f.start_step, f.severity) == (799, Severity.CRITICAL)
    assert f.baseline == pytest.approx(v[6])
    detector = LossSpikeDetector(evaluations=True)
    assert feed_in_pieces(detector, evaluations(v).fstep, v, [5, 7, 8, 10], "eval/loss", checks=4) == [f]


def test_an_eval_loss_rising_by_less_than_double_in_its_first_evaluations_is_no_spike():
    """Before the 8th evaluation a fine-tune's eval loss often turns up by a third an
    epoch as it overfits (the overfitting detector's to tell); only a rise that at least
    doubles it starts a spike there."""
    v = np.array([2.0, 1.5, 1.3, 1.25, 1.6, 2.2, 3.0, 3.9])  # +28%, +37%, +36%, +30%
    assert LossSpikeDetector(evaluations=True).detect(evaluations(v)) == []
    v[4] = 2.6  # +108% at the 5th
    assert [f.start_step for f in LossSpikeDetector(evaluations=True).detect(evaluations(v))] == [499]


def young_fine_tune(seed: int = 0, points: int = 50, noise: float = 0.08) -> np.ndarray:
    """A classifier's train loss logged every 10 steps, as HF Trainer logs a short fine-tune:
    0.67 falling to about 0.37, with `noise` point to point."""
    t = np.arange(points)
    return (0.35 + 0.32 * np.exp(-t / 12)) * (1 + noise * np.random.default_rng(seed).standard_normal(points))


def test_a_young_train_loss_that_jumps_to_chance_and_stays_is_a_spike_before_its_sigma_is_known():
    # JakubMroz4__subjectivity-detection: 0.31-0.47, then 0.76 at its 31st point and 0.65-0.74
    # (ln 2) to its 50th; the baseline knows no sigma before a tag's ~40th point
    v = young_fine_tune()
    v[30:] = 0.69 * (1 + 0.03 * np.random.default_rng(1).standard_normal(20))
    v[30] = 0.76
    f = only(LossSpikeDetector().detect(series(v, interval=10)))
    assert (f.start_step, f.classification, f.severity) == (300, SpikeClass.PENDING, Severity.WARNING)  # 200 steps on: not settled yet
    assert f.baseline == pytest.approx(np.median(v[22:30]))
    assert f.evidence["threshold"] == 4.0 and f.evidence["z"] > 4.0
    assert feed_in_pieces(LossSpikeDetector(), series(v, interval=10).fstep, v, [29, 31, 32, 40], "train/loss", checks=4) == [f]


@pytest.mark.parametrize("seed", range(20))
def test_a_young_noisy_train_loss_raises_no_early_spike(seed):
    # a LoRA adapter's loss of 0.03-0.06 whose points move 25% one to the next, then 0.06-0.08
    v = young_fine_tune(seed, noise=0.25)
    assert LossSpikeDetector().detect(series(v, interval=10)) == []


def test_a_young_train_loss_that_climbs_before_its_jump_is_left_to_the_trend():
    # a Whisper fine-tune: 0.12 -> 0.23 over 150-400, then 0.28-0.33 as its eval loss diverged
    v = young_fine_tune(noise=0.02)
    v[20:30] = np.linspace(0.37, 0.5, 10)
    v[30:] = 0.62
    assert LossSpikeDetector().detect(series(v, interval=10)) == []
    v[20:30] = 0.37  # the same jump from a flat loss
    assert [f.start_step for f in LossSpikeDetector().detect(series(v, interval=10))] == [300]


def test_a_young_train_loss_repeating_one_value_then_jumping_has_a_finite_z():
    v = np.concatenate([np.full(20, 0.6931), np.full(10, 0.9)])  # printed to 4 decimals: no change at all, then +30%
    f = only(LossSpikeDetector().detect(series(v, interval=10)))
    assert f.start_step == 200 and np.isfinite(f.evidence["z"]) and f.evidence["z"] > 4


def test_an_eval_loss_keeps_its_own_early_rule():
    v = young_fine_tune()
    v[30:] = 0.69
    assert LossSpikeDetector(evaluations=True).detect(evaluations(v)) == []  # no 5x the largest rise so far: 0.69 is flat


def test_an_eval_loss_rebounding_from_a_dip_is_no_spike():
    v = falling_evaluations()
    v[12] *= 0.92  # 8% under the curve, then back on it: +14% over the point before
    assert LossSpikeDetector(evaluations=True).detect(evaluations(v)) == []


def test_an_eval_loss_at_zero_or_below_has_no_early_spike():
    """A rise has no scale from 0 (an eval loss at exactly 0), nor for an objective below 0."""
    at_zero = np.concatenate([falling_evaluations(10), np.zeros(5), [0.05, 0.0, 0.0]])
    below = falling_evaluations() - 2.0
    below[13] += 0.5
    for v in (at_zero, below):
        assert LossSpikeDetector(evaluations=True).detect(evaluations(v)) == []


@pytest.mark.parametrize("shape", ["falling", "flat"])
def test_the_first_40_evaluations_of_noise_rarely_raise_a_warning(shape):
    # 3% Student-t noise (4 degrees of freedom) on every evaluation: a rise 5x the largest
    # so far comes by chance about 5^-4 / (n + 1) of the time after n; at 2x, 19 of the 500
    # flat series warned, at 3x 8, at 5x 4
    t = np.arange(40)
    level = 1.3 + 1.4 * np.exp(-t / 5) if shape == "falling" else np.full(40, 0.7)
    detector = LossSpikeDetector(evaluations=True)
    warned = 0
    for seed in range(500):
        noise = 0.03 * np.random.default_rng(seed).standard_t(4, 40)
        warned += any(f.severity >= Severity.WARNING for f in detector.detect(evaluations(level * (1 + noise))))
    assert warned <= 5


@pytest.mark.parametrize("values", [
    np.linspace(1, 5, 500), -np.linspace(5, 1, 500), np.linspace(10, 14, 500), np.exp(np.linspace(0, 2, 500)),
    np.linspace(1, 3, 1000) ** 2,
])
def test_a_smooth_climb_without_noise_raises_no_spike(values):
    """The level is carried along the slope to the point itself (one step short of it, a
    straight line stood one step over its level, in a sigma of float64 rounding: 62 spikes
    on the objective climbing from -5 to -1), and a convex climb is measured over the lag it
    keeps over its level (13 spikes on the exponential, 14 before the first fix)."""
    assert LossSpikeDetector().detect(series(values)) == []


def test_a_smooth_loss_turning_from_its_fall_to_climb_is_no_spike():
    """charlm_lr_ramp_coarse_k (bench/labels trained, retired): logged every 20 steps as the
    mean since the last log, the loss floors at 1.32 by 939 and climbs 1.5% a point as an LR
    ramp lifts it.  At 1159, ten points into the climb, the 16-point median under the whole
    window still called the curve falling, and the point stood 6.7 sigmas of its second
    differences over it: a critical "spike" from 1159 that explained the divergence away.
    The curve had climbed back over its level: its spikes are the blow-ups from 1739 and 2799
    (the jump to 3.15 at 1519, three points of the climb, is not found)."""
    [run] = read_path(str(REPO / "bench" / "trained" / "runs" / "charlm_lr_ramp_coarse_k")).runs.values()
    loss = prepare_run(tag_writes(run)).series["train/loss"]
    assert [f.start_step for f in LossSpikeDetector().detect(loss)] == [1739, 2799]
    [divergence] = [f for f in analyze_run(prepare_run(tag_writes(run))) if f.kind is Kind.DIVERGENCE]
    assert divergence.start_step == 1059


def _blown(at: int, back: int | None, n: int = 2000) -> np.ndarray:
    """A loss of 5% noise around 2.0 blown up 300x at `at`, back at `back` (or never)."""
    v = 2.0 * (1 + 0.05 * np.random.default_rng(5).standard_normal(n))
    v[at : back or n] *= 300
    return v


def test_a_loss_blown_up_past_twice_its_level_is_divergent_before_the_settle_window():
    """charlm_lr_ramp_f (bench/labels trained, retired): blown up 300x for the last 160
    steps of its run, where the settled and rising calls compare medians of 150 steps each:
    it was left pending.  Every median of 6 points since its onset past 2x its level, from
    the fast horizon on, calls it divergent; the loss back after that turns the call into
    slow-recovering."""
    f = only(LossSpikeDetector().detect(series(_blown(1840, None))))
    assert (f.start_step, f.classification) == (1840, SpikeClass.DIVERGENT)
    assert f.message.startswith("train/loss spiked at step 1840: ")
    assert f.message.endswith(" and did not recover: blown up, its last 6 points at 595.8, over 2x the 2.047 it left (divergent)")
    live = feed_in_pieces(LossSpikeDetector(), np.arange(2000), _blown(1840, None), [1900, 1939, 1940], "train/loss", checks=4)
    assert live == [f]
    back = only(LossSpikeDetector().detect(series(_blown(1400, 1700))))
    assert (back.start_step, back.classification) == (1400, SpikeClass.SLOW_RECOVERING)


def test_a_loss_blown_up_at_the_end_of_a_coarse_log_is_divergent_at_the_fast_horizon():
    """charlm_lr_ramp_interval_n (bench/labels trained, retired), logged every 20 steps, blew
    up 92-400x for the last 7 points of its run, and was left pending: the 10 points it took
    were 200 steps there.  The medians are of the points the fast horizon spans (100 steps: 5)."""
    f = only(LossSpikeDetector().detect(series(_blown(143, None, n=150), interval=20)))
    assert (f.start_step, f.classification) == (2860, SpikeClass.DIVERGENT)
    assert f.message.endswith(" and did not recover: blown up, its last 5 points at 600.3, over 2x the 2.077 it left (divergent)")


def test_a_jump_that_sat_higher_on_a_coarse_log_gives_its_blow_up_a_spike_of_its_own():
    """charlm_lr_ramp_interval_n (bench/labels trained, retired), logged every 20 steps:
    1.72 -> 4.38 at 2419, 2.99-3.15 from 2559, then blown up 92x at 2879.  Its 150 points
    are mostly trend, and the residuals' spread over the 128 before the jump (0.245, the
    early fall's lag) called 3.0 against 1.72 neither settled nor rising until the blow-up
    itself, which it then swallowed.  Judged in the spread of second differences (0.019),
    it settled, and the blow-up is a spike of its own."""
    [run] = read_path(str(REPO / "bench" / "trained" / "runs" / "charlm_lr_ramp_interval_n")).runs.values()
    loss = prepare_run(tag_writes(run)).series["train/loss"]
    first, second = LossSpikeDetector().detect(loss)
    assert (first.start_step, first.classification, second.start_step, second.classification) == (
        2399, SpikeClass.DIVERGENT, 2879, SpikeClass.DIVERGENT)
    assert "settled at 3.012" in first.message and "blown up" in second.message


def test_a_step_up_blown_up_later_is_two_spikes():
    """charlm_lr_ramp_clip_g (bench/labels trained, tuning): +24% at 1369 on a loss climbing
    with its LR, blown up from 1648.  The first spike is not blown up (its 6-point medians
    since its onset were under 2x): its rising call gives the loss a new level, and the
    blow-up is a spike of its own."""
    [run] = read_path(str(REPO / "bench" / "trained" / "runs" / "charlm_lr_ramp_clip_g")).runs.values()
    loss = prepare_run(tag_writes(run)).series["train/loss"]
    found = LossSpikeDetector().detect(loss)
    assert [(f.start_step, f.classification) for f in found] == [(1369, SpikeClass.DIVERGENT), (1673, SpikeClass.DIVERGENT)]
    assert found[0].message.endswith("did not recover: still rising (divergent)")

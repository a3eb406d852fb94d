"""Grad-norm explosions and stuck norms, NaN/Inf episodes and fp16 loss-scale collapse: on
curves whose truth is known, on healthy curves where they must stay silent, and streamed in
any split with the findings of a one-shot analysis (issue 10 item 6 and the fp16 onset,
issue 11 item 1)."""

from __future__ import annotations

import json

import bottleneck as bn
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from analyzers.analyze import analyze_run
from analyzers.findings import Finding, Kind, Severity
from analyzers.gradnorm import GradNormDetector, _fill_medians_before, _medians_before
from analyzers.lossscale import LossScaleDetector
from analyzers.nonfinite import NonFiniteDetector
from analyzers.roles import Role
from analyzers.series import Series, TagWrites, prepare_run, prepare_series
from analyzers.stream import feed_in_pieces, state_size
from app.analysis import tag_writes
from app.ingest.sources import read_path
from tests.conftest import REPO
from tests.curves import clean_curve, grad_norm_corpus, labelled_corpus, move_grad_norm

STEPS = [767, 1034, 1292, 1522, 1549, 1598, 1686, 1724, 1781, 1820, 1867, 1912]  # fp16_overflow's skips (README)


def series(values, tag: str = "grad_norm", role: Role = Role.GRAD_NORM, steps=None) -> Series:
    v = np.asarray(values, float)
    s = np.arange(len(v), dtype=np.int64) if steps is None else np.asarray(steps, np.int64)
    return prepare_series(tag, role, TagWrites(s, v, np.zeros(len(v), np.int32)), {})


def calm(n: int, level: float = 0.3) -> np.ndarray:
    """A grad norm alternating 10% either side of `level`: its median is `level`, never stuck."""
    return level * np.where(np.arange(n) % 2, 1.1, 0.9)


def explosions(values) -> list[Finding]:
    return [f for f in GradNormDetector().detect(series(values)) if f.kind is Kind.GRAD_NORM_EXPLOSION]


@pytest.fixture(scope="module")
def fp16_overflow():
    run = read_path(str(REPO / "sample_runs" / "fp16_overflow")).runs
    [r] = run.values()
    return prepare_run(tag_writes(r))


# -- grad-norm explosions --------------------------------------------------------------


def test_a_further_jump_during_instability_is_measured_against_the_last_calm_level():
    grad = calm(2000)
    grad[1000:1002] = 6.0  # 20x: the divergence starts
    grad[1002:1200] = 1.2 * np.where(np.arange(198) % 2, 1.25, 0.8)  # elevated 3-5x for 200 points
    grad[1100] = 5.0  # 16x the calm level, 4x the trailing median: missed by a baseline that follows
    first, second = explosions(grad)
    assert (first.start_step, first.end_step, second.start_step, second.end_step) == (1000, 1002, 1100, 1101)
    assert second.message == (
        "grad_norm exploded at step 1100: 0.3 -> 5 (16.7x, 1.2 orders of magnitude); "
        "measured against its last calm level, its recent median had risen to 1.23"
    )
    assert second.evidence["recent_median"] * 10 > second.peak_value


def test_an_exploded_norm_decaying_through_the_line_is_not_told_again_but_a_jump_on_it_is():
    # charlm_lr_units_bug_j: 0.91 -> 13-27 at once, then down from about 20 to 1 over 250 points,
    # its blips of 2-3x its recent median crossing 10x its last calm level again and again
    rng = np.random.default_rng(0)
    grad = calm(2000)
    grad[1000:1250] = np.geomspace(20 * 0.3, 0.3, 250) * np.exp(0.25 * rng.standard_normal(250))
    grad[1000:1010] = 8.0  # 27x
    grad[[1140, 1170, 1180]] *= 2.7  # 1140 over the line, 2.2x over the median before it
    grad[1150] *= 6  # a further jump: 4.4x over it
    told = explosions(grad)
    # the old rule told the decay again at 1062 and 1089, and 1140
    assert [(f.start_step, f.end_step) for f in told] == [(1000, 1058), (1150, 1151)]
    assert told[1].message.startswith("grad_norm exploded at step 1150: 0.3 -> ")


def test_a_second_order_of_magnitude_on_top_of_an_exploded_norm_is_its_own_explosion():
    grad = calm(2000)
    grad[1000:1100] = 9.0 * np.where(np.arange(100) % 2, 1.1, 0.9)  # 30x for 100 points
    grad[1050:1052] = 150.0  # and 16x over that
    first, second = explosions(grad)
    assert (first.start_step, first.end_step, first.evidence["again"]) == (1000, 1050, False)
    assert (second.start_step, second.end_step, second.evidence["again"]) == (1050, 1100, True)
    assert second.message == (
        "grad_norm exploded again at step 1050, on top of an elevated norm: 9 -> 150 "
        "(16.7x, 1.2 orders of magnitude; 500x its last calm level 0.3)"
    )


def test_blooms_climb_over_five_steps_is_one_explosion():
    grad = calm(2000, 0.25)
    grad[1495:1500] = [0.95, 2.4, 15.9, 145, 960]
    [explosion] = explosions(grad)
    assert (explosion.start_step, explosion.peak_step, explosion.end_step) == (1497, 1499, 1500)


def test_an_explosion_under_fp16_begins_at_its_first_overflow():
    # charlm_fp16_collapse_b at 1101: the scaler skips 4 steps (Inf), then 9.7x, 5.5x, Inf, 18x
    grad = calm(2000, 0.87)
    grad[1101:1112] = [np.inf] * 4 + [8.46, 4.82, np.inf, 15.6, np.inf, 14.7, 18.2]
    [explosion] = explosions(grad)
    assert (explosion.start_step, explosion.peak_step, explosion.peak_value) == (1101, 1111, 18.2)
    assert (explosion.evidence["points"], explosion.evidence["overflows"]) == (9, 6)
    assert explosion.message == "grad_norm exploded at step 1101: 0.87 -> 18.2 (20.9x, 1.3 orders of magnitude); Inf at 6 of its points"
    steps = np.arange(2000)
    assert feed_in_pieces(GradNormDetector(), steps, grad, [1103, 1105, 1108], "grad_norm", checks=3) == [explosion]


def test_an_overflow_skip_inside_an_explosion_is_the_explosions():
    # charlm_fp16_collapse_c: Infs open the explosion at 1001, one more at 1012 while it lasts
    n = 2000
    zero = np.zeros(n, np.int32)
    grad, loss = calm(n, 0.87), 1.3 + 0.1 * calm(n)
    grad[1001:1021] = [np.inf] * 3 + [5.4, np.inf, 6.9, np.inf, 7.8, 15.4, 8.6, 10.5, np.inf] + [22, 15, 17, 18, 20, 18, 24, 32]
    grad[1500] = np.inf  # an overflow skip long after: its own
    run = prepare_run({"loss": TagWrites(np.arange(n), loss, zero), "grad_norm": TagWrites(np.arange(n), grad, zero)})
    findings = analyze_run(run)
    [explosion] = [f for f in findings if f.kind is Kind.GRAD_NORM_EXPLOSION]
    assert (explosion.start_step, explosion.evidence["overflows"]) == (1001, 6)
    assert [f.start_step for f in findings if f.kind is Kind.NONFINITE] == [1001, 1500]


def test_an_overflow_skip_alone_is_no_explosion():
    grad = calm(2000, 0.87)
    grad[[500, 900, 901]] = np.inf  # what a healthy fp16 scaler logs now and then
    assert explosions(grad) == []


def test_an_elevated_norm_that_lasts_becomes_the_new_level():
    grad = calm(3000)
    grad[1000:] *= 4  # a resume with a bigger batch: 4x, for good
    grad[1300] = 3.6  # 3x the new level, 12x the old one, after the 200 points of hold
    assert explosions(grad) == []
    grad[1600] = 14.0  # 12x the new level
    [explosion] = explosions(grad)
    assert explosion.start_step == 1600 and explosion.baseline == pytest.approx(1.2)


def test_healthy_grad_norms_that_move_stay_quiet():
    rng = np.random.default_rng(5)
    n = 6000
    grad = 0.4 * np.exp(0.15 * rng.standard_normal(n))
    grad[:300] *= np.linspace(0.1, 1, 300)  # rises 10x during the LR warmup
    grad[2500:] *= 3.5  # a level shift at a resume, which stays
    grad[4500:] *= 0.3  # and a drop at an LR decay step
    for at, blip in zip(rng.choice(np.arange(400, n), 12, replace=False), rng.uniform(3, 7, 12)):
        grad[at] *= blip  # llm.c's one-step 3-7x blips
    assert explosions(grad) == []
    for seed in range(4):
        curve = clean_curve(200 + seed, interval=(1, 10)[seed % 2])
        move_grad_norm(curve, np.random.default_rng(seed))
        assert explosions(curve.tags["train/grad_norm"]) == [], seed


def test_a_stuck_grad_norm_is_open_while_it_lasts():
    grad = calm(300)
    grad[100:] = 0.0
    [stuck] = GradNormDetector().detect(series(grad))
    assert (stuck.kind, stuck.start_step, stuck.end_step, stuck.ongoing) == (Kind.GRAD_NORM_STUCK, 100, 299, True)
    assert stuck.message == "grad_norm is stuck at 0 for 200 points (steps 100-299)"


def small_norm_printed_to_two_decimals(seed: int) -> np.ndarray:
    """A converged model's grad norm, 0.012-0.04, as a loop printing 2 decimals logs it: it
    repeats 0.01 or 0.02 for 50-150 points at a time."""
    return np.round(0.05 * clean_curve(seed, points=3000).tags["train/grad_norm"], 2)


@pytest.mark.parametrize("seed", range(3))
def test_a_norm_that_repeats_by_its_rounding_is_not_stuck(seed):
    grad = small_norm_printed_to_two_decimals(seed)
    longest = max(len(run) for run in np.split(grad, np.flatnonzero(np.diff(grad)) + 1))
    assert longest >= 50  # the old rule: 6-10 "stuck" warnings a run
    assert GradNormDetector().detect(series(grad)) == []


def test_a_norm_stuck_from_its_first_point_or_after_values_that_never_repeated_still_is():
    assert [f.start_step for f in GradNormDetector().detect(series(np.zeros(200)))] == [0]
    grad = np.concatenate([calm(64), np.full(60, 0.3), calm(64)])  # 64 pairs that never repeat, then 60 equal
    [stuck] = GradNormDetector().detect(series(grad))
    assert (stuck.start_step, stuck.end_step, stuck.ongoing) == (64, 123, False)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2), st.integers(2, 40), st.integers(0, 2**32 - 1))
def test_any_split_of_a_rounded_norm_finds_what_one_pass_finds(seed, pieces, cut_seed):
    # full precision, then stuck (told), then printed to 2 decimals (its repeats not told)
    grad = np.concatenate([calm(200), np.full(80, 0.3), small_norm_printed_to_two_decimals(seed)])
    steps = np.arange(len(grad))
    cuts = sorted(set(np.random.default_rng(cut_seed).integers(1, len(grad), pieces - 1).tolist()))
    whole = GradNormDetector().detect(series(grad))
    assert [(f.kind, f.start_step) for f in whole] == [(Kind.GRAD_NORM_STUCK, 200)]
    assert sorted(feed_in_pieces(GradNormDetector(), steps, grad, cuts, "grad_norm"), key=lambda f: f.start_step) == whole


# -- NaN and Inf -----------------------------------------------------------------------


def test_fp16_overflow_skips_are_info_and_the_nan_has_its_own_onset(fp16_overflow):
    findings = [f for f in analyze_run(fp16_overflow) if f.kind is Kind.NONFINITE]
    grad = [f for f in findings if f.tag == "train/grad_norm"]
    # the grad norm's NaN from 1921 is the loss's, which tells it; the norm's drift to 12x over
    # 200 steps before the skip at 1724 is no explosion (it never stands 3x over its recent median)
    assert [(f.start_step, f.severity) for f in grad] == [(s, Severity.INFO) for s in STEPS]
    assert grad[0].message == "train/grad_norm is +Inf at 1 point from step 767, finite again since step 768: an overflow skip"
    assert grad[0].remediation.startswith("Expected under fp16 dynamic loss scaling")
    [loss] = [f for f in findings if f.tag == "train/loss"]
    assert (loss.start_step, loss.peak_step, loss.end_step, loss.ongoing, loss.evidence["count"]) == (1921, 1923, 1980, True, 59)
    assert "Under fp16, train in bf16" in loss.remediation and "before step 1923" in loss.remediation
    assert loss.message == "train/loss is NaN at 59 points from step 1921; finite in between, then non-finite from step 1923 on"


def test_a_nan_grad_norm_is_critical_from_its_fifth_point_and_a_warning_once_finite_again():
    grad = calm(1000)
    detector = NonFiniteDetector()
    state = detector.start(Role.GRAD_NORM)
    state, closed, still = detector.feed(state, np.arange(500), np.r_[grad[:499], np.nan], "grad_norm")
    assert (closed, still) == ([], [])  # an overflow skip so far: told when it closes, or at its 5th point
    state, closed, [nan] = detector.feed(state, np.arange(500, 504), np.full(4, np.nan), "grad_norm")
    assert (closed, nan.severity, nan.start_step) == ([], Severity.CRITICAL, 499)
    state, closed, [nan] = detector.feed(state, np.arange(504, 506), grad[504:506], "grad_norm")
    assert nan.severity is Severity.CRITICAL and nan.message.endswith(", finite again since step 504")
    state, [back], still = detector.feed(state, np.arange(506, 508), grad[506:508], "grad_norm")
    assert (still, back.severity, back.ongoing, back.evidence["came_back"]) == ([], Severity.WARNING, False, True)
    assert back.message == "grad_norm is NaN at 5 points from step 499, finite again since step 504"


def test_a_nan_loss_that_came_back_is_a_warning_and_the_next_one_is_its_own():
    loss = 2 + calm(1000)
    loss[300] = np.nan
    loss[700:] = np.nan
    first, second = NonFiniteDetector().detect(prepare_run({"train/loss": TagWrites(np.arange(1000), loss, np.zeros(1000, np.int32))}))
    assert (first.start_step, first.severity, first.ongoing) == (300, Severity.WARNING, False)
    assert (second.start_step, second.severity, second.ongoing) == (700, Severity.CRITICAL, True)
    assert second.message == "train/loss is NaN at 300 points from step 700 and never finite again"


def test_an_overflow_skip_beside_a_finite_loss_is_not_a_hidden_nan():
    n = 1000
    grad, loss = calm(n), 2 + calm(n)
    grad[400] = np.inf
    grad[800:] = np.nan  # the HF Trainer averages the NaN loss away
    zero = np.zeros(n, np.int32)
    run = prepare_run({"loss": TagWrites(np.arange(n), loss, zero), "grad_norm": TagWrites(np.arange(n), grad, zero)})
    skip, hidden = NonFiniteDetector().detect(run)
    assert (skip.severity, skip.evidence["hidden"]) == (Severity.INFO, False)
    assert (hidden.severity, hidden.evidence["hidden"]) == (Severity.CRITICAL, True)


def test_a_grad_norm_nan_that_the_loss_nan_already_told_is_one_incident():
    n = 1000
    zero = np.zeros(n, np.int32)
    grad, loss = calm(n), 2 + calm(n)
    grad[797] = np.inf  # an overflow, then NaN with the loss: the loss tells it
    grad[800:], loss[800:] = np.nan, np.nan
    run = prepare_run({"loss": TagWrites(np.arange(n), loss, zero), "grad_norm": TagWrites(np.arange(n), grad, zero)})
    [nan] = [f for f in analyze_run(run) if f.kind is Kind.NONFINITE]
    assert (nan.tag, nan.start_step, nan.severity) == ("loss", 800, Severity.CRITICAL)
    grad[700:800] = np.nan  # the grad norm first, for 100 steps: told on its own, then the loss
    run = prepare_run({"loss": TagWrites(np.arange(n), loss, zero), "grad_norm": TagWrites(np.arange(n), grad, zero)})
    found = [(f.tag, f.start_step) for f in analyze_run(run) if f.kind is Kind.NONFINITE]
    assert found == [("grad_norm", 700), ("loss", 800)]


# -- loss scale ------------------------------------------------------------------------


def test_the_scalers_calibration_is_not_a_collapse():
    megatron = np.r_[2.0 ** np.arange(32, 16, -1), np.full(2000, 2.0**16)]  # halves every step from 2^32
    assert LossScaleDetector().detect(series(megatron, "loss_scale", Role.LOSS_SCALE)) == []
    steps = np.r_[0, 1, 2, 4, np.arange(6, 400, 2)]  # DeepSpeed: 65536 -> 4096 in 21 steps (ds_gpt2_ptb_fp16)
    deepspeed = np.select([steps < 1, steps < 2, steps < 4, steps < 21], [65536.0, 32768.0, 16384.0, 8192.0], 4096.0)
    assert LossScaleDetector().detect(series(deepspeed, "loss_scale", Role.LOSS_SCALE, steps)) == []


def test_fp16_overflow_collapses_from_its_last_peak_to_the_floor(fp16_overflow):
    [collapse] = LossScaleDetector().detect(fp16_overflow.series["train/loss_scale"])
    assert (collapse.start_step, collapse.peak_step, collapse.end_step) == (1523, 1931, 1980)
    assert (collapse.severity, collapse.ongoing) == (Severity.CRITICAL, True)
    assert collapse.message == (
        "train/loss_scale fell from 524288 to its floor 1 by step 1931 (19 drops, 19 halvings' worth): fp16 overflows on most steps"
    )


def test_a_collapse_begins_where_the_scale_left_its_sawtooth():
    # charlm_fp16_collapse_b: an overflow skip one halving below the peak at 1042, 59 calm
    # steps there, then a halving at every step from 1101 when the LR jumped
    scale = np.r_[np.full(200, 65536.0), np.full(842, 131072.0), np.full(59, 65536.0), 65536 * 0.5 ** np.arange(1, 60)]
    steps = np.arange(len(scale))
    [f] = LossScaleDetector().detect(series(scale, "loss_scale", Role.LOSS_SCALE))
    assert (f.start_step, f.baseline) == (1101, 131072.0)
    for cuts in ([1042, 1101], [1100], [1101, 1102], [1041, 1043, 1110]):
        assert feed_in_pieces(LossScaleDetector(), steps, scale, cuts, "loss_scale", checks=3) == [f]


def test_a_collapse_ends_when_the_scale_is_back_at_its_peak():
    scale = np.full(3000, 65536.0)
    scale[1000:1007] = 65536 / 2.0 ** np.arange(1, 8)  # seven halvings: 512
    scale[1007:1500] = 512.0
    scale[1500:2000] = np.repeat(2.0 ** np.arange(10, 17, 1.4).astype(int), 100)[:500]  # grows back
    scale[2000:] = 65536.0
    scale[2500:2507] = 65536 / 2.0 ** np.arange(1, 8)
    scale[2507:] = 512.0
    first, second = LossScaleDetector().detect(series(scale, "loss_scale", Role.LOSS_SCALE))
    assert (first.start_step, first.end_step, first.ongoing, first.severity) == (1000, 2000, False, Severity.WARNING)
    assert (second.start_step, second.peak_value, second.ongoing) == (2500, 512.0, True)


# -- streaming: any split finds what one pass finds, with bounded state --------------------


def _curves() -> list[Series]:
    found = []
    for curve in grad_norm_corpus()[::2] + labelled_corpus()[::7]:
        zero = np.zeros(len(curve.steps), np.int32)
        run = prepare_run({t: TagWrites(curve.steps, v, zero) for t, v in curve.tags.items()})
        found += [s for s in run.series.values() if s.role in (Role.GRAD_NORM, Role.LOSS_SCALE) or not s.finite.all()]
    runs = read_path(str(REPO / "sample_runs")).runs
    for run in runs.values():
        found += list(prepare_run(tag_writes(run)).series.values())
    return found


CURVES = _curves()
DETECTORS = {"grad_norm": GradNormDetector(), "nonfinite": NonFiniteDetector(), "loss_scale": LossScaleDetector()}


def _batch(name: str, s: Series) -> list[Finding]:
    detector = DETECTORS[name]
    return detector.detect_series(s) if isinstance(detector, NonFiniteDetector) else detector.detect(s)


def _pieces(name: str, s: Series, cuts: list[int], checks: int) -> list[Finding]:
    detector = DETECTORS[name]
    state = detector.start(s.role) if isinstance(detector, NonFiniteDetector) else detector.start()
    return feed_in_pieces(detector, s.step, s.value, cuts, s.tag, state=state, checks=checks)


def _key(f: Finding):
    return (f.start_step, f.kind.value, f.message)


def _events(s: Series) -> np.ndarray:
    """Where a cut is most likely to split something a detector tracks: non-finite values,
    jumps of 3x over the previous value, and drops of the loss scale."""
    v = s.value
    with np.errstate(invalid="ignore", over="ignore"):
        moved = (v[1:] >= 3 * v[:-1]) | (v[1:] < v[:-1]) & (s.role is Role.LOSS_SCALE)
    return np.union1d(np.flatnonzero(~s.finite), np.flatnonzero(moved) + 1)


@st.composite
def splits(draw):
    s = draw(st.sampled_from(CURVES))
    n = len(s)
    how = draw(st.sampled_from(["random", "near events", "one point at a time", "few"]))
    if how == "random":
        cuts = draw(st.lists(st.integers(1, max(1, n - 1)), max_size=80))
    elif how == "near events":
        events = _events(s)
        at = draw(st.lists(st.sampled_from(events.tolist()), max_size=10)) if len(events) else []
        cuts = [a + draw(st.integers(-3, 40)) for a in at]
    elif how == "few":
        cuts = draw(st.lists(st.integers(1, max(1, n - 1)), max_size=3))
    else:
        start = draw(st.integers(0, max(0, n - 1)))
        cuts = list(range(start, min(n, start + 300)))
    return s, cuts


@pytest.mark.parametrize("name", DETECTORS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=splits())
def test_any_split_finds_what_one_pass_finds(name, case):
    """At every checked prefix: the same findings and the same state as one feed."""
    s, cuts = case
    assert sorted(_pieces(name, s, cuts, checks=8), key=_key) == sorted(_batch(name, s), key=_key)


values = st.one_of(
    st.floats(0, 1e3, allow_nan=False, width=32),
    st.sampled_from([0.0, 1.0, 2.0, np.nan, np.inf, -np.inf, 1e30, 65536.0, 0.5]),
)


@pytest.mark.parametrize("name", DETECTORS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(v=arrays(np.float64, st.integers(0, 200), elements=values), cuts=st.lists(st.integers(1, 199), max_size=20))
def test_any_split_of_any_values_finds_what_one_pass_finds(name, v, cuts):
    s = series(v, "x", {"grad_norm": Role.GRAD_NORM, "nonfinite": Role.LOSS, "loss_scale": Role.LOSS_SCALE}[name])
    assert sorted(_pieces(name, s, cuts, checks=len(cuts)), key=_key) == sorted(_batch(name, s), key=_key)


@pytest.mark.parametrize("name", DETECTORS)
def test_state_stays_bounded_however_long_the_run(name):
    """The state's JSON form after 200,000 points, fed 1,000 at a time, with explosions, NaN
    episodes and collapses throughout, is no larger than a few kB."""
    rng = np.random.default_rng(9)
    n = 200_000
    v = 0.3 * np.exp(0.1 * rng.standard_normal(n))
    v[rng.choice(n, 300, replace=False)] *= 100
    v[rng.choice(n, 300, replace=False)] = np.nan
    if name == "loss_scale":
        v = 2.0 ** np.clip(np.cumsum(rng.choice([-1, 0, 0, 0, 1], n)), 0, 20)
    detector = DETECTORS[name]
    state = detector.start()
    largest = 0
    for a in range(0, n, 1000):
        state, _, _ = detector.feed(state, np.arange(a, a + 1000), v[a : a + 1000], "x")
        largest = max(largest, state_size(state))
    assert largest < 4000
    assert json.loads(json.dumps(state.to_dict())) == state.to_dict()


def test_a_loss_scale_of_zero_from_the_start_is_not_a_collapse_in_any_split():
    """Found by the split property: a scale that is 0 from its first point has not fallen
    from anything; one pass called point 0 a collapse, two pieces point 1."""
    step, value = np.arange(3), np.zeros(3)
    assert feed_in_pieces(LossScaleDetector(), step, value, [1], "scale", checks=2) == []
    assert feed_in_pieces(LossScaleDetector(), step, value, [], "scale") == []


def test_the_point_before_the_scale_first_holds_is_judged_the_same_in_any_split():
    """Found by the split property: calibration ends where the scale first holds, and the
    point before it was called back at the peak in one pass but not in two pieces."""
    value = np.array([-np.inf, 1e30, 0.5, 0.0, 2.0, 516.885, 0.5, np.inf, 65536.0, 1.0])
    once = feed_in_pieces(LossScaleDetector(), np.arange(10), value, [], "scale")
    assert feed_in_pieces(LossScaleDetector(), np.arange(10), value, [4, 7, 8], "scale", checks=4) == once


def test_a_scale_halved_down_to_exactly_zero_is_a_collapse_that_quotes_no_infinity():
    # torch's GradScaler has no floor: at NaN on every step it halves down to 0 in float32
    halving = (65536 * 0.5 ** np.arange(1, 400)).astype(np.float32).astype(float)
    scale = np.r_[np.full(100, 65536.0), halving]
    steps = np.arange(len(scale))
    [f] = LossScaleDetector().detect(prepare_series("loss_scale", Role.LOSS_SCALE, TagWrites(steps, scale, np.zeros(len(scale), np.int32)), {}))
    assert f.severity is Severity.CRITICAL and f.start_step == 100
    assert f.message == "loss_scale fell from 65536 to its floor 0 by step 265 (166 drops): fp16 overflows on most steps"


def _lasting_rise(seed: int, nan_at: int | None = None, last: int = 100):
    """A healthy run whose grad norm rises 15x for its last `last` points (an LR warmed up
    too far, say) while the loss goes on falling; with the loss NaN for 3 steps at `nan_at`."""
    curve = clean_curve(seed, points=3000, noise=0.01)
    curve.tags["train/grad_norm"][-last:] *= 15
    if nan_at is not None:
        curve.tags["train/loss"][nan_at : nan_at + 3] = np.nan
    return prepare_run({tag: TagWrites(curve.steps, v, np.zeros(len(v), np.int32)) for tag, v in curve.tags.items()})


def test_an_explosion_going_on_that_the_loss_never_felt_is_info():
    """A warning while the loss may still answer it; once the loss has gone on for 8 points
    and 20 steps with nothing starting on it, info, and the message says why."""
    [quiet] = [f for f in analyze_run(_lasting_rise(7)) if f.kind is Kind.GRAD_NORM_EXPLOSION]
    assert (quiet.start_step, str(quiet.severity), quiet.ongoing) == (2900, "info", True)
    assert quiet.message.endswith("; the loss has not felt it in 100 points")
    [young] = [f for f in analyze_run(_lasting_rise(7, last=5)) if f.kind is Kind.GRAD_NORM_EXPLOSION]
    assert str(young.severity) == "warning"
    found = analyze_run(_lasting_rise(7, nan_at=2950))
    [felt] = [f for f in found if f.kind is Kind.GRAD_NORM_EXPLOSION]
    assert [(f.tag, f.start_step) for f in found if f.kind is Kind.NONFINITE] == [("train/loss", 2950)]
    assert str(felt.severity) == "warning" and "not felt" not in felt.message


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    norms=arrays(np.float64, st.integers(1, 120), elements=st.sampled_from([0.0, 0.5, 1.0, 1.3, 4.0, 40.0, np.inf, np.nan])),
    k=st.integers(0, 120),
)
def test_trailing_median_is_the_moving_median_wherever_it_can_matter(norms: np.ndarray, k: int) -> None:
    """The explosion rule works out the trailing median only where a point could stand
    `elevated` times over it (and fills it in at points over the line): there, it is
    `bn.move_median`'s number exactly, NaN, Inf and zeros included."""
    k = min(k, len(norms))
    whole = np.full(len(norms), np.nan)
    if len(norms) > 8:
        whole[1:] = bn.move_median(norms, min(32, len(norms)), min_count=8)[:-1]
    whole = whole[k:]
    got = _medians_before(norms, k, 32, 8, 3.0)
    with np.errstate(invalid="ignore"):
        matters = (whole > 0) & (norms[k:] >= 3.0 * whole)
    np.testing.assert_array_equal(got[matters], whole[matters])
    _fill_medians_before(got, norms, k, np.arange(len(got)), 32, 8)
    np.testing.assert_array_equal(got, whole)

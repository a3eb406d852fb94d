"""Loss spikes shaped like the ones in public training logbooks, classified as the people
who lived through them would."""

from __future__ import annotations

import numpy as np
import pytest

from analyzers.findings import Severity, SpikeClass
from analyzers.roles import Role
from analyzers.series import TagWrites, prepare_series
from analyzers.spikes import LossSpikeDetector, SpikeConfig


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

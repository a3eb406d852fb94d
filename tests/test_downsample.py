"""minmax_indices keeps what a person looks for in a plotted series: spikes, extremes,
the ends and every stretch of NaN/Inf, within the point budget."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.downsample import MinMaxSketch, minmax_indices


def noisy(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return np.arange(n, dtype=np.int64), 1.0 + 0.01 * rng.standard_normal(n)


def test_a_one_point_spike_in_a_million_points_survives():
    step, value = noisy(1_000_000)
    value[654_321] = 40.0
    kept = minmax_indices(step, value, 200)
    assert 654_321 in kept
    assert len(kept) <= 200


@pytest.mark.parametrize("max_points", [8, 9, 50, 200, 999])
def test_output_is_sorted_within_budget_and_keeps_both_ends(max_points):
    step, value = noisy(10_000)
    kept = minmax_indices(step, value, max_points)
    assert len(kept) <= max_points
    assert np.all(np.diff(kept) > 0)
    assert kept[0] == 0 and kept[-1] == len(step) - 1


@pytest.mark.parametrize("n", [0, 1, 7, 200])
def test_a_budget_at_or_above_the_length_returns_every_point(n):
    step, value = noisy(n)
    assert minmax_indices(step, value, 200).tolist() == list(range(n))


def test_every_stretch_of_nonfinite_values_stays_visible():
    step, value = noisy(100_000)
    value[10_000] = np.nan  # alone
    value[50_000] = np.inf
    value[80_000:] = np.nan  # a long run to the end: it may not eat the budget
    kept = minmax_indices(step, value, 400)
    assert len(kept) <= 400
    assert {10_000, 50_000} <= set(kept.tolist())
    nonfinite = kept[~np.isfinite(value[kept])]
    assert len(nonfinite) <= 100  # a quarter of the budget
    assert np.max(np.diff(nonfinite[nonfinite >= 80_000])) <= 1000  # one per 1% of the axis
    finite = kept[np.isfinite(value[kept])]
    assert value[finite].max() == np.nanmax(value[:80_000][np.isfinite(value[:80_000])])


def test_buckets_follow_steps_not_indices():
    # 9000 points logged densely over steps 0-9000, 1000 sparsely over 9000-1_000_000
    step = np.concatenate([np.arange(9000), np.linspace(9000, 1_000_000, 1000).astype(np.int64)])
    value = np.ones(len(step))
    value[-500] = 7.0
    kept = minmax_indices(step, value, 100)
    assert len(step) - 500 in kept
    assert np.count_nonzero(step[kept] < 9000) <= 4  # the dense stretch is 1% of the axis


def test_a_budget_too_small_to_keep_the_ends_and_extremes_is_refused():
    with pytest.raises(ValueError, match="max_points must be at least 8"):
        minmax_indices(*noisy(100), 7)


values = st.lists(
    st.one_of(st.floats(-1e300, 1e300), st.sampled_from([np.nan, np.inf, -np.inf])), min_size=1, max_size=400
)


@settings(max_examples=200, deadline=None)
@given(values=values, gaps=st.lists(st.integers(0, 50), min_size=400, max_size=400), max_points=st.integers(8, 120))
def test_the_finite_extremes_the_ends_and_the_budget_always_hold(values, gaps, max_points):
    value = np.array(values, dtype=np.float64)
    step = np.cumsum(np.array(gaps[: len(value)], dtype=np.int64))
    kept = minmax_indices(step, value, max_points)
    assert len(kept) <= max_points
    assert np.all(np.diff(kept) > 0)
    assert kept[0] == 0 and kept[-1] == len(value) - 1
    finite = np.isfinite(value)
    if finite.any():
        out = value[kept][np.isfinite(value[kept])]
        assert out.max() == value[finite].max()
        assert out.min() == value[finite].min()
    if not finite.all():
        assert not np.isfinite(value[kept]).all()


def test_a_summary_may_stand_only_for_points_the_budget_does_not_keep_each():
    """Points counted by add_summary are given only through standing ones: refused where the
    sketch would have kept every one of them."""
    sketch = MinMaxSketch(0, 1000, 40)
    with pytest.raises(ValueError, match="^a summary stands for the series' only 40 points, within the budget$"):
        sketch.add_summary(40, 0)
    sketch = MinMaxSketch(0, 1000, 40)
    with pytest.raises(ValueError, match="^a summary stands for 10 non-finite points, each of which is kept$"):
        sketch.add_summary(500, 10)
    sketch = MinMaxSketch(0, 1000, 40)
    with pytest.raises(ValueError, match="^standing points come after add_summary counted what they stand for$"):
        sketch.add_standing(np.array([1]), np.array([1]), np.array([1.0]), np.array([0.0]))
    sketch.add_summary(500, 11)
    sketch.add_standing(np.array([3, 7]), np.array([3, 7]), np.array([2.0, np.nan]), np.array([0.5, 0.7]))
    assert (sketch.count, sketch.nonfinite) == (500, 11)
    assert [k.tolist() for k in sketch.result_with_extra()[:2]] == [[3, 7], [3, 7]]

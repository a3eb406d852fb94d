"""Downsampling a series for drawing without losing what a person looks for in it.

A screen is a few thousand pixels wide, a run can log millions of points.  Striding would
drop a one-step spike or a lone NaN, which are exactly the points a loss plot is for, so
the points are chosen per stretch of steps: the lowest and the highest of each, and the
non-finite ones, which have no y value to be the extreme of anything."""

from __future__ import annotations

import numpy as np

MIN_POINTS = 8  # the smallest budget that still keeps the ends, both extremes and a NaN


def minmax_indices(step: np.ndarray, value: np.ndarray, max_points: int) -> np.ndarray:
    """Sorted indices of at most `max_points` points of a series sorted by step that keep
    its shape when drawn.

    The rule, for n > max_points points (otherwise every index is returned):

    * Non-finite points (NaN, +-Inf) get up to a quarter of the budget, r = min(count,
      max_points // 4).  When there are more than r of them, the step range is cut into r
      equal buckets and the first non-finite point of each bucket that holds any is kept:
      every stretch where the series is not finite still shows one.
    * The first and the last point are always kept, so the drawn range is the real one.
    * The rest, k = (max_points - kept non-finite - 2) // 2, is the number of equal buckets
      the step range is cut into; each keeps the index of its lowest and of its highest
      finite value (the first of equals).  A one-point spike is its bucket's maximum, so it
      survives, and the series' own minimum and maximum are always kept.

    Buckets are cut on steps, not on indices, so uneven logging does not crowd one part of
    the axis.  Everything is vectorised: a million points take a few tens of milliseconds.
    """
    n = len(step)
    if max_points < MIN_POINTS:
        raise ValueError(f"max_points must be at least {MIN_POINTS}, got {max_points}")
    if n <= max_points:
        return np.arange(n)
    finite = np.isfinite(value)
    nonfinite = np.flatnonzero(~finite)
    budget = min(len(nonfinite), max_points // 4)
    kept_nonfinite = _first_per_bucket(step, nonfinite, budget)
    buckets = (max_points - len(kept_nonfinite) - 2) // 2
    extremes = _extreme_per_bucket(step, value, np.flatnonzero(finite), buckets)
    return np.unique(np.concatenate([[0, n - 1], kept_nonfinite, extremes]))


def _bucket_of(step: np.ndarray, at: np.ndarray, buckets: int) -> np.ndarray:
    """The bucket (0 .. buckets-1) of each of the points `at`, cutting the whole series'
    step range into `buckets` equal parts; non-decreasing since steps are sorted."""
    first, span = float(step[0]), float(step[-1]) - float(step[0])
    if span <= 0:
        return np.zeros(len(at), np.int64)
    scaled = (step[at].astype(np.float64) - first) * (buckets / span)
    return np.minimum(scaled.astype(np.int64), buckets - 1)


def _first_per_bucket(step: np.ndarray, at: np.ndarray, buckets: int) -> np.ndarray:
    """The first of the points `at` in each bucket that holds any of them."""
    if len(at) <= buckets:
        return at
    bucket = _bucket_of(step, at, buckets)
    return at[_starts(bucket)]


def _extreme_per_bucket(step: np.ndarray, value: np.ndarray, at: np.ndarray, buckets: int) -> np.ndarray:
    """The index of the lowest and of the highest of the points `at` in each bucket."""
    if len(at) == 0 or buckets < 1:
        return np.zeros(0, np.int64)
    bucket = _bucket_of(step, at, buckets)
    v = value[at]
    starts = _starts(bucket)
    counts = np.diff(np.append(starts, len(at)))
    lowest = _first_equal(v, np.repeat(np.minimum.reduceat(v, starts), counts), bucket)
    highest = _first_equal(v, np.repeat(np.maximum.reduceat(v, starts), counts), bucket)
    return np.concatenate([at[lowest], at[highest]])


def _first_equal(v: np.ndarray, target: np.ndarray, bucket: np.ndarray) -> np.ndarray:
    """Positions of the first point of each bucket whose value equals its bucket's target."""
    hits = np.flatnonzero(v == target)
    return hits[_starts(bucket[hits])]


def _starts(sorted_keys: np.ndarray) -> np.ndarray:
    """Positions where a non-decreasing key array changes: the start of each group."""
    return np.flatnonzero(np.diff(sorted_keys, prepend=sorted_keys[:1] - 1))

"""Downsampling a series for drawing without losing what a person looks for in it.

A screen is a few thousand pixels wide, a run can log millions of points.  Striding would
drop a one-step spike or a lone NaN, which are exactly the points a loss plot is for, so
the points are chosen per stretch of steps: the lowest and the highest of each, and the
non-finite ones, which have no y value to be the extreme of anything.

The rule is computed by `MinMaxSketch`, which takes a series in pieces, in any order, and
keeps a fixed amount of state: a series read chunk by chunk from the store is never held
whole.  `minmax_indices` is the same rule for a series already in memory."""

from __future__ import annotations

import numpy as np

MIN_POINTS = 8  # the smallest budget that still keeps the ends, both extremes and a NaN

_Columns = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # key, step, value, extra


def minmax_indices(step: np.ndarray, value: np.ndarray, max_points: int) -> np.ndarray:
    """Sorted indices of at most `max_points` points of a series sorted by step that keep
    its shape when drawn: `MinMaxSketch`'s rule over the series' own step range.
    Vectorised: a million points take a few tens of milliseconds."""
    n = len(step)
    _check_budget(max_points)
    if n <= max_points:
        return np.arange(n)
    sketch = MinMaxSketch(int(step[0]), int(step[-1]), max_points)
    sketch.add(np.arange(n), step, value)
    return sketch.result()[0]


class MinMaxSketch:
    """At most `max_points` points of a series that keep its shape when drawn, from pieces
    fed in any order.  Each point has a key that orders the series (its step, or its index)
    and is unique.

    The rule, for n > max_points points (otherwise every point is kept):

    * The step range [first_step, last_step] is cut into F = (max_points - 2) // 2 equal
      fine buckets (steps outside it count in the end buckets).  Buckets are cut on steps,
      not on indices, so uneven logging does not crowd one part of the axis.
    * Non-finite points (NaN, +-Inf) get up to a quarter of the budget, r = max_points // 4.
      With at most r of them every one is kept; else the first of each fine bucket that
      holds any, and when that is still more than r, the first of each of r equal groups of
      fine buckets: every stretch where the series is not finite still shows one.
    * The points with the lowest and the highest key are always kept, so the drawn range is
      the real one.
    * The rest of the budget, C = (max_points - kept non-finite - 2) // 2, is the number of
      equal groups the fine buckets are joined into; each keeps its lowest and its highest
      finite value (of equals, the one with the lowest key).  A one-point spike is its
      group's maximum, so it survives, and the series' own extremes are always kept.

    State is O(max_points) whatever the length of the series: per fine bucket, its lowest,
    highest and first non-finite point.  Each point may carry an `extra` number (its wall
    time) that rides along with it and plays no part in the choice.
    """

    def __init__(self, first_step: int, last_step: int, max_points: int) -> None:
        _check_budget(max_points)
        self.max_points = max_points
        self.count = 0
        self.nonfinite = 0
        self._buckets = (max_points - 2) // 2
        self._first = float(first_step)
        span = float(last_step) - float(first_step)
        self._scale = self._buckets / span if span > 0 else 0.0
        self._all: list[_Columns] | None = []  # while count <= max_points
        self._all_nonfinite: list[_Columns] | None = []  # while <= r
        self._lowest = _Table(self._buckets)
        self._highest = _Table(self._buckets)
        self._first_nonfinite = _Table(self._buckets)
        self._ends = _Table(2)  # 0: the lowest key, 1: the highest

    def add(self, key: np.ndarray, step: np.ndarray, value: np.ndarray, extra: np.ndarray | None = None) -> None:
        """Take a piece of the series: points not seen before, unique keys, any order."""
        if not len(key):
            return
        key, step, value = np.asarray(key, np.int64), np.asarray(step, np.int64), np.asarray(value, np.float64)
        extra = np.full(len(key), np.nan) if extra is None else np.asarray(extra, np.float64)
        self.count += len(key)
        if self._all is not None:
            self._all.append((key, step, value, extra))
            if self.count > self.max_points:
                self._all = None
        self._offer(key, step, value, extra, collect_nonfinite=True)

    def add_summary(self, count: int, nonfinite: int) -> None:
        """Count `count` points of the series (`nonfinite` of them not finite) that are not
        added but stand in through some of them, given to `add_standing` (what
        `app.store.summaries` keeps of a chunk).  Only for a series of more than `max_points`
        points and, when `nonfinite` > 0, of more than `max_points // 4` non-finite ones,
        for otherwise each of them would be kept: a ValueError says when it is not so."""
        self.count += count
        self.nonfinite += nonfinite
        self._all = None
        if self.count <= self.max_points:
            raise ValueError(f"a summary stands for the series' only {self.count} points, within the budget")
        if nonfinite:
            if self.nonfinite <= self.max_points // 4:
                raise ValueError(f"a summary stands for {self.nonfinite} non-finite points, each of which is kept")
            self._all_nonfinite = None

    def add_standing(self, key: np.ndarray, step: np.ndarray, value: np.ndarray, extra: np.ndarray) -> None:
        """Offer points already counted by `add_summary`: the result is the one every point
        would give for each fine bucket given its lowest and highest finite point and its
        first non-finite one, and the points of lowest and highest key."""
        if self._all is not None:
            raise ValueError("standing points come after add_summary counted what they stand for")
        key, step, value = np.asarray(key, np.int64), np.asarray(step, np.int64), np.asarray(value, np.float64)
        self._offer(key, step, value, np.asarray(extra, np.float64), collect_nonfinite=False)

    def _offer(self, key: np.ndarray, step: np.ndarray, value: np.ndarray, extra: np.ndarray,
               collect_nonfinite: bool) -> None:
        if not len(key):
            return
        ends = np.array([np.argmin(key), np.argmax(key)])
        self._ends.offer(np.array([0, 1]), (key[ends], step[ends], value[ends], extra[ends]), np.array([0.0, 0.0]),
                         np.array([1, -1]))
        finite = np.isfinite(value)
        bucket = self.bucket(step)
        if not finite.all():
            bad = ~finite
            if collect_nonfinite:
                self.nonfinite += int(np.count_nonzero(bad))
            if collect_nonfinite and self._all_nonfinite is not None:
                self._all_nonfinite.append((key[bad], step[bad], value[bad], extra[bad]))
                if self.nonfinite > self.max_points // 4:
                    self._all_nonfinite = None
            self._first_nonfinite.offer_best(bucket[bad], (key[bad], step[bad], value[bad], extra[bad]), np.zeros(int(bad.sum())))
            key, step, value, extra, bucket = key[finite], step[finite], value[finite], extra[finite], bucket[finite]
        self._lowest.offer_best(bucket, (key, step, value, extra), value)
        self._highest.offer_best(bucket, (key, step, value, extra), -value)

    def result(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(key, step, value) of the points kept, sorted by key."""
        return self.result_with_extra()[:3]

    def result_with_extra(self) -> _Columns:
        """(key, step, value, extra) of the points kept, sorted by key."""
        if self._all is not None:
            return _sorted_by_key(*_joined(self._all))
        nonfinite = self._kept_nonfinite()
        groups = (self.max_points - len(nonfinite[0]) - 2) // 2
        parts = [self._ends.filled(), nonfinite, self._lowest.grouped(groups), self._highest.grouped(groups)]
        columns = _joined(parts)
        _, unique = np.unique(columns[0], return_index=True)  # one point may be an end and an extreme
        return tuple(c[unique] for c in columns)  # type: ignore[return-value]

    def _kept_nonfinite(self) -> _Columns:
        if self._all_nonfinite is not None:
            return _joined(self._all_nonfinite)
        budget = self.max_points // 4
        table = self._first_nonfinite
        if np.count_nonzero(table.has) <= budget:
            return table.filled()
        return table.grouped(budget)

    @property
    def buckets(self) -> int:
        """How many fine buckets the step range is cut into."""
        return self._buckets

    def bucket(self, step: np.ndarray) -> np.ndarray:
        """The fine bucket of each step."""
        scaled = (step.astype(np.float64) - self._first) * self._scale
        return np.clip(scaled, 0, self._buckets - 1).astype(np.int64)


class _Table:
    """The best point of each bucket: the lowest rank, then the lowest key."""

    def __init__(self, size: int) -> None:
        self.has = np.zeros(size, bool)
        self.rank = np.zeros(size, np.float64)
        self.key = np.zeros(size, np.int64)
        self.step = np.zeros(size, np.int64)
        self.value = np.zeros(size, np.float64)
        self.extra = np.zeros(size, np.float64)

    def offer_best(self, bucket: np.ndarray, columns: _Columns, rank: np.ndarray) -> None:
        """Offer the best point of each bucket among these (columns: key, step, value, extra)."""
        if len(columns[0]):
            best = _best_per_group(bucket, rank, columns[0])
            self.offer(bucket[best], tuple(c[best] for c in columns), rank[best])  # type: ignore[arg-type]

    def offer(self, bucket: np.ndarray, columns: _Columns, rank: np.ndarray, key_sign: np.ndarray | int = 1) -> None:
        """Offer one point per bucket (distinct buckets); `key_sign` -1 prefers the higher key."""
        key, step, value, extra = columns
        old_rank, old_key = self.rank[bucket], self.key[bucket]
        later = np.where(np.asarray(key_sign) > 0, key < old_key, key > old_key)
        better = ~self.has[bucket] | (rank < old_rank) | ((rank == old_rank) & later)
        at = bucket[better]
        self.has[at] = True
        self.rank[at], self.key[at], self.step[at], self.value[at] = rank[better], key[better], step[better], value[better]
        self.extra[at] = extra[better]

    def filled(self) -> _Columns:
        return self.key[self.has], self.step[self.has], self.value[self.has], self.extra[self.has]

    def grouped(self, groups: int) -> _Columns:
        """The best point of each of `groups` equal runs of consecutive buckets."""
        at = np.flatnonzero(self.has)
        if not len(at):
            return self.filled()
        group = at * groups // len(self.has)
        best = at[_best_per_group(group, self.rank[at], self.key[at])]
        return self.key[best], self.step[best], self.value[best], self.extra[best]


def _best_per_group(group: np.ndarray, rank: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Positions of the point with the lowest rank, then the lowest key, of each group."""
    if np.all(group[1:] >= group[:-1]) and np.all(key[1:] > key[:-1]):
        # Already in group and key order (the usual case): no sort.
        starts = _starts(group)
        counts = np.diff(np.append(starts, len(group)))
        hits = np.flatnonzero(rank == np.repeat(np.minimum.reduceat(rank, starts), counts))
        return hits[_starts(group[hits])]
    order = np.lexsort((key, rank, group))
    return order[_starts(group[order])]


def _starts(sorted_keys: np.ndarray) -> np.ndarray:
    """Positions where a non-decreasing key array changes: the start of each group."""
    return np.flatnonzero(np.diff(sorted_keys, prepend=sorted_keys[:1] - 1))


def _joined(parts: list[_Columns]) -> _Columns:
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64), np.zeros(0, np.float64)
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(4))  # type: ignore[return-value]


def _sorted_by_key(key: np.ndarray, step: np.ndarray, value: np.ndarray, extra: np.ndarray) -> _Columns:
    order = np.argsort(key, kind="stable")
    return key[order], step[order], value[order], extra[order]


def _check_budget(max_points: int) -> None:
    if max_points < MIN_POINTS:
        raise ValueError(f"max_points must be at least {MIN_POINTS}, got {max_points}")

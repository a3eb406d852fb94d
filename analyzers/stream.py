"""What every streaming detector shares: its state as copyable data, and the check that
feeding a series in pieces finds what analysing it at once finds.

A streaming detector offers `start(tag, role) -> state` and
`feed(state, step, value) -> (state, closed, open)`: `closed` findings are final, `open`
ones are re-emitted by every feed until they close.  Its batch `detect(series)` is the
same as feeding the whole series at once, so `replay` in any split must give it back.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

import numpy as np

from analyzers.findings import Finding
from analyzers.roles import Role
from analyzers.series import Series

S = TypeVar("S", bound="StreamState")


class StreamState:
    """Base of a detector's state: a frozen dataclass of plain values, small numpy arrays
    and nested states, with a JSON-compatible form (non-finite numbers as the strings
    "NaN", "Infinity", "-Infinity", as everywhere else in losswatch)."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _encode(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls: type[S], data: dict[str, Any]) -> S:
        hints = typing.get_type_hints(cls)
        return cls(**{f.name: _decode(hints[f.name], data[f.name]) for f in dataclasses.fields(cls)})  # type: ignore[arg-type]


class StreamDetector(Protocol[S]):
    def start(self, tag: str, role: Role) -> S: ...

    def feed(self, state: S, step: np.ndarray, value: np.ndarray) -> tuple[S, list[Finding], list[Finding]]: ...


def detect_at_once(detector: StreamDetector[Any], series: Series) -> list[Finding]:
    """A detector's batch answer: every point fed at once, closed findings then open ones."""
    _, closed, open_ = detector.feed(detector.start(series.tag, series.role), series.step, series.value)
    return closed + open_


def replay(
    detector: StreamDetector[Any], series: Series, cuts: Sequence[int], *, checks: int = 0
) -> list[Finding]:
    """Feed `series` split at the point indices `cuts`, the state going through `to_dict`,
    JSON and `from_dict` between feeds as a store would keep it; every closed finding and
    the last open ones.  With `checks`, at that many chunk ends (spread out, the last one
    included) the findings so far and the state must equal those of one feed of the same
    points, or AssertionError says where they differ: the property tests' helper."""
    state = detector.start(series.tag, series.role)
    closed: list[Finding] = []
    open_: list[Finding] = []
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(series))), len(series)]
    ends = bounds[1:]
    checked = set(ends[:: max(1, len(ends) // checks)] + ends[-1:]) if checks else set()
    for a, b in zip(bounds[:-1], bounds[1:]):
        state, done, open_ = detector.feed(state, series.step[a:b], series.value[a:b])
        closed += done
        state = type(state).from_dict(json.loads(json.dumps(state.to_dict(), allow_nan=False)))
        if b in checked:
            whole, at_once, open_at_once = detector.feed(detector.start(series.tag, series.role), series.step[:b], series.value[:b])
            where = f"{series.tag}, after points 0-{b - 1} fed in {bounds.index(b)} pieces"
            assert state.to_dict() == whole.to_dict(), f"{where}: state {state.to_dict()} != {whole.to_dict()}"
            assert _sorted(closed + open_) == _sorted(at_once + open_at_once), f"{where}: findings differ"
    return closed + open_


def _sorted(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (f.start_step, f.kind.value, f.message))


def state_size(state: StreamState) -> int:
    """Characters of the state's JSON form: what must stay bounded whatever the run's length."""
    return len(json.dumps(state.to_dict(), allow_nan=False))


def finite_points(step: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The finite values of a feed and their steps (the arrays themselves when all are)."""
    finite = np.isfinite(value)
    if finite.all():
        return np.asarray(value, float), np.asarray(step, np.int64)
    return np.asarray(value[finite], float), np.asarray(step[finite], np.int64)


def run_lengths(mask: np.ndarray, carried: int = 0) -> np.ndarray:
    """Points in a row that are True, ending at each index (`carried` True ones before the
    first): what a detector counts across feeds ("the floor held for 3 points")."""
    idx = np.arange(len(mask))
    last_false = np.maximum.accumulate(np.where(mask, -1, idx))
    return np.where(last_false < 0, idx + 1 + carried, idx - last_false)


def _encode(value: Any) -> Any:
    if isinstance(value, StreamState):
        return value.to_dict()
    if isinstance(value, np.ndarray):
        return {"dtype": value.dtype.str, "data": [_encode(x) for x in value.tolist()]}
    if isinstance(value, (tuple, list)):
        return [_encode(x) for x in value]
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def _decode(hint: Any, data: Any) -> Any:
    if data is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return _decode(next(a for a in typing.get_args(hint) if a is not type(None)), data)
    if hint is np.ndarray:
        return np.array([float(x) if isinstance(x, str) else x for x in data["data"]], dtype=np.dtype(data["dtype"]))
    if origin is tuple:
        args = typing.get_args(hint)
        items = [args[0]] * len(data) if len(args) == 2 and args[1] is Ellipsis else list(args)
        return tuple(_decode(item, x) for item, x in zip(items, data))
    if isinstance(hint, type) and issubclass(hint, StreamState):
        return hint.from_dict(data)
    if hint is float:
        return float(data)
    return data

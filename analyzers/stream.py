"""What every streaming detector shares: its state as plain, copyable data, and the one
way to feed a series to it in pieces.

A streaming detector offers `start() -> State` and `feed(state, step, value, tag) -> (State,
closed, open)` (the tag only names the findings): `closed` findings are final, `open` ones are re-emitted by every feed until
they close.  Feeding a series in any split gives the same findings as feeding it at once
(`detect`), which is what `feed_in_pieces` lets a test check.  A state is a frozen
dataclass of numbers, small numpy arrays and nested states, bounded in size whatever the
run's length, with `to_dict()`/`from_dict()` to JSON-compatible data so the store can
keep it."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import types
import typing
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

import numpy as np

from analyzers.findings import Finding

_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
S = TypeVar("S", bound="StreamState")


def _plain(x: Any) -> Any:
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, StreamState):
        return x.to_dict()
    if isinstance(x, np.ndarray):
        return {"dtype": x.dtype.str, "values": [_plain(v) for v in x.tolist()]}
    if isinstance(x, float) and not math.isfinite(x):
        return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")
    if isinstance(x, tuple):
        return [_plain(v) for v in x]
    return x


def _number(x: Any) -> Any:
    return _NONFINITE.get(x, x) if isinstance(x, str) else x


def required(hint: Any) -> Any:
    """`X` of a field typed `X | None` (an open incident that may be absent), else the hint."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else hint
    return hint


def of_states(hint: Any) -> bool:
    """Whether a field is typed `tuple[SomeState, ...]` (the incidents a detector follows)."""
    args = typing.get_args(hint) if typing.get_origin(hint) is tuple else ()
    return bool(args) and isinstance(args[0], type) and issubclass(args[0], StreamState)


class StreamState:
    """Base of every detector state (mixed into frozen dataclasses)."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls: type[S], data: dict[str, Any]) -> S:
        hints = field_types(cls)
        values = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            raw, hint = data[f.name], required(hints[f.name])
            if raw is None:
                values[f.name] = None
            elif isinstance(hint, type) and issubclass(hint, StreamState):
                values[f.name] = hint.from_dict(raw)
            elif isinstance(raw, dict) and "dtype" in raw:
                values[f.name] = np.array([_number(v) for v in raw["values"]], dtype=np.dtype(raw["dtype"]))
            elif isinstance(raw, list) and of_states(hint):
                values[f.name] = tuple(typing.get_args(hint)[0].from_dict(v) for v in raw)
            elif isinstance(raw, list):
                values[f.name] = tuple(_number(v) for v in raw)
            else:
                values[f.name] = _number(raw)
        return cls(**values)


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """A state class's field types (evaluated once: the store loads states on every append)."""
    return typing.get_type_hints(cls)


class Streaming(Protocol[S]):
    def start(self) -> S: ...

    def feed(self, state: S, step: np.ndarray, value: np.ndarray, tag: str = "") -> tuple[S, list[Finding], list[Finding]]: ...


def finite_points(step: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The finite points of a piece: what trend statistics are computed on (the arrays
    themselves when every point is)."""
    return points_where(step, value, np.isfinite(value))


def points_where(step: np.ndarray, value: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The points of a piece where `keep` holds (the arrays themselves when it holds everywhere)."""
    if keep.all():
        return np.asarray(step, np.int64), np.asarray(value, np.float64)
    return np.asarray(step, np.int64)[keep], np.asarray(value, np.float64)[keep]


def feed_in_pieces(
    detector: Streaming[Any], step: np.ndarray, value: np.ndarray, cuts: Sequence[int], tag: str = "",
    roundtrip: bool = True, *, state: Any = None, checks: int = 0,
) -> list[Finding]:
    """Feed a series cut at `cuts` (indices), passing the state through `to_dict`/`from_dict`
    between pieces when `roundtrip`; every closed finding and the last open ones.  `state`:
    where to start (default `detector.start()`).  With `checks`, at that many piece ends
    (spread out, the last one included) the findings so far and the state must equal those
    of feeding the same points at once, or AssertionError says where they differ."""
    first = detector.start() if state is None else state
    state = first
    closed: list[Finding] = []
    still_open: list[Finding] = []
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(step))), len(step)]
    ends = bounds[1:]
    checked = set(ends[:: max(1, len(ends) // checks)] + ends[-1:]) if checks else set()
    for a, b in zip(bounds, bounds[1:]):
        if roundtrip:  # through JSON text, as a store would keep it
            state = type(state).from_dict(json.loads(json.dumps(state.to_dict(), allow_nan=False)))
        state, done, still_open = detector.feed(state, step[a:b], value[a:b], tag)
        closed += done
        if b in checked:
            whole, at_once, open_at_once = detector.feed(first, step[:b], value[:b], tag)
            where = f"{tag or 'series'} after points 0-{b - 1} in {bounds.index(b)} pieces"
            assert state.to_dict() == whole.to_dict(), f"{where}: state {state.to_dict()} != {whole.to_dict()}"
            assert _in_order(closed + still_open) == _in_order(at_once + open_at_once), f"{where}: findings differ"
    return closed + still_open


def detect_at_once(detector: Streaming[Any], step: np.ndarray, value: np.ndarray, tag: str, state: Any = None) -> list[Finding]:
    """A streaming detector's batch answer: every point fed at once, closed findings then open ones."""
    _, closed, still_open = detector.feed(detector.start() if state is None else state, step, value, tag)
    return closed + still_open


def run_lengths(mask: np.ndarray, carried: int = 0) -> np.ndarray:
    """Points in a row that are True, ending at each index (`carried` True ones before the
    first): what a detector counts across pieces ("at the floor for 3 points")."""
    run = np.arange(len(mask))
    last_false = np.where(mask, -1, run)
    np.maximum.accumulate(last_false, out=last_false)
    last_false[last_false < 0] = -1 - carried  # no False yet: the run goes on from before the first
    run -= last_false  # made in place: on a long tag each temporary is megabytes of fresh pages
    return run


def state_size(state: StreamState) -> int:
    """Characters of a state's JSON form: what stays bounded whatever the run's length."""
    return len(json.dumps(state.to_dict(), allow_nan=False))


def _in_order(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (f.start_step, f.kind.value, f.tag, f.message))

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
import json
import math
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


class StreamState:
    """Base of every detector state (mixed into frozen dataclasses)."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls: type[S], data: dict[str, Any]) -> S:
        hints = typing.get_type_hints(cls)
        values = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            raw, hint = data[f.name], hints[f.name]
            if isinstance(hint, type) and issubclass(hint, StreamState):
                values[f.name] = hint.from_dict(raw)
            elif isinstance(raw, dict) and "dtype" in raw:
                values[f.name] = np.array([_number(v) for v in raw["values"]], dtype=np.dtype(raw["dtype"]))
            elif isinstance(raw, list):
                values[f.name] = tuple(_number(v) for v in raw)
            else:
                values[f.name] = _number(raw)
        return cls(**values)


class Streaming(Protocol[S]):
    def start(self) -> S: ...

    def feed(self, state: S, step: np.ndarray, value: np.ndarray, tag: str = "") -> tuple[S, list[Finding], list[Finding]]: ...


def finite_points(step: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The finite points of a piece: what trend statistics are computed on."""
    keep = np.isfinite(value)
    return np.asarray(step, np.int64)[keep], np.asarray(value, np.float64)[keep]


def feed_in_pieces(
    detector: Streaming[Any], step: np.ndarray, value: np.ndarray, cuts: Sequence[int], tag: str = "",
    roundtrip: bool = True,
) -> list[Finding]:
    """Feed a series cut at `cuts` (indices), passing the state through `to_dict`/`from_dict`
    between pieces when `roundtrip`; every closed finding and the last open ones."""
    state = detector.start()
    closed: list[Finding] = []
    still_open: list[Finding] = []
    bounds = [0, *sorted(c for c in cuts if 0 < c < len(step)), len(step)]
    for a, b in zip(bounds, bounds[1:]):
        if roundtrip:  # through JSON text, as a store would keep it
            state = type(state).from_dict(json.loads(json.dumps(state.to_dict(), allow_nan=False)))
        state, done, still_open = detector.feed(state, step[a:b], value[a:b], tag)
        closed += done
    return closed + still_open

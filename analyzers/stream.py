"""What every streaming detector shares: state that is plain data, and the proof that
feeding a series in pieces finds what one pass over it finds.

A streaming detector offers `start() -> State` and
`feed(state, step, value) -> (state, closed, open)`: `step`/`value` are a tag's next points
(finite or not, sorted by step, after the last fed), `closed` the findings that are final,
`open` those still evolving, re-emitted by every feed until they close.  Its batch
`detect(series)` is one feed of the whole series from `start()`, so the two agree by
construction once each feed depends only on the points, never on where they were cut.
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

S = TypeVar("S", bound="StreamState")

_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class StreamState:
    """Mixin for a frozen dataclass of plain values, small numpy arrays, nested states and
    tuples of them: `to_dict()` gives a JSON-compatible dict (non-finite floats spelled
    "NaN", "Infinity", "-Infinity", as everywhere else in losswatch), `from_dict()` reads it
    back equal."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _encode(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls: type[S], data: dict[str, Any]) -> S:
        hints = typing.get_type_hints(cls)
        return cls(**{f.name: _decode(hints[f.name], data[f.name]) for f in dataclasses.fields(cls)})  # type: ignore[arg-type]


def _encode(value: Any) -> Any:
    if isinstance(value, StreamState):
        return value.to_dict()
    if isinstance(value, np.ndarray):
        return {"dtype": value.dtype.str, "values": [_encode(v) for v in value.tolist()]}
    if isinstance(value, (tuple, list)):
        return [_encode(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def _decode(hint: Any, value: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        hint = next(h for h in typing.get_args(hint) if h is not type(None))
        origin = typing.get_origin(hint)
    if hint is np.ndarray:
        values = [_NONFINITE[v] if isinstance(v, str) else v for v in value["values"]]
        return np.array(values, dtype=np.dtype(value["dtype"]))
    if origin is tuple:
        inner = typing.get_args(hint)[0]
        return tuple(_decode(inner, v) for v in value)
    if isinstance(hint, type) and issubclass(hint, StreamState):
        return hint.from_dict(value)
    if hint is float:
        return _NONFINITE[value] if isinstance(value, str) else float(value)
    return value


class StreamingDetector(Protocol):
    def start(self) -> Any: ...

    def feed(self, state: Any, step: np.ndarray, value: np.ndarray) -> tuple[Any, list[Finding], list[Finding]]: ...


def feed_in_pieces(detector: StreamingDetector, state: Any, step: np.ndarray, value: np.ndarray, cuts: Sequence[int]) -> list[Finding]:
    """Feed a series cut at `cuts` (indices) from `state` (a detector's start), carrying the
    state through JSON between feeds as a store would; every closed finding and the last
    feed's open ones, by onset."""
    closed: list[Finding] = []
    still: list[Finding] = []
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(step))), len(step)]
    for a, b in zip(bounds[:-1], bounds[1:]):
        state, done, still = detector.feed(state, step[a:b], value[a:b])
        closed += done
        state = type(state).from_dict(json.loads(json.dumps(state.to_dict(), allow_nan=False)))
    return sorted(closed + still, key=lambda f: (f.start_step, f.kind.value))


def random_cuts(rng: np.random.Generator, n: int, pieces: int) -> list[int]:
    """`pieces - 1` cut points in a series of `n` points, with one-point pieces likely."""
    if n < 2 or pieces < 2:
        return []
    cuts = set(rng.integers(1, n, pieces - 1).tolist())
    for c in list(cuts)[: max(1, pieces // 4)]:
        cuts.add(min(n - 1, c + 1))  # a one-point piece
    return sorted(cuts)

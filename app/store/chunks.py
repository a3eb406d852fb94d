"""Points at rest: each append of a tag is one chunk of column arrays, byte-shuffled and
compressed.  Steps are stored as differences (mostly one value), each float's bytes are
grouped by significance (a float32 value held as float64 has three zero bytes), so a
point costs far less than its 28 bytes in memory, and every value comes back exactly."""

from __future__ import annotations

import zlib

import numpy as np

_VERSION = b"\x01"
_COLUMNS = (("step", np.int64), ("segment", np.int32), ("wall_time", np.float64), ("value", np.float64))


def pack(step: np.ndarray, segment: np.ndarray, wall_time: np.ndarray, value: np.ndarray) -> bytes:
    step = np.asarray(step, np.int64)
    deltas = np.diff(step, prepend=np.int64(0))
    parts = [_shuffle(np.asarray(a, dtype)) for a, (_, dtype) in zip((deltas, segment, wall_time, value), _COLUMNS)]
    return _VERSION + zlib.compress(b"".join(parts), 1)


def unpack(data: bytes, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(step, segment, wall_time, value) of a chunk of `count` points."""
    step, segment, wall_time, value = _columns(data, count, with_wall_time=True)
    return step, segment, wall_time, value  # type: ignore[return-value]


def unpack_series(data: bytes, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(step, segment, value) of a chunk: what analysis reads (the wall times, a quarter of
    the unshuffling, are left packed)."""
    step, segment, _, value = _columns(data, count, with_wall_time=False)
    return step, segment, value  # type: ignore[return-value]


def _columns(data: bytes, count: int, with_wall_time: bool) -> list[np.ndarray | None]:
    if data[:1] != _VERSION:
        raise ValueError(f"unknown chunk format {data[:1]!r}")
    raw = zlib.decompress(data[1:])
    out: list[np.ndarray | None] = []
    at = 0
    for name, dtype in _COLUMNS:
        size = np.dtype(dtype).itemsize * count
        out.append(_unshuffle(raw[at : at + size], dtype, count) if with_wall_time or name != "wall_time" else None)
        at += size
    out[0] = np.cumsum(out[0])
    return out


def _shuffle(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a.view(np.uint8).reshape(-1, a.itemsize).T).tobytes()


def _unshuffle(raw: bytes, dtype: type, count: int) -> np.ndarray:
    width = np.dtype(dtype).itemsize
    planes = np.frombuffer(raw, np.uint8).reshape(width, count)
    return np.ascontiguousarray(planes.T).view(dtype).reshape(count)

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
    if data[:1] != _VERSION:
        raise ValueError(f"unknown chunk format {data[:1]!r}")
    raw = zlib.decompress(data[1:])
    out, at = [], 0
    for _, dtype in _COLUMNS:
        size = np.dtype(dtype).itemsize * count
        out.append(_unshuffle(raw[at : at + size], dtype, count))
        at += size
    step, segment, wall_time, value = out
    return np.cumsum(step), segment, wall_time, value


def _shuffle(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a.view(np.uint8).reshape(-1, a.itemsize).T).tobytes()


def _unshuffle(raw: bytes, dtype: type, count: int) -> np.ndarray:
    width = np.dtype(dtype).itemsize
    planes = np.frombuffer(raw, np.uint8).reshape(width, count)
    return np.ascontiguousarray(planes.T).view(dtype).reshape(count)

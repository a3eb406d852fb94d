"""Points at rest: each append of a tag is one chunk of column arrays, byte-shuffled and
compressed.  Steps are stored as differences (mostly one value), each float's bytes are
grouped by significance (a float32 value held as float64 has three zero bytes), so a
point costs far less than its 28 bytes in memory, and every value comes back exactly.

A chunk (format 2) is a sequence of parts, each its points' columns compressed on their
own: a small append to a tag's last chunk adds a part to its bytes without decompressing
the others (a cron tick appends 100 steps to every run's chunks of 1,000), and a read of
the writes past some position decodes only the parts that hold them.  Once a chunk has
MAX_PARTS parts, the next append packs it whole again.  Format 1 (one compressed stream of
every point, what stores written before parts hold) is still read; an append to such a
chunk packs it whole in format 2."""

from __future__ import annotations

import struct
import zlib

import numpy as np

_WHOLE = b"\x01"  # format 1: one compressed stream of every point
_PARTS = b"\x02"  # format 2: parts, each [points][bytes] (little-endian uint32) then its compressed stream
_PART_HEAD = struct.Struct("<II")
_COLUMNS = (("step", np.int64), ("segment", np.int32), ("wall_time", np.float64), ("value", np.float64))
MAX_PARTS = 16  # parts a chunk grows to before an append packs it whole


def pack(step: np.ndarray, segment: np.ndarray, wall_time: np.ndarray, value: np.ndarray) -> bytes:
    return _PARTS + _part(step, segment, wall_time, value)


def append(data: bytes, step: np.ndarray, segment: np.ndarray, wall_time: np.ndarray, value: np.ndarray) -> bytes | None:
    """A chunk's bytes with these points added after its own, its parts left compressed as
    they are; None when it must be packed whole instead (format 1, or MAX_PARTS parts)."""
    if data[:1] != _PARTS or len(_spans(data)) >= MAX_PARTS:
        return None
    return data + _part(step, segment, wall_time, value)


def unpack(data: bytes, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(step, segment, wall_time, value) of a chunk of `count` points."""
    step, segment, wall_time, value = _decoded(data, count, 0, with_wall_time=True)
    return step, segment, wall_time, value  # type: ignore[return-value]


def unpack_series(data: bytes, count: int, skip: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(step, segment, value) of a chunk's writes past its first `skip`: what analysis reads
    (the wall times, a quarter of the unshuffling, are left packed; so are the parts that
    hold only the first `skip` writes)."""
    step, segment, _, value = _decoded(data, count, skip, with_wall_time=False)
    return step, segment, value  # type: ignore[return-value]


def _part(step: np.ndarray, segment: np.ndarray, wall_time: np.ndarray, value: np.ndarray) -> bytes:
    """These points as one part: its steps as differences from 0, so it decodes on its own."""
    step = np.asarray(step, np.int64)
    deltas = np.empty_like(step)  # np.diff(step, prepend=0), without its general machinery
    deltas[:1] = step[:1]
    np.subtract(step[1:], step[:-1], out=deltas[1:])
    columns = [_shuffle(np.asarray(a, dtype)) for a, (_, dtype) in zip((deltas, segment, wall_time, value), _COLUMNS)]
    packed = zlib.compress(b"".join(columns), 1)
    return _PART_HEAD.pack(len(step), len(packed)) + packed


def _spans(data: bytes) -> list[tuple[int, int, int]]:
    """(points, start, end) of each part of a format 2 chunk's bytes."""
    out = []
    at = 1
    while at < len(data):
        points, size = _PART_HEAD.unpack_from(data, at)
        at += _PART_HEAD.size
        out.append((points, at, at + size))
        at += size
    return out


def _decoded(data: bytes, count: int, skip: int, with_wall_time: bool) -> list[np.ndarray | None]:
    """The columns of the chunk's writes past its first `skip`."""
    if data[:1] == _WHOLE:
        columns = _columns(zlib.decompress(data[1:]), count, with_wall_time)
        return [c[skip:] if c is not None and skip else c for c in columns]
    if data[:1] != _PARTS:
        raise ValueError(f"unknown chunk format {data[:1]!r}")
    pieces = []
    before = 0  # writes of the parts before this one
    for points, start, end in _spans(data):
        if before + points > skip:
            columns = _columns(zlib.decompress(data[start:end]), points, with_wall_time)
            pieces.append([c[max(skip - before, 0):] if c is not None else None for c in columns])
        before += points
    if len(pieces) == 1:
        return pieces[0]
    if not pieces:
        return [np.zeros(0, dtype) if with_wall_time or name != "wall_time" else None for name, dtype in _COLUMNS]
    return [np.concatenate(column) if column[0] is not None else None for column in zip(*pieces)]


def _columns(raw: bytes, count: int, with_wall_time: bool) -> list[np.ndarray | None]:
    """The columns of `count` points decompressed from one stream (steps summed back)."""
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

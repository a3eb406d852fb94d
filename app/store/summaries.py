"""What a chunk says about its points without being decompressed: per block of BLOCK
consecutive writes, its step range, its first and last point, its lowest and highest finite
point and its non-finite points (how many, the first and the last).  A zoomed-out
plot of millions of points is drawn from these (`app.store.envelope`): the downsampler keeps
each stretch's extremes and first non-finite point, and a block lying inside one stretch
gives exactly those.  A block is 256 writes, so a chunk of 16384 points carries 64 blocks,
about 3% of its own size."""

from __future__ import annotations

import zlib

import numpy as np

BLOCK = 256
_VERSION = b"\x01"

# One row per block.  A point is its step, value and wall time; "min"/"max" are of the
# finite values (of equals, the first written), NaN with no finite value (count == nonfinite).
BLOCK_DTYPE = np.dtype([
    ("first_step", "<i8"), ("first_value", "<f8"), ("first_wall", "<f8"),
    ("last_step", "<i8"), ("last_value", "<f8"), ("last_wall", "<f8"),
    ("count", "<i8"),
    ("min_step", "<i8"), ("min_value", "<f8"), ("min_wall", "<f8"),
    ("max_step", "<i8"), ("max_value", "<f8"), ("max_wall", "<f8"),
    ("nonfinite", "<i8"),
    ("nf_step", "<i8"), ("nf_value", "<f8"), ("nf_wall", "<f8"),  # the first non-finite point (if any)
    ("nf_last_step", "<i8"), ("nf_last_value", "<f8"), ("nf_last_wall", "<f8"),  # the last one
])


def summary_columns(step: np.ndarray, segment: np.ndarray, wall: np.ndarray, value: np.ndarray) -> dict:
    """The summary columns of a chunk of these writes (in write order)."""
    step, value = np.asarray(step, np.int64), np.asarray(value, np.float64)
    return {
        "ordered": int(bool(np.all(step[1:] > step[:-1]))),
        "min_segment": int(np.min(segment)),
        "nonfinite": int(np.count_nonzero(~np.isfinite(value))),
        "blocks": pack_blocks(block_summaries(step, np.asarray(wall, np.float64), value)),
    }


def block_summaries(step: np.ndarray, wall: np.ndarray, value: np.ndarray) -> np.ndarray:
    """One BLOCK_DTYPE row per BLOCK writes (the last block may be shorter)."""
    n = len(step)
    starts = np.arange(0, n, BLOCK)
    ends = np.minimum(starts + BLOCK, n) - 1
    out = np.zeros(len(starts), BLOCK_DTYPE)
    out["first_step"], out["first_value"], out["first_wall"] = step[starts], value[starts], wall[starts]
    out["last_step"], out["last_value"], out["last_wall"] = step[ends], value[ends], wall[ends]
    out["count"] = ends - starts + 1
    finite = np.isfinite(value)
    for name, ranked in (("min", np.where(finite, value, np.inf)), ("max", np.where(finite, -value, np.inf))):
        at = starts + np.argmin(_blocked(ranked, np.inf), axis=1)  # the first of equals; +inf: no finite value
        out[f"{name}_step"], out[f"{name}_value"], out[f"{name}_wall"] = step[at], np.where(finite[at], value[at], np.nan), wall[at]
    bad = _blocked(~finite, False)
    out["nonfinite"] = bad.sum(axis=1)
    first_bad, last_bad = starts + np.argmax(bad, axis=1), starts + BLOCK - 1 - np.argmax(bad[:, ::-1], axis=1)
    last_bad = np.minimum(last_bad, n - 1)  # a block without any: a real point, never read
    out["nf_step"], out["nf_value"], out["nf_wall"] = step[first_bad], value[first_bad], wall[first_bad]
    out["nf_last_step"], out["nf_last_value"], out["nf_last_wall"] = step[last_bad], value[last_bad], wall[last_bad]
    return out


def _blocked(a: np.ndarray, fill) -> np.ndarray:
    """`a` as rows of BLOCK, the last padded with `fill`."""
    rows = -(-len(a) // BLOCK)
    padded = np.full(rows * BLOCK, fill, a.dtype)
    padded[: len(a)] = a
    return padded.reshape(rows, BLOCK)


def pack_blocks(blocks: np.ndarray) -> bytes:
    return _VERSION + zlib.compress(blocks.tobytes(), 1)


def unpack_blocks(data: bytes) -> np.ndarray:
    if data[:1] != _VERSION:
        raise ValueError(f"unknown chunk summary format {data[:1]!r}")
    return np.frombuffer(zlib.decompress(data[1:]), BLOCK_DTYPE)

"""What a chunk says about its points without being decompressed: per block of BLOCK
consecutive writes, its step range, its first and last point, its lowest and highest finite
point and its non-finite points (how many, the first and the last).  A zoomed-out
plot of millions of points is drawn from these (`app.store.envelope`): the downsampler keeps
each stretch's extremes and first non-finite point, and a block lying inside one stretch
gives exactly those.  A block is 256 writes, so a chunk of 16384 points carries 64 blocks,
about 3% of its own size.

Stored as the complete blocks compressed, then the last block raw while it is short of
BLOCK writes.  A small append (a training loop posts a few points a tag) changes only that
last block: it is folded in with the new points and written after the compressed bytes as
they are, so the append costs what it adds (5 points: 10-13 us a tag, 25 us when they start
a block, where decompressing, extending and compressing every block took ~170 us; a cron
tick's 100 points: about 50 us, against 100), and the blocks are compressed again only when
one fills.  Both ways give the same bytes (tests/test_chunks.py)."""

from __future__ import annotations

import math
import struct
import zlib

import numpy as np

BLOCK = 256
_COMPRESSED = b"\x01"  # every block compressed (written before the last block was kept raw)
_TAILED = b"\x02"  # the complete blocks compressed, then the last block raw if short of BLOCK
_PREFIX = struct.Struct("<I")  # the compressed bytes' length
FOLDED_POINTS = 32  # appends of up to this many points are folded in one by one (numpy past that)

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


def grown_columns(old: dict, step: np.ndarray, segment: np.ndarray, wall: np.ndarray, value: np.ndarray) -> dict:
    """The summary columns of a chunk whose summary columns were `old` once these writes are
    added after its own: what `summary_columns` gives of all its writes, worked out from its
    summary (the chunk's own points stay packed, see `app.store.chunks.append`)."""
    step, wall, value = np.asarray(step, np.int64), np.asarray(wall, np.float64), np.asarray(value, np.float64)
    few = len(step) <= FOLDED_POINTS
    folded = _folded(old["blocks"], step, wall, value, few)
    if folded is None:
        blocks = unpack_blocks(old["blocks"])
        folded = pack_blocks(extend_blocks(blocks, step, wall, value)), int(blocks[-1]["last_step"])
    packed, last_step = folded
    if few:  # a few points: Python's arithmetic costs less than numpy's calls
        steps = step.tolist()
        increasing = all(a < b for a, b in zip(steps, steps[1:]))
        bad = sum(not math.isfinite(v) for v in value.tolist())
    else:
        increasing, bad = bool(np.all(step[1:] > step[:-1])), int(np.count_nonzero(~np.isfinite(value)))
    return {
        "ordered": int(bool(old["ordered"] and increasing and step[0] > last_step)),
        "min_segment": min(int(old["min_segment"]), int(np.min(segment))),
        "nonfinite": int(old["nonfinite"]) + bad,
        "blocks": packed,
    }


def _folded(data: bytes, step: np.ndarray, wall: np.ndarray, value: np.ndarray, few: bool) -> tuple[bytes, int] | None:
    """The packed blocks once these writes are folded into the last one (their first writes
    start a new block when it is full), and the old blocks' last step; None when they do
    not all fit in that block or it is stored compressed (format 1).  `few` writes are
    folded in one by one; more, summarised with numpy, only while they leave the block
    short (an append of 100 points to a tag: the complete blocks are neither decompressed
    nor compressed again until one fills, as for a few)."""
    if data[:1] != _TAILED:
        return None
    end = _PREFIX.size + 1 + _PREFIX.unpack_from(data, 1)[0]
    if len(data) == end:  # the last block is complete: these writes start one
        if len(step) > BLOCK:
            return None
        prefix = np.frombuffer(zlib.decompress(data[1 + _PREFIX.size : end]), BLOCK_DTYPE)
        row, last_step = None, int(prefix[-1]["last_step"])
    else:
        row = list(_ROW.unpack_from(data, end))
        last_step = row[_AT["last_step"]]
        if row[_AT["count"]] + len(step) > BLOCK:
            return None
    if few:
        for point in zip(step.tolist(), value.tolist(), wall.tolist()):
            row = _fold(row, *point)
    else:
        filled = 0 if row is None else row[_AT["count"]]
        if filled + len(step) >= BLOCK:
            return None
        added = block_summaries(step, wall, value, filled)[0].tolist()
        row = list(added if row is None else _merged(row, added))
    packed = _ROW.pack(*row)
    if row[_AT["count"]] < BLOCK:
        return data[:end] + packed, last_step
    blocks = zlib.decompress(data[1 + _PREFIX.size : end]) + packed
    return pack_blocks(np.frombuffer(blocks, BLOCK_DTYPE)), last_step


def _fold(row: list | None, step: int, value: float, wall: float) -> list:
    """A block's row (None: no writes yet) with one more write, as `block_summaries` gives it
    of its writes and this one: of equal extremes the first, no finite value makes the first
    write min and max (value NaN), no non-finite one makes the first and last writes the
    first and last of them."""
    finite = math.isfinite(value)
    if row is None:
        shown = value if finite else math.nan
        return [step, value, wall, step, value, wall, 1, step, shown, wall, step, shown, wall,
                int(not finite), step, value, wall, step, value, wall]
    row[_AT["last_step"]], row[_AT["last_value"]], row[_AT["last_wall"]] = step, value, wall
    row[_AT["count"]] += 1
    if finite:
        low, high = row[_AT["min_value"]], row[_AT["max_value"]]
        if value < low or math.isnan(low):
            row[_AT["min_step"]], row[_AT["min_value"]], row[_AT["min_wall"]] = step, value, wall
        if value > high or math.isnan(high):
            row[_AT["max_step"]], row[_AT["max_value"]], row[_AT["max_wall"]] = step, value, wall
    else:
        if row[_AT["nonfinite"]] == 0:
            row[_AT["nf_step"]], row[_AT["nf_value"]], row[_AT["nf_wall"]] = step, value, wall
        row[_AT["nonfinite"]] += 1
    if not finite or row[_AT["nonfinite"]] == 0:
        row[_AT["nf_last_step"]], row[_AT["nf_last_value"]], row[_AT["nf_last_wall"]] = step, value, wall
    return row


def extend_blocks(blocks: np.ndarray, step: np.ndarray, wall: np.ndarray, value: np.ndarray) -> np.ndarray:
    """`block_summaries` of a chunk's writes and then these, from its `blocks` and these
    writes alone: a last block short of BLOCK is merged with the first writes that fill it."""
    filled = int(blocks[-1]["count"]) % BLOCK
    added = block_summaries(step, wall, value, filled)
    if filled:
        added[0] = _merged(blocks[-1].tolist(), added[0].tolist())
    kept = len(blocks) - bool(filled)
    out = np.empty(kept + len(added), BLOCK_DTYPE)  # not np.concatenate: it works out the fields' types again
    out[:kept], out[kept:] = blocks[:kept], added
    return out


_AT = {name: i for i, name in enumerate(BLOCK_DTYPE.names)}
_ROW = struct.Struct("<" + "".join("q" if BLOCK_DTYPE[name].kind == "i" else "d" for name in BLOCK_DTYPE.names))  # one block


def _merged(a: tuple, b: tuple) -> tuple:
    """The block of a's writes then b's (rows as tuples), as `block_summaries` gives it of
    them together: of equal extremes the first written (a's), a block without finite values
    takes its first point as min and max, one without non-finite values its first and last
    points as the first and last of them."""
    out = list(a)
    taken = ["last"]
    for name, beats in (("min", b[_AT["min_value"]] < a[_AT["min_value"]]), ("max", b[_AT["max_value"]] > a[_AT["max_value"]])):
        if beats or (math.isnan(a[_AT[f"{name}_value"]]) and not math.isnan(b[_AT[f"{name}_value"]])):
            taken.append(name)
    bad_a, bad_b = a[_AT["nonfinite"]], b[_AT["nonfinite"]]
    if bad_a == 0 and bad_b > 0:
        taken.append("nf")
    if bad_b > 0 or bad_a == 0:
        taken.append("nf_last")
    for name in taken:
        for field in ("step", "value", "wall"):
            out[_AT[f"{name}_{field}"]] = b[_AT[f"{name}_{field}"]]
    out[_AT["count"]] = a[_AT["count"]] + b[_AT["count"]]
    out[_AT["nonfinite"]] = bad_a + bad_b
    return tuple(out)


def block_summaries(step: np.ndarray, wall: np.ndarray, value: np.ndarray, filled: int = 0) -> np.ndarray:
    """One BLOCK_DTYPE row per BLOCK writes (the last block may be shorter).  `filled`:
    writes of the first block before these (a chunk's last block, summarised already, that
    these writes are appended to): its row is of the BLOCK - filled writes that complete it."""
    n = len(step)
    starts = np.arange(-filled, n, BLOCK)  # where each block starts, the first one's writes before these included
    firsts = np.maximum(starts, 0)
    ends = np.minimum(starts + BLOCK, n) - 1
    out = np.zeros(len(starts), BLOCK_DTYPE)
    out["first_step"], out["first_value"], out["first_wall"] = step[firsts], value[firsts], wall[firsts]
    out["last_step"], out["last_value"], out["last_wall"] = step[ends], value[ends], wall[ends]
    out["count"] = ends - firsts + 1
    finite = np.isfinite(value)
    for name, ranked in (("min", np.where(finite, value, np.inf)), ("max", np.where(finite, -value, np.inf))):
        # the first of equals; all +inf (no finite value): the block's first write
        at = np.maximum(starts + np.argmin(_blocked(ranked, np.inf, filled), axis=1), firsts)
        out[f"{name}_step"], out[f"{name}_value"], out[f"{name}_wall"] = step[at], np.where(finite[at], value[at], np.nan), wall[at]
    bad = _blocked(~finite, False, filled)
    out["nonfinite"] = bad.sum(axis=1)
    first_bad, last_bad = starts + np.argmax(bad, axis=1), starts + BLOCK - 1 - np.argmax(bad[:, ::-1], axis=1)
    first_bad = np.maximum(first_bad, firsts)  # a block without any: its first write, never read
    last_bad = np.minimum(last_bad, n - 1)  # and its last
    out["nf_step"], out["nf_value"], out["nf_wall"] = step[first_bad], value[first_bad], wall[first_bad]
    out["nf_last_step"], out["nf_last_value"], out["nf_last_wall"] = step[last_bad], value[last_bad], wall[last_bad]
    return out


def _blocked(a: np.ndarray, fill, filled: int = 0) -> np.ndarray:
    """`a` as rows of BLOCK after `filled` places of `fill`, the last row padded with `fill`."""
    rows = -(-(len(a) + filled) // BLOCK)
    padded = np.full(rows * BLOCK, fill, a.dtype)
    padded[filled : filled + len(a)] = a
    return padded.reshape(rows, BLOCK)


def pack_blocks(blocks: np.ndarray) -> bytes:
    """The complete blocks compressed, then the last one raw if it is short of BLOCK."""
    complete = len(blocks) - int(len(blocks) > 0 and blocks[-1]["count"] < BLOCK)
    prefix = zlib.compress(blocks[:complete].tobytes(), 1)
    return _TAILED + _PREFIX.pack(len(prefix)) + prefix + blocks[complete:].tobytes()


def unpack_blocks(data: bytes) -> np.ndarray:
    if data[:1] == _COMPRESSED:
        return np.frombuffer(zlib.decompress(data[1:]), BLOCK_DTYPE)
    if data[:1] != _TAILED:
        raise ValueError(f"unknown chunk summary format {data[:1]!r}")
    end = _PREFIX.size + 1 + _PREFIX.unpack_from(data, 1)[0]
    prefix = np.frombuffer(zlib.decompress(data[1 + _PREFIX.size : end]), BLOCK_DTYPE)
    return np.concatenate([prefix, np.frombuffer(data, BLOCK_DTYPE, offset=end)]) if len(data) > end else prefix

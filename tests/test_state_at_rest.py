"""A run's streaming state at rest (`analyzers.runstream.dumps`/`loads`): every array comes
back exactly, whichever way it was packed, and a state saved in an earlier format is known
for one (the run is then fed again: tests/test_stream_store.py)."""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from analyzers import runstream
from analyzers.findings import SpikeClass
from analyzers.runstream import dumps, feed_run, loads, start_run
from analyzers.series import TagWrites
from tests.curves import clean_curve, plant_spike

ARRAYS = [
    np.zeros(0, np.int64),
    np.array([7], np.int64),
    np.array([3, 9], np.int64),
    np.arange(100, 4196, dtype=np.int64),  # one stride: no bytes
    np.arange(5000, 0, -5, dtype=np.int64),  # a negative stride
    np.array([0, 10, 20, 35, 45], np.int64),  # strides that differ
    np.arange(0, 3000, 3, dtype=np.int32),
    np.cumsum(np.random.default_rng(0).integers(1, 4, 500)),
    np.array([1.5, np.nan, np.inf, -np.inf, -0.0, 0.0, 3.0e38]),  # float32 holds each exactly
    np.array([0.1, 2.0]),  # 0.1 it does not
    np.array([1e-320, 1.0]),  # nor a subnormal float64
    np.array([4e38]),  # nor what is past its range
    np.random.default_rng(1).standard_normal(4096).astype(np.float32).astype(np.float64),
    np.random.default_rng(2).standard_normal(300),
    np.zeros(0),
    np.ones(3, np.float32),
]


def _through_packer(a: np.ndarray) -> tuple[np.ndarray, list]:
    packer = runstream._Packer()
    described = json.loads(json.dumps(packer(a)))
    return runstream._unarray(described, memoryview(b"".join(packer.parts))), described


@pytest.mark.parametrize("a", ARRAYS, ids=lambda a: f"{a.dtype}x{len(a)}")
def test_every_array_comes_back_exactly(a):
    back, _ = _through_packer(a)
    assert back.dtype == a.dtype
    assert back.tobytes() == a.tobytes()  # bit for bit: -0.0 and every NaN and inf in place


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(st.sampled_from([np.int64, np.int32, np.float64, np.float32]), st.integers(0, 300)))
def test_any_array_comes_back_exactly(a):
    back, _ = _through_packer(a)
    assert back.dtype == a.dtype
    assert np.array_equal(back, a, equal_nan=a.dtype.kind == "f")
    assert np.array_equal(np.signbit(back), np.signbit(a))


def test_the_common_shapes_are_packed_small():
    assert _through_packer(ARRAYS[3])[1] == ["<i8", "s", 100, 1, 4096]  # a tail's steps: no bytes
    assert _through_packer(ARRAYS[12])[1][1:] == ["f4", 0, 4096 * 4]  # float32 values: half the bytes
    assert _through_packer(ARRAYS[13])[1][1:] == ["r", 0, 300 * 8]


def _state(float32: bool = True):
    """A run's state past its first 4,096 points, its values as an event file holds them
    (float32) or as a JSON log may (float64)."""
    curve = clean_curve(3, points=6000)
    plant_spike(curve, 4000, SpikeClass.SLOW_RECOVERING, np.random.default_rng(0))
    writes = curve.writes()
    if float32:
        writes = {t: TagWrites(w.step, w.value.astype(np.float32).astype(np.float64), w.segment) for t, w in writes.items()}
    state, _, _ = feed_run(start_run(), writes)
    return state


def _previous_release_dumps(state, format: int = 5) -> bytes:
    """What the releases before this packing saved: the same JSON, every array described by
    a dict, integers as zlib-compressed differences and floats raw (format 5)."""
    parts: list[bytes] = []

    def pack(a: np.ndarray) -> dict:
        differences = a.dtype.kind in "iu" and len(a) > 1
        raw = zlib.compress(np.diff(a, prepend=0).astype(a.dtype).tobytes(), 1) if differences else a.tobytes()
        parts.append(raw)
        at = sum(len(p) for p in parts) - len(raw)
        return {"dtype": a.dtype.str, "at": at, "n": len(raw), **({"d": 1} if differences else {})}

    plain = runstream._plain(state, pack)
    plain["format"] = format
    text = zlib.compress(json.dumps(plain, separators=(",", ":")).encode(), 1)
    return len(text).to_bytes(8, "little") + text + b"".join(parts)


@pytest.mark.parametrize("float32", [True, False])
def test_a_state_comes_back_as_it_was_saved(float32):
    state = _state(float32)
    assert _text(loads(dumps(state))) == _text(state)


def test_a_state_of_float32_values_takes_half_the_bytes_it_took():
    state = _state()
    assert len(dumps(state)) < 0.6 * len(_previous_release_dumps(state))


@pytest.mark.parametrize("format", [5, 6])
def test_a_state_saved_before_the_stuck_runs_knew_their_rounding_is_outdated(format):
    with pytest.raises(runstream.StateOutdated, match=f"state format {format}, expected {runstream.STATE_FORMAT}"):
        loads(_previous_release_dumps(_state(), format))


@pytest.mark.parametrize("format", [7, 8, 9])
def test_a_state_saved_before_lr_restarts_running_means_or_told_divergences_is_outdated(monkeypatch, format):
    """Format 7 had no warm-restart detector on its LR tags, format 8 took a train loss
    logged as running means as it is, format 9 did not keep where a divergence was first
    told: fed again from the start."""
    monkeypatch.setattr(runstream, "STATE_FORMAT", format)
    saved = dumps(_state())
    monkeypatch.undo()
    with pytest.raises(runstream.StateOutdated, match=f"state format {format}, expected {runstream.STATE_FORMAT}"):
        loads(saved)


def _text(state) -> str:
    """A state as comparable text: every field, arrays value by value, NaN as NaN (equal
    states give equal text)."""
    return json.dumps(runstream._plain(state, lambda a: [a.dtype.str, [repr(x) for x in a.tolist()]]), sort_keys=True)

"""Files written by the real writers (tensorboardX, PyTorch's SummaryWriter in each mode,
TF2-style tensors) read back bit for bit, and their restarts come out as the writers made
them.  The files are made once by tests/fixtures/make_event_fixtures.py."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from app.export import runs_frame
from app.ingest.logdir import read_logdir
from tests.conftest import FIXTURES

CASES = FIXTURES / "events"


def expected(case: str) -> dict:
    return json.loads((CASES / case / "expected.json").read_text())


def bits(value: float, dtype: str) -> str:
    """The value's bits in the writer's own width, as make_event_fixtures.py records them."""
    if dtype == "float32":
        return f"{struct.unpack('<I', struct.pack('<f', value))[0]:08x}"
    if dtype == "float64":
        return f"{struct.unpack('<Q', struct.pack('<d', value))[0]:016x}"
    if dtype == "float16":
        return f"{int(np.float16(value).view(np.uint16)):04x}"
    width = 8 if dtype == "int32" else 16
    return f"{int(value) & ((1 << width * 4) - 1):0{width}x}"


@pytest.mark.parametrize("case", ["tbx_simple", "torch_simple", "torch_new_style", "torch_double", "tf2_tensors", "resume_new_file", "purge_step", "rollback_same_file"])
def test_values_read_back_bit_for_bit_in_write_order(case):
    spec = expected(case)
    inexact = {(e["tag"], e["step"]) for e in spec.get("not_exact_in_float64", [])}
    run = read_logdir(str(CASES / case)).runs["."]
    p = run.points
    want = [(e["tag"], e["step"], e["value_bits"], e["dtype"]) for e in spec["points"]]
    got = [(p.tags[t], int(s), float(v)) for t, s, v in zip(p.tag, p.step, p.value)]
    assert [(t, s) for t, s, _, _ in want] == [(t, s) for t, s, _ in got]
    for (tag, step, want_bits, dtype), (_, _, value) in zip(want, got):
        if (tag, step) in inexact:
            continue  # int64 beyond 2**53 has no exact float64
        assert bits(value, dtype) == want_bits, (tag, step)
    assert run.problems == []


def test_text_histograms_and_rank1_tensors_are_skipped():
    spec = expected("tf2_tensors")
    run = read_logdir(str(CASES / "tf2_tensors")).runs["."]
    present = {run.points.tags[t] for t in set(run.points.tag)}
    assert present.isdisjoint({s["tag"] for s in spec["skipped"]})
    for tag in spec["metadata_only_on_first_event"]:
        assert tag in present


@pytest.mark.parametrize("case", ["resume_new_file", "purge_step", "rollback_same_file"])
def test_rollbacks_and_current_view_match_the_writer(case):
    spec = expected(case)
    run = read_logdir(str(CASES / case)).runs["."]
    assert [(r.from_step, r.to_step, Path(r.source).name, r.purge) for r in run.rollbacks] == [
        (r["from_step"], r["to_step"], r["file"], r["purge"]) for r in spec["rollbacks"]
    ]
    frame = runs_frame([run], current=True)
    for tag, spans in spec["current_view"].items():
        steps = frame.loc[frame.tag == tag, "step"].tolist()
        assert steps == [s for _, lo, hi in spans for s in range(lo, hi + 1)], tag
        segments = frame.loc[frame.tag == tag, "segment"].tolist()
        assert segments == sorted(segments)


def test_logdir_runs_are_named_by_relative_path():
    spec = expected("multi_run_logdir")
    read = read_logdir(str(CASES / "multi_run_logdir"))
    assert set(read.runs) == set(spec["runs"])
    for name, files in spec["runs"].items():
        assert [Path(f).relative_to(CASES / "multi_run_logdir").as_posix() for f in read.runs[name].files] == files
    total = sum(len(r.points) for r in read.runs.values())
    assert total == len(spec["points"])

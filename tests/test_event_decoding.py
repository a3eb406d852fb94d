"""What the decoder makes of Event payloads: both scalar encodings, every numeric dtype,
plugin metadata written once, non-scalars skipped, values bit for bit; checked against
tensorboard's own protobuf classes on random events."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2

from app.ingest.events import read_event_file
from app.ingest.logdir import read_run
from tests.eventfiles import float_tensor, record, scalar_event, session_start, tensor_event, write_events


def read_values(tmp_path, payloads: list[bytes]):
    path = tmp_path / "events.out.tfevents.1"
    write_events(path, payloads)
    read = read_event_file(str(path))
    p = read.points
    return [(p.tags[t], int(s), float(v)) for t, s, v in zip(p.tag, p.step, p.value)], read


@pytest.mark.parametrize(
    "value", [0.0, -0.0, 1e-38, 3.4e38, 3e-4, 2.5, float("inf"), float("-inf")]
)
def test_simple_value_is_float32_exact(tmp_path, value):
    [(tag, step, got)], _ = read_values(tmp_path, [scalar_event(7, "loss", value)])
    assert (tag, step) == ("loss", 7)
    assert struct.pack("<f", got) == struct.pack("<f", value)
    assert math.copysign(1, got) == math.copysign(1, value)


def test_nan_stays_nan(tmp_path):
    [(_, _, got)], _ = read_values(tmp_path, [scalar_event(1, "loss", float("nan"))])
    assert math.isnan(got)


def test_step_zero_and_wall_time_come_through(tmp_path):
    _, read = read_values(tmp_path, [scalar_event(0, "loss", 1.0, wall_time=1234.5)])
    assert list(read.points.step) == [0]
    assert list(read.points.wall_time) == [1234.5]


def test_negative_and_huge_steps(tmp_path):
    rows, _ = read_values(tmp_path, [scalar_event(-3, "a", 1.0), scalar_event(2**62, "a", 2.0)])
    assert [s for _, s, _ in rows] == [-3, 2**62]


def tensor(dtype, **fields) -> tensor_pb2.TensorProto:
    return tensor_pb2.TensorProto(dtype=dtype, **fields)


@pytest.mark.parametrize(
    ("proto", "expected"),
    [
        (float_tensor(0.1), float(np.float32(0.1))),
        (tensor(types_pb2.DT_DOUBLE, tensor_content=struct.pack("<d", 1 / 3)), 1 / 3),
        (tensor(types_pb2.DT_DOUBLE, double_val=[0.1]), 0.1),
        (tensor(types_pb2.DT_FLOAT, float_val=[2.5]), 2.5),
        (tensor(types_pb2.DT_HALF, half_val=[int(np.float16(1.5).view(np.uint16))]), 1.5),
        (tensor(types_pb2.DT_HALF, tensor_content=np.float16(-65504).tobytes()), -65504.0),
        (tensor(types_pb2.DT_BFLOAT16, half_val=[0x3FC0]), 1.5),
        (tensor(types_pb2.DT_INT32, int_val=[-7]), -7.0),
        (tensor(types_pb2.DT_INT32, tensor_content=struct.pack("<i", -9)), -9.0),
        (tensor(types_pb2.DT_INT64, int64_val=[2**40]), float(2**40)),
        (tensor(types_pb2.DT_INT64, tensor_content=struct.pack("<q", -(2**40))), float(-(2**40))),
        (tensor(types_pb2.DT_UINT8, tensor_content=b"\xff"), 255.0),
        (tensor(types_pb2.DT_BOOL, bool_val=[True]), 1.0),
        (tensor(types_pb2.DT_UINT64, uint64_val=[2**63]), float(2**63)),
    ],
    ids=lambda x: str(x).replace("\n", " ")[:40],
)
def test_rank0_tensor_scalars(tmp_path, proto, expected):
    [(_, _, got)], _ = read_values(tmp_path, [tensor_event(3, "t", proto)])
    assert got == expected


def test_shape_of_ones_is_a_scalar_but_two_elements_are_not(tmp_path):
    one = float_tensor(4.0)
    one.tensor_shape.dim.add(size=1)
    two = tensor(types_pb2.DT_FLOAT, float_val=[1.0, 2.0])
    two.tensor_shape.dim.add(size=2)
    rows, read = read_values(tmp_path, [tensor_event(1, "one", one), tensor_event(1, "two", two)])
    assert rows == [("one", 1, 4.0)]
    assert read.problems == []


def test_tensors_without_the_scalars_plugin_are_skipped(tmp_path):
    text = tensor(types_pb2.DT_STRING, string_val=[b"hello"])
    rows, read = read_values(
        tmp_path,
        [
            tensor_event(1, "text", text, plugin="text"),
            tensor_event(1, "unlabelled", float_tensor(1.0), plugin=None),
            tensor_event(1, "hist", float_tensor(1.0), plugin="histograms"),
        ],
    )
    assert rows == [] and read.problems == []


def test_images_histograms_and_audio_are_skipped(tmp_path):
    event = event_pb2.Event(step=1)
    event.summary.value.add(tag="img").image.height = 2
    event.summary.value.add(tag="h").histo.max = 3.0
    event.summary.value.add(tag="a").audio.sample_rate = 8000
    event.summary.value.add(tag="loss", simple_value=0.5)
    rows, read = read_values(tmp_path, [event.SerializeToString()])
    assert rows == [("loss", 1, 0.5)] and read.problems == []


def test_data_class_scalar_counts_as_scalar_plugin(tmp_path):
    event = event_pb2.Event(step=2)
    value = event.summary.value.add(tag="x")
    value.tensor.CopyFrom(float_tensor(0.25))
    value.metadata.data_class = summary_pb2.DATA_CLASS_SCALAR
    rows, _ = read_values(tmp_path, [event.SerializeToString()])
    assert rows == [("x", 2, 0.25)]


def test_tf1_plugin_metadata_on_first_event_applies_to_later_files_and_reads(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write_events(run / "events.out.tfevents.1", [tensor_event(0, "loss", float_tensor(3.0))])
    write_events(run / "events.out.tfevents.2", [tensor_event(1, "loss", float_tensor(2.0), plugin=None)])
    first = read_run("run", [str(run / "events.out.tfevents.1"), str(run / "events.out.tfevents.2")])
    assert list(first.points.value) == [3.0, 2.0]
    assert first.state.plugins == {"loss": "scalars"}
    offsets = {path: progress.offset for path, progress in first.files.items()}
    with open(run / "events.out.tfevents.2", "ab") as f:
        f.write(record(tensor_event(2, "loss", float_tensor(1.0), plugin=None)))
    later = read_run("run", sorted(offsets), offsets, first.state)
    assert list(later.points.step) == [2] and list(later.points.value) == [1.0]


def test_session_start_is_returned_with_its_position(tmp_path):
    _, read = read_values(tmp_path, [scalar_event(1, "l", 1.0), session_start(1), scalar_event(1, "l", 2.0)])
    [start] = read.starts
    assert (start.index, start.step) == (1, 1)


def test_a_record_failing_midway_adds_none_of_its_values(tmp_path):
    event = event_pb2.Event(step=5)
    event.summary.value.add(tag="good", simple_value=1.0)
    payload = event.SerializeToString() + b"\x2a\x05\x0a"  # a summary field cut short
    rows, read = read_values(tmp_path, [payload, scalar_event(6, "good", 2.0)])
    assert rows == [("good", 6, 2.0)]
    assert len(read.problems) == 1


# -- differential check against tensorboard's protobuf classes ----------------------------

finite32 = st.floats(width=32, allow_nan=False)
tags = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
value_kinds = st.one_of(
    st.tuples(st.just("simple"), tags, finite32),
    st.tuples(st.just("float_tensor"), tags, finite32),
    st.tuples(st.just("double_tensor"), tags, st.floats(allow_nan=False)),
    st.tuples(st.just("int64_tensor"), tags, st.integers(-(2**53), 2**53)),
    st.tuples(st.just("histogram"), tags, finite32),
)
events = st.lists(
    st.tuples(
        st.integers(-(2**63), 2**63 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        st.lists(value_kinds, max_size=4),
    ),
    max_size=12,
)


def build(step: int, wall: float, values) -> tuple[bytes, list[tuple[str, int, float]]]:
    event = event_pb2.Event(step=step, wall_time=wall)
    expected = []
    for kind, tag, x in values:
        v = event.summary.value.add(tag=tag)
        if kind == "simple":
            v.simple_value = x
        elif kind == "histogram":
            v.histo.max = x
            continue
        else:
            v.metadata.plugin_data.plugin_name = "scalars"
            if kind == "float_tensor":
                v.tensor.CopyFrom(float_tensor(x))
            elif kind == "double_tensor":
                v.tensor.CopyFrom(tensor(types_pb2.DT_DOUBLE, double_val=[x]))
            else:
                v.tensor.CopyFrom(tensor(types_pb2.DT_INT64, int64_val=[x]))
        expected.append((tag, step, float(np.float32(x)) if kind in ("simple", "float_tensor") else float(x)))
    return event.SerializeToString(), expected


@settings(max_examples=150, deadline=None)
@given(events)
def test_decoder_agrees_with_protobuf(tmp_path_factory, generated):
    payloads, expected = [], []
    for step, wall, values in generated:
        payload, rows = build(step, wall, values)
        payloads.append(payload)
        expected.extend(rows)
    path = tmp_path_factory.mktemp("prop") / "events.out.tfevents.1"
    write_events(path, payloads)
    read = read_event_file(str(path))
    p = read.points
    assert [(p.tags[t], int(s), float(v)) for t, s, v in zip(p.tag, p.step, p.value)] == expected
    assert read.problems == []


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_payloads_never_crash_and_agree_when_valid(tmp_path_factory, payload):
    path = tmp_path_factory.mktemp("fuzz") / "events.out.tfevents.1"
    write_events(path, [payload, scalar_event(1, "after", 1.0)])
    read = read_event_file(str(path))
    assert read.points.tags[read.points.tag[-1]] == "after"  # the record after is always read
    if read.problems:
        assert read.problems[0].reason == "payload is not a valid Event protobuf; record skipped"

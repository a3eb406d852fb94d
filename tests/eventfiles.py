"""Building event files byte by byte for tests: real Event protos from tensorboard, framed
as TFRecords, so a test can place a corruption exactly where it wants."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2


def masked_crc(data: bytes) -> int:
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def record(payload: bytes) -> bytes:
    header = struct.pack("<Q", len(payload))
    return header + struct.pack("<I", masked_crc(header)) + payload + struct.pack("<I", masked_crc(payload))


def scalar_event(step: int, tag: str, value: float, wall_time: float = 1.7e9) -> bytes:
    event = event_pb2.Event(step=step, wall_time=wall_time)
    event.summary.value.add(tag=tag, simple_value=value)
    return event.SerializeToString()


def tensor_event(step: int, tag: str, tensor: tensor_pb2.TensorProto, plugin: str | None = "scalars") -> bytes:
    event = event_pb2.Event(step=step, wall_time=1.7e9)
    value = event.summary.value.add(tag=tag)
    value.tensor.CopyFrom(tensor)
    if plugin:
        value.metadata.plugin_data.plugin_name = plugin
    return event.SerializeToString()


def float_tensor(x: float) -> tensor_pb2.TensorProto:
    return tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_content=struct.pack("<f", x))


def session_start(step: int) -> bytes:
    event = event_pb2.Event(step=step, wall_time=1.7e9)
    event.session_log.status = event_pb2.SessionLog.START
    return event.SerializeToString()


def file_version() -> bytes:
    return event_pb2.Event(wall_time=1.7e9, file_version="brain.Event:2").SerializeToString()


def write_events(path: Path, payloads: list[bytes]) -> list[int]:
    """Write records; returns the byte offset of each record."""
    offsets, data = [], b""
    for payload in payloads:
        offsets.append(len(data))
        data += record(payload)
    path.write_bytes(data)
    return offsets


def loss_events(steps: range, tag: str = "train/loss") -> list[bytes]:
    return [scalar_event(s, tag, 1.0 / (s + 1)) for s in steps]


__all__ = ["summary_pb2", "types_pb2", "tensor_pb2"]

"""The TFRecord framing under damage: every way a file can be cut, flipped or garbled ends
in a precise Problem (or a clean retry point), never a traceback, and good data around
the damage is kept."""

from __future__ import annotations

import struct

import pytest

from app.ingest.events import MAX_RECORD_BYTES, ReadEnd, read_event_file
from app.ingest.problems import IngestError
from tests.eventfiles import file_version, loss_events, record, write_events


@pytest.fixture
def ten(tmp_path, crc_mode):
    path = tmp_path / "events.out.tfevents.1"
    offsets = write_events(path, [file_version(), *loss_events(range(10))])
    return path, offsets


def test_clean_file_reads_every_point(ten):
    path, offsets = ten
    read = read_event_file(str(path))
    assert list(read.points.step) == list(range(10))
    assert read.end is ReadEnd.COMPLETE
    assert read.end_offset == path.stat().st_size
    assert read.problems == []


def test_empty_file_is_complete_with_no_points(tmp_path):
    path = tmp_path / "events.out.tfevents.0"
    path.write_bytes(b"")
    read = read_event_file(str(path))
    assert (len(read.points), read.end, read.end_offset, read.problems) == (0, ReadEnd.COMPLETE, 0, [])


@pytest.mark.parametrize("cut", [1, 5, 11, 12, 13, 20])
def test_truncated_tail_is_not_an_error_and_is_picked_up_later(ten, cut):
    path, offsets = ten
    full = path.read_bytes()
    last = offsets[-1]
    path.write_bytes(full[: last + cut])
    first = read_event_file(str(path))
    assert first.end is ReadEnd.TRUNCATED
    assert first.end_offset == last
    assert list(first.points.step) == list(range(9))
    assert first.problems == []
    path.write_bytes(full)  # the writer finishes its flush
    second = read_event_file(str(path), first.end_offset)
    assert list(second.points.step) == [9]
    assert second.end is ReadEnd.COMPLETE


def test_flipped_payload_byte_skips_only_that_record(ten):
    path, offsets = ten
    data = bytearray(path.read_bytes())
    data[offsets[4] + 14] ^= 0xFF  # inside record 4's payload (step 3)
    path.write_bytes(bytes(data))
    read = read_event_file(str(path))
    assert list(read.points.step) == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    assert read.end is ReadEnd.COMPLETE
    [problem] = read.problems
    assert problem.offset == offsets[4]
    assert problem.reason.startswith("payload CRC mismatch (stored 0x")
    assert problem.reason.endswith("); record skipped")


def test_flipped_payload_crc_byte_skips_only_that_record(ten):
    path, offsets = ten
    data = bytearray(path.read_bytes())
    data[offsets[5] - 1] ^= 0x01  # last byte of record 4's payload CRC
    path.write_bytes(bytes(data))
    read = read_event_file(str(path))
    assert 3 not in read.points.step and len(read.points) == 9
    assert [p.offset for p in read.problems] == [offsets[4]]


def test_flipped_length_byte_ends_the_file_there(ten):
    path, offsets = ten
    data = bytearray(path.read_bytes())
    data[offsets[6]] ^= 0x04
    path.write_bytes(bytes(data))
    read = read_event_file(str(path))
    assert list(read.points.step) == [0, 1, 2, 3, 4]
    assert read.end is ReadEnd.CORRUPT
    assert read.end_offset == offsets[6]
    [problem] = read.problems
    assert problem.offset == offsets[6]
    assert problem.reason.startswith("record length CRC mismatch")
    assert problem.reason.endswith("the rest of the file cannot be framed")


def test_huge_declared_length_with_valid_crc_ends_the_file(tmp_path):
    path = tmp_path / "events.out.tfevents.1"
    good = record(loss_events(range(1))[0])
    header = struct.pack("<Q", 1 << 40)
    from tests.eventfiles import masked_crc

    path.write_bytes(good + header + struct.pack("<I", masked_crc(header)) + b"x" * 100)
    read = read_event_file(str(path))
    assert list(read.points.step) == [0]
    assert read.end is ReadEnd.CORRUPT
    assert str(read.problems[0]) == (
        f"{path}: byte {len(good)}: declared record length 1099511627776 exceeds the "
        f"{MAX_RECORD_BYTES}-byte limit; the rest of the file cannot be framed"
    )


def test_garbage_file_is_reported_not_raised(tmp_path):
    path = tmp_path / "events.out.tfevents.garbage"
    path.write_bytes(b"this is not a tfrecord file at all, just text\n" * 3)
    read = read_event_file(str(path))
    assert len(read.points) == 0
    assert read.end is ReadEnd.CORRUPT
    assert read.problems[0].offset == 0


def test_valid_frame_around_a_non_event_payload_is_skipped(tmp_path):
    path = tmp_path / "events.out.tfevents.1"
    events = loss_events(range(3))
    offsets = write_events(path, [events[0], b"\x0a\xff\xff\xff\xff\x0f", events[2]])  # absurd length
    read = read_event_file(str(path))
    assert list(read.points.step) == [0, 2]
    assert str(read.problems[0]) == (
        f"{path}: byte {offsets[1]}: payload is not a valid Event protobuf; record skipped"
    )


def test_incremental_read_returns_only_new_points(ten):
    path, offsets = ten
    first = read_event_file(str(path))
    with open(path, "ab") as f:
        for payload in loss_events(range(10, 15)):
            f.write(record(payload))
    second = read_event_file(str(path), first.end_offset)
    assert list(second.points.step) == [10, 11, 12, 13, 14]
    assert second.start_offset == first.end_offset


def test_small_chunks_give_the_same_points(ten):
    path, _ = ten
    whole = read_event_file(str(path))
    chunked = read_event_file(str(path), chunk_bytes=7)
    assert list(chunked.points.step) == list(whole.points.step)
    assert chunked.end_offset == whole.end_offset


def test_missing_file_raises_ingest_error_with_path(tmp_path):
    with pytest.raises(IngestError) as e:
        read_event_file(str(tmp_path / "events.out.tfevents.none"))
    assert str(e.value) == f"{tmp_path / 'events.out.tfevents.none'}: byte 0: cannot read event file: No such file or directory"

"""Reading one TensorBoard event file, from a byte offset, into points.

The compiled decoder does the per-record work; this module owns the file: it reads in
chunks (a multi-GB file never sits in memory whole), resumes from a saved offset, turns
the decoder's findings into `Problem`s and says how the read ended.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import crc32c
import numpy as np

from app.ingest import _tfrecord
from app.ingest.crc import enable_native_crc
from app.ingest.points import Points
from app.ingest.problems import IngestError, Problem
from app.ingest.restarts import SessionStart

CHUNK_BYTES = 16 << 20  # bounds memory on multi-GB files; larger chunks gain nothing
MAX_RECORD_BYTES = 256 << 20  # larger than any real event (graphs included): a corrupt length

enable_native_crc()


class ReadEnd(enum.Enum):
    """How a read of a file ended: each calls for something different next time."""

    COMPLETE = "complete"  # every byte read: read again from `end_offset` when it grows
    TRUNCATED = "truncated"  # the last record is incomplete (a writer mid-flush): retry later
    CORRUPT = "corrupt"  # the framing broke at `end_offset`: nothing past it can be read


_ENDS = {_tfrecord.END: ReadEnd.COMPLETE, _tfrecord.TRUNCATED: ReadEnd.TRUNCATED, _tfrecord.CORRUPT: ReadEnd.CORRUPT}


@dataclass(frozen=True, eq=False)
class EventFileRead:
    """What one read of one event file yielded, and where the next read starts."""

    path: str
    points: Points
    starts: list[SessionStart]  # indices relative to `points`
    start_offset: int
    end_offset: int  # just after the last complete record: save it with the points
    end: ReadEnd
    problems: list[Problem]


def read_event_file(
    path: str,
    offset: int = 0,
    tags: _tfrecord.TagTable | None = None,
    chunk_bytes: int = CHUNK_BYTES,
) -> EventFileRead:
    """Read the complete records of `path` from `offset` on.

    `tags` is the run's tag table: pass the same one for every file of a run, so that
    plugin metadata written once (TF1 style) applies to later files, and tag ids agree.
    Raises IngestError if the file cannot be opened or read.
    """
    decoder = _Decoder(path, offset, tags)
    try:
        with open(path, "rb") as f:
            decoder.reserve(max(0, _size(f) - offset))
            size = chunk_bytes
            while True:
                f.seek(decoder.pos)
                data = f.read(size)
                consumed = decoder.feed(data)
                if decoder.status == _tfrecord.CORRUPT or len(data) < size:
                    break
                if consumed == 0:  # one record larger than the chunk
                    size *= 2
    except OSError as e:
        raise IngestError(Problem(path, f"cannot read event file: {e.strerror or e}", offset=decoder.pos)) from e
    return decoder.result()


def decode_event_bytes(data: bytes, offset: int, name: str, tags: _tfrecord.TagTable | None = None) -> EventFileRead:
    """The complete records of `data`, which are the bytes of event file `name` from byte
    `offset` on (a chunk posted to the service)."""
    decoder = _Decoder(name, offset, tags)
    decoder.reserve(len(data))
    decoder.feed(data)
    return decoder.result()


class _Decoder:
    """Feeds consecutive byte ranges of one file to the compiled decoder."""

    def __init__(self, path: str, offset: int, tags: _tfrecord.TagTable | None) -> None:
        self.path, self.start, self.pos = path, offset, offset
        self.tags = tags if tags is not None else _tfrecord.TagTable()
        self.problems: list[tuple[int, str]] = []
        self.starts: list[tuple[int, int, float]] = []
        self.status = _tfrecord.END
        self.columns = _tfrecord.Columns(1024)

    def reserve(self, size: int) -> None:
        self.columns = _tfrecord.Columns(size // 48)  # tensorboardX writes ~52 bytes a scalar

    def feed(self, data: bytes) -> int:
        consumed, self.status = _tfrecord.decode(
            data, self.pos, crc32c.crc32c, self.tags, self.columns, self.starts, self.problems, MAX_RECORD_BYTES
        )
        self.pos += consumed
        return consumed

    def result(self) -> EventFileRead:
        return EventFileRead(
            path=self.path,
            points=_points(self.columns, self.tags),
            starts=[SessionStart(i, s, w, self.path) for i, s, w in self.starts],
            start_offset=self.start,
            end_offset=self.pos,
            end=_ENDS[self.status],
            problems=[Problem(self.path, reason, offset=at) for at, reason in self.problems],
        )


def _size(f) -> int:
    f.seek(0, 2)
    return f.tell()


def _points(columns: _tfrecord.Columns, tags: _tfrecord.TagTable) -> Points:
    tag, step, wall_time, value = (np.array(a) for a in columns.arrays())
    for index, kind in columns.fixups:
        bits = np.array([int(value[index])], np.uint16)
        if kind == _tfrecord.FIX_HALF:
            value[index] = bits.view(np.float16)[0]
        else:
            value[index] = (bits.astype(np.uint32) << 16).view(np.float32)[0]
    return Points(tuple(tags.names), tag, step, wall_time, value)

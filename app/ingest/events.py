"""Reading one TensorBoard event file, from a byte offset, into points.

The compiled decoder does the per-record work; this module owns the file: it reads in
chunks (a multi-GB file never sits in memory whole), resumes from a saved offset, turns
the decoder's findings into `Problem`s and says how the read ended.  A read covers the file
as it was when opened (what is appended meanwhile is read next time), through
`app.ingest.files` (regular files only, never blocking, bounded in time).

A file rewritten under the same name (truncated, or replaced by another file) must not be
read on from the old offset: each read returns a fingerprint of the file's first bytes
(`head`), and a later read given it checks the file still starts that way and is at least
as long as the offset, else reads nothing and says the file was rewritten.  Copies that
keep the bytes (rsync, a `cp` of the same file) keep the fingerprint and are read on.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import crc32c
import numpy as np

from app.ingest import _tfrecord
from app.ingest.crc import enable_native_crc
from app.ingest.files import READ_TIMEOUT, ReadTimeout, SafeFile, timed_out
from app.ingest.points import Points
from app.ingest.problems import IngestError, Problem
from app.ingest.restarts import SessionStart

CHUNK_BYTES = 16 << 20  # bounds memory on multi-GB files; larger chunks gain nothing
STREAM_CHUNK_BYTES = 4 << 20  # a streamed read's batch: about 80k points
MAX_RECORD_BYTES = 256 << 20  # larger than any real event (graphs included): a corrupt length
HEAD_BYTES = 4096  # the fingerprint covers this much of a file's start (or what was read of it)

enable_native_crc()


class ReadEnd(enum.Enum):
    """How a read of a file ended: each calls for something different next time."""

    COMPLETE = "complete"  # every byte read: read again from `end_offset` when it grows
    TRUNCATED = "truncated"  # the last record is incomplete (a writer mid-flush): retry later
    CORRUPT = "corrupt"  # the framing broke at `end_offset`: nothing past it can be read
    TIMED_OUT = "timed_out"  # a read did not answer in time: read on from `end_offset` next time


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
    size: int = -1  # the file's size when opened (-1: not read from a file)
    head: str | None = None  # fingerprint of the file's first min(HEAD_BYTES, end_offset) bytes
    rewritten: str | None = None  # why the file no longer is what was read of it (nothing read then)


def read_event_file(
    path: str,
    offset: int = 0,
    tags: _tfrecord.TagTable | None = None,
    chunk_bytes: int = CHUNK_BYTES,
    *,
    head: str | None = None,
    roots: Sequence[str] | None = None,
    timeout: float = READ_TIMEOUT,
) -> EventFileRead:
    """Read the complete records of `path` from `offset` on.

    `tags` is the run's tag table: pass the same one for every file of a run, so that
    plugin metadata written once (TF1 style) applies to later files, and tag ids agree.
    `head` is the fingerprint the read that reached `offset` returned: when the file no
    longer matches it, nothing is read and `rewritten` says why.  `roots` and `timeout`:
    see `app.ingest.files.SafeFile`.  A read that times out after the file was opened keeps
    what it decoded (end TIMED_OUT, with a problem).  Raises IngestError if the file cannot
    be opened (or is not a regular file, or is outside `roots`) or times out before any read.
    """
    decoder = EventDecoder(path, offset, tags)
    try:
        with SafeFile(path, roots, timeout, start_bytes=HEAD_BYTES, at=offset) as f:
            start = f.start
            why = _rewritten(f.size, start, offset, head)
            if why:
                return decoder.result(size=f.size, rewritten=why)
            decoder.reserve(max(0, f.size - offset))
            try:
                for _ in _decode(f, decoder, chunk_bytes):
                    pass
            except ReadTimeout:
                decoder.problems.append((decoder.pos, timed_out(timeout)))
                return decoder.result(size=f.size, head=_fingerprint(start, decoder.pos), end=ReadEnd.TIMED_OUT)
    except ReadTimeout as e:
        raise IngestError(Problem(path, timed_out(timeout), offset=offset)) from e
    return decoder.result(size=f.size, head=_fingerprint(start, decoder.pos))


def stream_event_file(
    path: str, tags: _tfrecord.TagTable, chunk_bytes: int = STREAM_CHUNK_BYTES, *, timeout: float = READ_TIMEOUT
) -> Iterator[EventFileRead]:
    """The records of `path` as a sequence of reads of about `chunk_bytes` each, so that a
    multi-GB file is analysed holding one chunk's points, never the file's.  Each read's
    points (and `starts`) are the chunk's alone; its problems are the chunk's.  Raises
    IngestError as `read_event_file` does."""
    decoder = EventDecoder(path, 0, tags)
    try:
        with SafeFile(path, None, timeout, start_bytes=HEAD_BYTES, at=0) as f:
            decoder.reserve(min(f.size, chunk_bytes))
            try:
                for _ in _decode(f, decoder, chunk_bytes):
                    yield decoder.take(f.size)
            except ReadTimeout:
                decoder.problems.append((decoder.pos, timed_out(timeout)))
                yield decoder.take(f.size, ReadEnd.TIMED_OUT)
                return
            yield decoder.take(f.size)  # how the read ended (nothing left to decode)
    except ReadTimeout as e:
        raise IngestError(Problem(path, timed_out(timeout))) from e


def _decode(f: SafeFile, decoder: EventDecoder, chunk_bytes: int) -> Iterator[None]:
    """Feed the file to the decoder in chunks, up to its size when opened, pausing after
    each chunk."""
    size = chunk_bytes
    while decoder.pos < f.size:
        data = f.pread(min(size, f.size - decoder.pos), decoder.pos)
        consumed = decoder.feed(data)
        yield
        if decoder.status == _tfrecord.CORRUPT or len(data) < size:
            break  # the end of the file as opened (or it shrank meanwhile)
        if consumed == 0:  # one record larger than the chunk
            size *= 2


def _rewritten(size: int, start: bytes, offset: int, head: str | None) -> str | None:
    if offset and size < offset:
        return f"now {size} bytes long, shorter than the {offset} bytes read before"
    if offset and head is not None and _fingerprint(start, offset) != head:
        return "its first bytes changed"
    return None


def _fingerprint(start: bytes, read_up_to: int) -> str:
    return hashlib.blake2b(start[: min(HEAD_BYTES, read_up_to)], digest_size=16).hexdigest()


def decode_event_bytes(data: bytes, offset: int, name: str, tags: _tfrecord.TagTable | None = None) -> EventFileRead:
    """The complete records of `data`, which are the bytes of event file `name` from byte
    `offset` on (a chunk posted to the service)."""
    decoder = EventDecoder(name, offset, tags)
    decoder.reserve(len(data))
    decoder.feed(data)
    return decoder.result()


class EventDecoder:
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

    def take(self, size: int, end: ReadEnd | None = None) -> EventFileRead:
        """What was decoded since the last `take`; the decoder then holds no points."""
        read = self.result(size=size, end=end)
        self.start, self.problems, self.starts = self.pos, [], []
        self.columns = _tfrecord.Columns(max(1024, len(read.points)))
        return read

    def result(
        self, size: int = -1, head: str | None = None, rewritten: str | None = None, end: ReadEnd | None = None
    ) -> EventFileRead:
        return EventFileRead(
            path=self.path,
            points=_points(self.columns, self.tags),
            starts=[SessionStart(i, s, w, self.path) for i, s, w in self.starts],
            start_offset=self.start,
            end_offset=self.pos,
            end=end or _ENDS[self.status],
            problems=[Problem(self.path, reason, offset=at) for at, reason in self.problems],
            size=size,
            head=head,
            rewritten=rewritten,
        )


def _points(columns: _tfrecord.Columns, tags: _tfrecord.TagTable) -> Points:
    tag, step, wall_time, value = (np.array(a) for a in columns.arrays())
    for index, kind in columns.fixups:
        bits = np.array([int(value[index])], np.uint16)
        if kind == _tfrecord.FIX_HALF:
            value[index] = bits.view(np.float16)[0]
        else:
            value[index] = (bits.astype(np.uint32) << 16).view(np.float32)[0]
    return Points(tuple(tags.names), tag, step, wall_time, value)

"""A path read as a stream of bounded batches, for `analyze` and `export`: memory follows
the batch, never the run.  Event files are read by chunk of records, NDJSON by line, CSV by
row and a large JSON list item by item (`app.ingest.textlogs.stream_text_log`); every batch
is split into segments as it comes (`app.ingest.restarts.assign_segments` carries its state
from one batch to the next), so a batch says which rollbacks its points bring.

Each source can be read again from its start: a consumer that must go back (the streaming
analysis replays from a saved state when a rollback rewrites steps it has passed) calls its
`batches` again, and gets the same batches.  Objects in storage (a URL) are read whole, as
`app.ingest.sources.read_path` reads them, one batch per run.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.ingest import _tfrecord
from app.ingest.discover import RECOGNISED, TENSORBOARD, TRAINER_STATE, Source, discover_local
from app.ingest.events import STREAM_CHUNK_BYTES, stream_event_file
from app.ingest.files import READ_TIMEOUT, ReadTimeout, SafeFile, SafeStream, timed_out
from app.ingest.logdir import Run, is_event_file
from app.ingest.points import Points
from app.ingest.problems import IngestError, Problem
from app.ingest.remote import is_url
from app.ingest.restarts import Rollback, SegmentState, SessionStart, assign_segments
from app.ingest.sources import check_file, read_path, run_name_for_file, text_run_names
from app.ingest.textlogs import BATCH_POINTS, WHOLE_DOCUMENT_BYTES, stream_text_log


@dataclass(frozen=True, eq=False)
class Batch:
    """New points of one run, with their segments and the rollbacks among them."""

    run: str  # the run as read: `StreamSource.name` gives the name it is reported under
    points: Points  # `tags`: the run's tags read so far, numbered as in its earlier batches
    segment: np.ndarray
    rollbacks: tuple[Rollback, ...]
    problems: list[Problem]


@dataclass(frozen=True, eq=False)
class StreamSource:
    """One source of runs: its batches (read again from the start at each call) and how
    its runs are named once all are known (a text log with several runs names them below
    its own name)."""

    recognised: str
    batches: Callable[[], Iterator[Batch]]
    name: Callable[[str, list[str]], str] = lambda run, _runs: run
    names_need_all: bool = False  # `name` depends on the other runs read


@dataclass(frozen=True, eq=False)
class StreamedPath:
    sources: list[StreamSource]
    problems: list[Problem]  # found before any batch: unreadable directories, candidates


@dataclass(frozen=True)
class Limits:
    """How big a batch is: tests make them small to cut runs in many places."""

    event_bytes: int = STREAM_CHUNK_BYTES
    text_points: int = BATCH_POINTS
    whole_json_bytes: int = WHOLE_DOCUMENT_BYTES


def stream_path(path: str, limits: Limits = Limits()) -> StreamedPath:
    """The sources under `path`, as `read_path` finds them.  Raises IngestError if `path`
    does not exist or cannot be listed."""
    if is_url(path):
        read = read_path(path)
        return StreamedPath([_whole(run, read.recognised.get(name, "")) for name, run in read.runs.items()], read.problems)
    if os.path.isdir(path):
        found = discover_local(path)
        return StreamedPath([_source(s, limits) for s in found.sources], list(found.problems))
    check_file(path)
    if is_event_file(os.path.basename(path)):
        name = Path(path).resolve().parent.name or "."
        return StreamedPath([StreamSource(RECOGNISED[TENSORBOARD] + " (1 file)", lambda: _event_batches(name, [path], limits))], [])
    run = run_name_for_file(path)
    return StreamedPath([StreamSource("JSON/CSV log given by name", lambda: _text_batches(path, run, limits))], [])


def _source(source: Source, limits: Limits) -> StreamSource:
    files = len(source.files)
    what = f"{RECOGNISED[source.kind]} ({files} file{'' if files == 1 else 's'})"
    if source.kind == TENSORBOARD:
        return StreamSource(what, lambda: _event_batches(source.name, list(source.files), limits))
    return StreamSource(
        what,
        lambda: _text_batches(source.files[0], source.name, limits, source.kind),
        lambda run, runs: text_run_names(source.name, runs)[run],
        names_need_all=True,
    )


def _event_batches(name: str, files: list[str], limits: Limits) -> Iterator[Batch]:
    """A run's event files in order, a chunk of records at a time; a file that cannot be
    read is reported and skipped, as `read_run` does."""
    tags, segments = _tfrecord.TagTable(), SegmentState()
    for path in files:
        try:
            for read in stream_event_file(path, tags, limits.event_bytes):
                batch, segments = _segmented(name, read.points, path, read.starts, segments, read.problems)
                yield batch
        except IngestError as e:
            yield Batch(name, Points.empty(tuple(tags.names)), np.zeros(0, np.int32), (), e.problems)


def _text_batches(path: str, run: str, limits: Limits, kind: str | None = None) -> Iterator[Batch]:
    """A JSON/CSV log's runs, a batch of points at a time.  A log found by a walk (of
    `kind`) that yields no point says so (it was taken for a log by its name or first bytes)."""
    fmt = "trainer_state" if kind == TRAINER_STATE else None
    segments: dict[str, SegmentState] = {}
    try:
        with SafeFile(path, noun="file") as safe, io.BufferedReader(SafeStream(safe), 1 << 20) as f:
            for read in stream_text_log(f, safe.size, source=path, run=run, fmt=fmt,
                                        batch_points=limits.text_points, whole_bytes=limits.whole_json_bytes):
                problems = read.problems
                for name, points in read.runs.items():
                    batch, segments[name] = _segmented(name, points, path, (), segments.get(name, SegmentState()), problems)
                    problems = []
                    yield batch
                if problems:
                    yield Batch(run, Points.empty(), np.zeros(0, np.int32), (), problems)
    except ReadTimeout:
        yield Batch(run, Points.empty(), np.zeros(0, np.int32), (), [Problem(path, timed_out(READ_TIMEOUT))])
    except IngestError as e:
        yield Batch(run, Points.empty(), np.zeros(0, np.int32), (), e.problems)
    else:
        if kind and not segments:
            yield Batch(run, Points.empty(), np.zeros(0, np.int32), (),
                        [Problem(path, f"recognised as a {RECOGNISED[kind]} but no point could be read from it")])


def _segmented(
    run: str, points: Points, path: str, starts: list[SessionStart] | tuple, state: SegmentState, problems: list[Problem]
) -> tuple[Batch, SegmentState]:
    segment, rollbacks, state = assign_segments(points, [(0, path)], starts, state)
    return Batch(run, points, segment, tuple(rollbacks), problems), state


def _whole(run: Run, recognised: str) -> StreamSource:
    def batches() -> Iterator[Batch]:
        yield Batch(run.name, run.points, run.segment, run.rollbacks, [])  # its problems are the read's

    return StreamSource(recognised, batches)

"""Finding the runs of a TensorBoard logdir and reading them, incrementally.

A run is a directory holding `events.out.tfevents.*` files, named by its path relative to
the logdir ("." for the logdir itself), as TensorBoard names them; the commands walk with
`app.ingest.discover` instead, which finds other sources too and names "." by its folder.
Its files are read in name order, each from its own saved byte offset: every file is
polled every time, because a writer may still be appending to an older file after a newer
one appeared.

A file rewritten under the same name (see `app.ingest.events`) makes the whole run be read
again from the start, with fresh restart state: the run's points are replaced by what its
files hold now, as TensorBoard shows a reloaded run.  Per-file replacement is not possible
(stored points do not say which file they came from) and not wanted (the segments of the
other files depend on the order of everything before them).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from app.ingest import _tfrecord
from app.ingest.events import EventFileRead, ReadEnd, read_event_file
from app.ingest.files import READ_TIMEOUT
from app.ingest.points import Points
from app.ingest.problems import IngestError, Problem
from app.ingest.restarts import Rollback, SegmentState, SessionStart, assign_segments

FileReader = Callable[[str, int, _tfrecord.TagTable, "str | None"], EventFileRead]


@dataclass(frozen=True)
class FileProgress:
    """How far one event file has been read; saved with the points it yielded."""

    offset: int
    end: ReadEnd
    size: int = -1  # the file's size when read (-1: unknown, read it again next time)
    head: str | None = None  # fingerprint of its first bytes: see app.ingest.events


@dataclass(frozen=True)
class RunState:
    """What reading a run must remember between incremental reads, beside file offsets."""

    segments: SegmentState = field(default_factory=SegmentState)
    plugins: dict[str, str] = field(default_factory=dict)  # TF1 writers name it once per tag


@dataclass(frozen=True, eq=False)
class Run:
    """The points one read of a run yielded, with their segments and the rollbacks found."""

    name: str
    points: Points
    segment: np.ndarray  # int32, one per point
    rollbacks: tuple[Rollback, ...]
    state: RunState  # pass back in to continue on the next read
    files: dict[str, FileProgress]
    problems: list[Problem] = field(default_factory=list)
    rewritten: tuple[str, ...] = ()  # a file found rewritten: the run was read again from the start


@dataclass(frozen=True, eq=False)
class LogdirRead:
    runs: dict[str, Run]
    problems: list[Problem]  # unreadable directories; each run's own are in Run.problems


def is_event_file(name: str) -> bool:
    """TensorBoard's own test: any file whose name contains 'tfevents'."""
    return "tfevents" in name


def find_runs(logdir: str) -> tuple[dict[str, list[str]], list[Problem]]:
    """Runs under `logdir` (name -> event files in name order) and the directories that
    could not be listed."""
    problems: list[Problem] = []

    def unreadable(err: OSError) -> None:
        problems.append(Problem(err.filename or logdir, f"cannot list directory: {err.strerror or err}"))

    if not os.path.isdir(logdir):
        raise IngestError(Problem(logdir, "no such directory"))
    runs: dict[str, list[str]] = {}
    for directory, subdirs, files in os.walk(logdir, onerror=unreadable):
        subdirs.sort()
        events = sorted(f for f in files if is_event_file(f))
        if events:
            name = os.path.relpath(directory, logdir)
            runs[name] = [os.path.join(directory, f) for f in events]
    return runs, problems


def read_run(
    name: str,
    files: list[str],
    offsets: Mapping[str, int] | None = None,
    state: RunState | None = None,
    *,
    heads: Mapping[str, str | None] | None = None,
    roots: Sequence[str] | None = None,
    timeout: float = READ_TIMEOUT,
    reader: FileReader | None = None,
) -> Run:
    """Read what is new in each of a run's files and split it into segments.

    `heads` are the files' fingerprints from the reads that reached `offsets`: a file that
    no longer matches (rewritten) makes the whole run be read again from the start, and
    `Run.rewritten` names it.  `roots` and `timeout`: see `app.ingest.files.SafeFile`.
    `reader(path, offset, tags, head)` reads one file (default: a local file; objects in
    storage: `app.ingest.remote`).  A file that cannot be read is reported and skipped;
    the run's other files still are.
    """
    offsets, heads, state = offsets or {}, heads or {}, state or RunState()
    if reader is None:
        def reader(path: str, offset: int, tags: _tfrecord.TagTable, head: str | None) -> EventFileRead:
            return read_event_file(path, offset, tags, head=head, roots=roots, timeout=timeout)
    tags = _tfrecord.TagTable(state.plugins)
    reads, problems, rewritten = _read_files(files, offsets, heads, tags, reader)
    if rewritten:
        path, why = rewritten
        state, tags = RunState(), _tfrecord.TagTable()
        reads, problems, _ = _read_files(files, {}, {}, tags, reader)
        problems.insert(0, Problem(path, f"rewritten since it was last read ({why}): the run is read again from the start"))
    parts, sources, starts = [], [], []
    first = 0
    for read in reads:
        parts.append(read.points)
        sources.append((first, read.path))
        starts.extend(SessionStart(first + s.index, s.step, s.wall_time, s.source) for s in read.starts)
        first += len(read.points)
        problems.extend(read.problems)
    points = _join(parts, tuple(tags.names))
    segment, rollbacks, segments = assign_segments(points, sources, starts, state.segments)
    return Run(
        name=name,
        points=points,
        segment=segment,
        rollbacks=tuple(rollbacks),
        state=RunState(segments, tags.known_plugins()),
        files={r.path: FileProgress(r.end_offset, r.end, _size_to_keep(r), r.head) for r in reads},
        problems=problems,
        rewritten=(rewritten[0],) if rewritten else (),
    )


def _read_files(
    files: list[str],
    offsets: Mapping[str, int],
    heads: Mapping[str, str | None],
    tags: _tfrecord.TagTable,
    reader: FileReader,
) -> tuple[list[EventFileRead], list[Problem], tuple[str, str] | None]:
    """Each file's new records; stops at the first file found rewritten, returning it and why."""
    reads: list[EventFileRead] = []
    problems: list[Problem] = []
    for path in files:
        try:
            read = reader(path, offsets.get(path, 0), tags, heads.get(path))
        except IngestError as e:
            problems.extend(e.problems)
            continue
        if read.rewritten:
            return reads, problems, (path, read.rewritten)
        reads.append(read)
    return reads, problems, None


def _size_to_keep(read: EventFileRead) -> int:
    """The size to compare with next time: unknown after a timeout, so the file is read again
    even though it has not grown."""
    return -1 if read.end is ReadEnd.TIMED_OUT else read.size


def read_logdir(
    logdir: str,
    offsets: Mapping[str, int] | None = None,
    states: Mapping[str, RunState] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> LogdirRead:
    """Read every run under `logdir` from the saved offsets (all from 0 when none).

    `progress(done, total)` is called after each run (for a progress display).
    """
    found, problems = find_runs(logdir)
    states = states or {}
    runs = {}
    for name, files in found.items():
        runs[name] = read_run(name, files, offsets, states.get(name))
        if progress:
            progress(len(runs), len(found))
    return LogdirRead(runs=runs, problems=problems)


def _join(parts: list[Points], tags: tuple[str, ...]) -> Points:
    """Points of one run's files share the run's tag table, so they join without re-indexing."""
    if not parts:
        return Points.empty(tags)
    return Points(
        tags=tags,
        tag=np.concatenate([p.tag for p in parts]),
        step=np.concatenate([p.step for p in parts]),
        wall_time=np.concatenate([p.wall_time for p in parts]),
        value=np.concatenate([p.value for p in parts]),
    )

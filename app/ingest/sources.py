"""One entry point for any path a user hands losswatch: a logdir, an event file, or a
JSON/NDJSON/CSV/trainer_state log.  Whatever the format, runs come back in one shape."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.ingest.files import not_regular, read_whole, skipped
from app.ingest.logdir import Run, RunState, is_event_file, read_logdir, read_run
from app.ingest.points import Points
from app.ingest.problems import IngestError, Problem
from app.ingest.restarts import assign_segments
from app.ingest.textlogs import parse_text_log

# Files named like this say nothing about the run: the directory holding them does.
_GENERIC_STEMS = {"trainer_state", "metrics", "log", "logs", "events", "train", "loss"}


@dataclass(frozen=True, eq=False)
class PathRead:
    runs: dict[str, Run]
    problems: list[Problem]  # every problem of every run, in read order


def read_path(
    path: str, *, strict: bool = False, progress: Callable[[int, int], None] | None = None
) -> PathRead:
    """Read every scalar under `path`.

    Lenient by default: bad records are skipped and reported, good data around them kept.
    With `strict`, any problem raises IngestError instead.  Raises IngestError if `path`
    does not exist.
    """
    if os.path.isdir(path):
        read = read_logdir(path, progress=progress)
        runs, problems = read.runs, list(read.problems)
    else:
        check_file(path)
        runs, problems = _read_file(path, strict)
    for run in runs.values():
        problems.extend(run.problems)
    if strict and problems:
        raise IngestError(problems)
    return PathRead(runs, problems)


def check_file(path: str) -> None:
    """Raise IngestError unless `path` is a regular file (a FIFO given by name would block)."""
    try:
        kind = not_regular(os.stat(path).st_mode)
    except OSError:
        raise IngestError(Problem(path, "no such file or directory")) from None
    if kind:
        raise IngestError(Problem(path, skipped(kind)))


def run_name_for_file(path: str) -> str:
    """A file's run: its stem, unless the stem is generic (trainer_state.json, metrics.csv)."""
    p = Path(path)
    stem = p.name.split(".")[0]
    return (p.resolve().parent.name or stem) if stem in _GENERIC_STEMS else stem


def _read_file(path: str, strict: bool) -> tuple[dict[str, Run], list[Problem]]:
    if is_event_file(os.path.basename(path)):
        name = Path(path).resolve().parent.name or "."
        return {name: read_run(name, [path])}, []
    data = read_whole(path)
    parsed = parse_text_log(data, source=path, run=run_name_for_file(path), strict=strict)
    return {name: _text_run(name, points, path) for name, points in parsed.runs.items()}, parsed.problems


def _text_run(name: str, points: Points, path: str) -> Run:
    segment, rollbacks, segments = assign_segments(points, [(0, path)])
    return Run(name, points, segment, tuple(rollbacks), RunState(segments), files={})

"""One entry point for any path a user hands losswatch: a logdir (local or a URL), an event
file, or a JSON/NDJSON/CSV/trainer_state log.  Whatever the format, runs come back in one
shape, with how each was recognised (`losswatch runs` prints it)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from app.ingest.discover import GENERIC_STEMS, RECOGNISED, TENSORBOARD, TRAINER_STATE, Found, Source, discover_local
from app.ingest.files import not_regular, read_whole, skipped
from app.ingest.logdir import Run, RunState, is_event_file, read_run
from app.ingest.points import Points
from app.ingest.problems import IngestError, Problem
from app.ingest.remote import RemoteLogdir, is_url
from app.ingest.restarts import assign_segments
from app.ingest.textlogs import parse_text_log


@dataclass(frozen=True, eq=False)
class PathRead:
    runs: dict[str, Run]
    problems: list[Problem]  # every problem of every run, in read order
    recognised: dict[str, str] = field(default_factory=dict)  # run -> how its source was recognised


def read_path(
    path: str, *, strict: bool = False, progress: Callable[[int, int], None] | None = None
) -> PathRead:
    """Read every scalar under `path` (a directory or URL prefix is walked: see
    `app.ingest.discover`).

    Lenient by default: bad records are skipped and reported, good data around them kept.
    With `strict`, any problem raises IngestError instead.  Raises IngestError if `path`
    does not exist or cannot be listed.
    """
    if is_url(path):
        remote = RemoteLogdir(path)
        runs, problems, recognised = _read_sources(remote.discover(), strict, progress, remote)
    elif os.path.isdir(path):
        runs, problems, recognised = _read_sources(discover_local(path), strict, progress)
    else:
        check_file(path)
        runs, problems = _read_file(path, strict)
        recognised = {name: _file_kind(path) for name in runs}
    for run in runs.values():
        problems.extend(run.problems)
    if strict and problems:
        raise IngestError(problems)
    return PathRead(runs, problems, recognised)


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
    return (p.resolve().parent.name or stem) if stem in GENERIC_STEMS else stem


def text_run_names(location: str, names: list[str]) -> dict[str, str]:
    """The runs of a text log found by a walk, named by where it lies: one run takes the
    location's name, several keep theirs below it (``logs/train/r1``)."""
    if len(names) == 1:
        return {names[0]: location}
    return {name: f"{location}/{name}" for name in names}


def read_text_source(source: Source, data: bytes, strict: bool = False) -> tuple[dict[str, Points], list[Problem]]:
    """A JSON/CSV source's runs, named as `text_run_names` says, and its problems; a source
    that yields no point says so (it was taken for a log by its name or first bytes)."""
    path = source.files[0]
    parsed = parse_text_log(data, source=path, run=source.name, strict=strict,
                            fmt="trainer_state" if source.kind == TRAINER_STATE else None)
    problems = list(parsed.problems)
    kept = {name: points for name, points in parsed.runs.items() if len(points)}
    if not kept:
        problems.append(Problem(path, f"recognised as a {RECOGNISED[source.kind]} but no point could be read from it"))
    names = text_run_names(source.name, list(kept))
    return {names[name]: points for name, points in kept.items()}, problems


def _read_sources(
    found: Found, strict: bool, progress: Callable[[int, int], None] | None, remote: RemoteLogdir | None = None
) -> tuple[dict[str, Run], list[Problem], dict[str, str]]:
    runs: dict[str, Run] = {}
    recognised: dict[str, str] = {}
    problems = list(found.problems)
    for done, source in enumerate(found.sources, 1):
        what = f"{RECOGNISED[source.kind]} ({_count(len(source.files), 'file')})"
        if source.kind == TENSORBOARD:
            reader = remote.read_events if remote is not None else None
            runs[source.name] = read_run(source.name, list(source.files), reader=reader)
            recognised[source.name] = what
        else:
            try:
                data = remote.read_whole(source.files[0]) if remote is not None else read_whole(source.files[0])
            except IngestError as e:
                problems += e.problems
                continue
            points, text_problems = read_text_source(source, data, strict)
            problems += text_problems
            for name, p in points.items():
                runs[name] = _text_run(name, p, source.files[0])
                recognised[name] = what
        if progress:
            progress(done, len(found.sources))
    return runs, problems, recognised


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _file_kind(path: str) -> str:
    if is_event_file(os.path.basename(path)):
        return RECOGNISED[TENSORBOARD] + " (1 file)"
    return "JSON/CSV log given by name"


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

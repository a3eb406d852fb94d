"""One scan: read what is new under each path, re-analyse the runs that changed, move their
alerts along their lifecycle and queue what must be delivered.

Each run is one transaction, holding its row lock: the new points, the offsets they were
read up to, the alerts and their changes, and the outbox of deliveries commit together.  A
scan killed at any instant leaves every run either as before or fully updated, and two
scans at once take turns on a run, the second finding nothing new.  What a scan reports is
what its own transactions changed, so nothing is reported twice.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import httpx

from analyzers.config import AnalysisConfig
from app.alerts.lifecycle import AlertRecord
from app.alerts.webhooks import DeliveryReport, deliver_due
from app.ingest.logdir import RunState, find_runs, is_event_file, read_run
from app.ingest.problems import IngestError, Problem
from app.ingest.restarts import assign_segments
from app.ingest.sources import run_name_for_file
from app.ingest.textlogs import parse_text_log
from app.store import alerts as stored_alerts
from app.store import runs as stored_runs
from app.store.db import Store
from app.store.runs import StoredFile
from app.updates import Applied, Reported, reassess, store_points


@dataclass
class ScanOutcome:
    runs: int = 0  # runs seen
    changed: int = 0  # runs that had something new
    points: int = 0  # points stored
    events: list[Reported] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    deliveries: DeliveryReport = field(default_factory=lambda: DeliveryReport(0, []))


@dataclass(frozen=True)
class _Target:
    """One run to bring up to date: where it lives and which files hold it."""

    source: str
    name: str
    files: list[str]
    text: bool = False  # a JSON/CSV log, re-read whole when it changes


def scan(
    store: Store,
    paths: list[str],
    *,
    config: AnalysisConfig = AnalysisConfig(),
    webhooks: Sequence[str] = (),
    client: httpx.Client | None = None,
    clock: Callable[[], float] = time.time,
    progress: Callable[[int, int], None] | None = None,
) -> ScanOutcome:
    """Scan every path; raises IngestError for a path that does not exist."""
    outcome = ScanOutcome()
    targets: list[_Target] = []
    for path in paths:
        found, problems = _targets(path)
        targets += found
        outcome.problems += problems
    outcome.runs = len(targets)
    with store.read() as conn:
        known = {source: stored_runs.known_files(conn, source) for source in {t.source for t in targets}}
    for done, target in enumerate(targets, 1):
        if _changed(target, known[target.source].get(target.name, {})):
            _scan_run(store, target, config, webhooks, clock, outcome)
        if progress:
            progress(done, len(targets))
    if client is not None:
        outcome.deliveries = deliver_due(store, client, clock=clock)
    return outcome


def open_alerts(store: Store, paths: list[str]) -> list[AlertRecord]:
    """Every pending or firing alert of the runs under these paths."""
    with store.read() as conn:
        return stored_alerts.open_alerts(conn, [_source(p) for p in paths])


def _source(path: str) -> str:
    return os.path.realpath(path)


def _targets(path: str) -> tuple[list[_Target], list[Problem]]:
    source = _source(path)
    if os.path.isdir(path):
        runs, problems = find_runs(source)
        return [_Target(source, name, files) for name, files in runs.items()], problems
    if not os.path.isfile(path):
        raise IngestError(Problem(path, "no such file or directory"))
    if is_event_file(os.path.basename(path)):
        return [_Target(source, os.path.basename(os.path.dirname(source)) or ".", [source])], []
    return [_Target(source, run_name_for_file(source), [source], text=True)], []


def _changed(target: _Target, known: dict[str, StoredFile]) -> bool:
    """Whether any file of the run grew (or appeared) since it was last read."""
    for path in target.files:
        try:
            size = os.stat(path).st_size
        except OSError:
            return True  # let the read report it
        if path not in known or known[path].size != size:
            return True
    return False


def _scan_run(
    store: Store, target: _Target, config: AnalysisConfig, webhooks: Sequence[str], clock: Callable[[], float],
    outcome: ScanOutcome,
) -> None:
    if target.text:
        _scan_text(store, target, config, webhooks, clock, outcome)
        return
    now = clock()
    with store.write() as conn:
        run = stored_runs.lock_run(conn, target.source, target.name, now)
        files = stored_runs.run_files(conn, run.id)  # read under the lock: another scan may have moved them
        # sizes before reading: whatever is appended meanwhile shows as a change next time
        sizes = {path: _size(path) for path in target.files}
        read = read_run(target.name, target.files, {p: f.offset for p, f in files.items()}, run.state)
        outcome.problems += read.problems
        progress = {
            path: StoredFile(p.offset, sizes[path], p.end.value)
            for path, p in read.files.items()
            if path not in files or (files[path].offset, files[path].size) != (p.offset, sizes[path])
        }
        if not progress:
            return
        stored_runs.save_files(conn, run.id, progress)
        updated = store_points(conn, run, read.points, read.segment, read.rollbacks, read.state, now)
        outcome.changed += 1
        outcome.points += len(read.points)
        if len(read.points) or read.rollbacks:
            _record(outcome, target, target.name, reassess(conn, updated, config, webhooks, now))


def _scan_text(
    store: Store, target: _Target, config: AnalysisConfig, webhooks: Sequence[str], clock: Callable[[], float],
    outcome: ScanOutcome,
) -> None:
    """A JSON/CSV log changed: read it whole and replace what its runs held."""
    path = target.files[0]
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        outcome.problems.append(Problem(path, f"cannot read file: {e.strerror or e}"))
        return
    parsed = parse_text_log(data, source=path, run=target.name)
    outcome.problems += parsed.problems
    now = clock()
    for name, points in parsed.runs.items():
        with store.write() as conn:
            run = stored_runs.lock_run(conn, target.source, name, now)
            if stored_runs.run_files(conn, run.id).get(path, StoredFile(0, -1, "")).size == len(data):
                continue  # another scan got here first
            segment, rollbacks, segments = assign_segments(points, [(0, path)])
            stored_runs.delete_points(conn, run.id)
            stored_runs.save_files(conn, run.id, {path: StoredFile(len(data), len(data), "complete")})
            fresh = replace(run, last_step=None, points=0, analyzed_points=None)
            updated = store_points(conn, fresh, points, segment, tuple(rollbacks), RunState(segments), now)
            outcome.changed += 1
            outcome.points += len(points)
            _record(outcome, target, name, reassess(conn, updated, config, webhooks, now))


def _record(outcome: ScanOutcome, target: _Target, name: str, applied: Applied) -> None:
    """A run's changes, or its failed analysis as a problem: the scan goes on with the next."""
    outcome.events += applied.changes
    if applied.error is not None:
        outcome.problems.append(Problem(f"{target.source}: run {name}", f"analysis failed: {applied.error}"))


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1

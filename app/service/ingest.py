"""Points arriving over HTTP: JSON/NDJSON bodies and chunks of TensorBoard event files.

Appending is idempotent: a point whose run, tag, step and value are already stored is
dropped as a duplicate (a client retrying a request stores nothing twice); a different
value for a stored step is kept as a rewrite, as after a restart.  Event-file chunks carry
the byte offset they start at, and the service keeps each file's offset, so a resent chunk
stores nothing twice either.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from sqlalchemy.engine import Connection

from analyzers.series import current_view
from app.ingest import _tfrecord
from app.ingest.events import decode_event_bytes
from app.ingest.logdir import RunState
from app.ingest.points import Points
from app.ingest.restarts import assign_segments
from app.ingest.textlogs import parse_text_log
from app.service.errors import ApiError, problem_dict
from app.service.settings import HTTP_SOURCE, Settings
from app.store import runs as stored_runs
from app.store.db import Store
from app.store.runs import StoredFile, StoredRun
from app.updates import Reported, analyze_now, due_for_analysis, mark_dirty, store_points


@dataclass
class IngestResult:
    accepted: int = 0
    duplicates: int = 0
    rejected: list[dict] = field(default_factory=list)
    analysis: str = "none"  # done, deferred (a busy run: analysed in the background), none
    changes: list[Reported] = field(default_factory=list)
    next_offset: int | None = None  # event chunks: where the next chunk of the file starts
    end: str | None = None


def ingest_json(store: Store, run: str, body: bytes, ndjson: bool, strict: bool, settings: Settings, now: float) -> IngestResult:
    parsed = parse_text_log(body, source="request", run=run, strict=strict, fmt="ndjson" if ndjson else None)
    result = IngestResult(rejected=[problem_dict(p) for p in parsed.problems])
    points = parsed.runs.pop(run, None)
    for other, extra in parsed.runs.items():
        result.rejected.append({"reason": f"run {other!r} is not this URL's run {run!r}", "points": len(extra)})
    if strict and result.rejected:
        raise ApiError(422, "invalid_input", "the body has bad records", result.rejected)
    if points is None or not len(points):
        return result
    if len(points) > settings.max_points_per_request:
        raise ApiError(413, "too_many_points", f"{len(points)} points in one request; the limit is {settings.max_points_per_request}")
    with store.write() as conn:
        stored = stored_runs.lock_run(conn, HTTP_SOURCE, run, now)
        fresh = _drop_duplicates(conn, stored, points)
        result.duplicates = len(points) - len(fresh)
        result.accepted = len(fresh)
        if not len(fresh):
            return result
        segment, rollbacks, segments = assign_segments(fresh, [(0, "request")], state=stored.state.segments)
        updated = store_points(conn, stored, fresh, segment, tuple(rollbacks), RunState(segments, stored.state.plugins), now)
        mark_dirty(conn, updated, now)
    _assess(store, stored, updated, settings, now, result)
    return result


def ingest_events(
    store: Store, run: str, file: str, offset: int, body: bytes, settings: Settings, now: float
) -> IngestResult:
    key = f"http/{file}"
    with store.write() as conn:
        stored = stored_runs.lock_run(conn, HTTP_SOURCE, run, now)
        known = stored_runs.run_files(conn, stored.id).get(key, StoredFile(0, 0, "complete"))
        if offset > known.offset:
            raise ApiError(
                409, "offset_gap", f"this run's copy of {file} ends at byte {known.offset}: send the bytes from there",
                {"expected_offset": known.offset},
            )
        new = body[known.offset - offset :]
        if not new:
            return IngestResult(next_offset=known.offset, end=known.end)
        tags = _tfrecord.TagTable(stored.state.plugins)
        read = decode_event_bytes(new, known.offset, file, tags)
        if len(read.points) > settings.max_points_per_request:
            raise ApiError(413, "too_many_points", f"{len(read.points)} points in one request; the limit is {settings.max_points_per_request}")
        result = IngestResult(
            accepted=len(read.points), rejected=[problem_dict(p) for p in read.problems],
            next_offset=read.end_offset, end=read.end.value,
        )
        segment, rollbacks, segments = assign_segments(read.points, [(0, file)], read.starts, stored.state.segments)
        stored_runs.save_files(conn, stored.id, {key: StoredFile(read.end_offset, read.end_offset, read.end.value)})
        updated = store_points(conn, stored, read.points, segment, tuple(rollbacks), RunState(segments, tags.known_plugins()), now)
        if not (len(read.points) or rollbacks):
            return result
        mark_dirty(conn, updated, now)
    _assess(store, stored, updated, settings, now, result)
    return result


def _assess(store: Store, before: StoredRun, run: StoredRun, settings: Settings, now: float, result: IngestResult) -> None:
    """The points are committed and the run marked as waiting for analysis.  Analyse it now
    (outside the write lock), unless it was analysed less than `analysis_interval` ago: then
    the background analysis picks it up (bulk loads stay fast; a training loop posting every
    few seconds gets its alerts in the response).  A crash in between loses nothing: the
    run is still waiting."""
    if due_for_analysis(before, settings.analysis_interval, now):
        result.changes = analyze_now(store, run, settings.analysis, settings.webhooks, now)
        result.analysis = "done"
    else:
        result.analysis = "deferred"


def _drop_duplicates(conn: Connection, run: StoredRun, points: Points) -> Points:
    """The points whose (tag, step) is not already stored with the same value."""
    keep = np.ones(len(points), bool)
    resume_to = None  # loaded only if some step is not past what is stored
    for tag_id, name in enumerate(points.tags):
        mine = np.flatnonzero(points.tag == tag_id)
        if not len(mine):
            continue
        steps, values = points.step[mine], points.value[mine]
        highest = run.state.segments.max_step.get(name)
        if highest is None or steps.min() > highest:
            continue  # all past what is stored: the usual append
        writes = stored_runs.load_tag_writes(conn, run.id, name, from_step=int(steps.min()))
        if writes is None:
            continue
        if resume_to is None:
            resume_to = {r.segment: r.to_step for r in stored_runs.load_resumes(conn, run.id)}
        view = current_view(np.zeros(len(writes.step), np.int8), writes.step, writes.segment, resume_to)
        known_steps, known_values = writes.step[view], writes.value[view]
        order = np.argsort(known_steps)
        known_steps, known_values = known_steps[order], known_values[order]
        at = np.clip(np.searchsorted(known_steps, steps), 0, len(known_steps) - 1)
        found = known_steps[at] == steps
        same = found & ((known_values[at] == values) | (np.isnan(known_values[at]) & np.isnan(values)))
        keep[mine[same]] = False
    if keep.all():
        return points
    return Points(points.tags, points.tag[keep], points.step[keep], points.wall_time[keep], points.value[keep])

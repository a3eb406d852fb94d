"""Points arriving over HTTP: JSON/NDJSON bodies and chunks of TensorBoard event files.

Posted points follow the HTTP rules (README, *Restarts over HTTP*), which never hide what a
client did not rewrite:

* a (tag, step) not stored yet is stored, also below the tag's last step (a late arrival,
  a retry filling a gap);
* the same value again is a duplicate and is dropped (a retried request stores nothing twice);
* another value at a tag's last stored step replaces it (the later write wins);
* another value below a tag's last stored step is a resume from a checkpoint: a rollback of
  the tags rewritten in that request, hiding their earlier writes from that step on (other
  tags are untouched);
* `POST /v1/runs/{run}/rollback` rolls every tag back, as a resumed job would announce.

Within one request, of several points at one (tag, step) the last is kept.  Event-file
chunks follow TensorBoard's rules, as read from a logdir; they carry the byte offset they
start at, and the service keeps each file's offset, so a resent chunk stores nothing twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from sqlalchemy.engine import Connection

from analyzers.series import current_view, resume_steps
from app.ingest import _tfrecord
from app.ingest.events import decode_event_bytes
from app.ingest.logdir import RunState
from app.ingest.points import Points
from app.ingest.restarts import Rollback, SegmentState, assign_segments
from app.ingest.textlogs import parse_text_log
from app.service.errors import ApiError, problem_dict
from app.service.settings import HTTP_SOURCE, Settings
from app.store import runs as stored_runs
from app.store.db import Store, unavailable
from app.store.runs import StoredFile, StoredRun
from app.updates import (
    Applied,
    Reported,
    Storing,
    analyze_locked,
    analyze_now,
    due_for_analysis,
    store_points,
    store_points_of_runs,
)

REQUEST = "request"  # the "file" posted points and rollbacks are recorded as coming from


@dataclass
class IngestResult:
    accepted: int = 0
    duplicates: int = 0
    replaced: int = 0  # of the accepted: new values for a tag's last stored step
    rejected: list[dict] = field(default_factory=list)
    rollbacks: list[dict] = field(default_factory=list)  # rewrites below a tag's last step
    analysis: str = "none"  # done, deferred (a busy run: analysed in the background), failed, none
    analysis_error: str | None = None
    changes: list[Reported] = field(default_factory=list)
    next_offset: int | None = None  # event chunks: where the next chunk of the file starts
    end: str | None = None


def ingest_json(store: Store, run: str, body: bytes, ndjson: bool, strict: bool, settings: Settings, now: float) -> IngestResult:
    (answer,) = ingest_json_group(store, [PostedPoints(run, body, ndjson, strict, now)], settings)
    if isinstance(answer, Exception):
        raise answer
    return answer


@dataclass(frozen=True)
class PostedPoints:
    """One request's JSON or NDJSON body of points for a run, as it arrived at `now`."""

    run: str
    body: bytes
    ndjson: bool
    strict: bool
    now: float


def ingest_json_group(store: Store, posts: Sequence[PostedPoints], settings: Settings) -> list[IngestResult | Exception]:
    """Store several posts to distinct runs in one transaction (group commit), each answered
    as if posted alone: its result, or the error it alone would have raised
    (`write_json_group`, then `analyse_written`)."""
    written = write_json_group(store, posts, settings)
    analyse_written(store, posts, written, settings)
    return written.answers


@dataclass(frozen=True)
class WrittenGroup:
    """A group of posts once written: each post's answer, final but for the posts whose runs
    are to be analysed now that their points are committed (`analyse_written`)."""

    answers: list[IngestResult | Exception]
    later: list[tuple[int, StoredRun, StoredRun]]  # (post, run before, run after): a rewrite, a bulk load
    due: list[int]  # posts due for analysis with their append

    @property
    def waiting(self) -> set[int]:
        """The posts whose answers wait for `analyse_written`."""
        return {i for i, _, _ in self.later} | set(self.due)

    def deferring(self, keep: int) -> WrittenGroup:
        """The group with only its first `keep` posts due for analysis left to
        `analyse_written`; the others are answered at once as deferred, their runs still
        waiting for the background analysis, as a run analysed less than
        `analysis_interval` ago is."""
        answers = list(self.answers)
        for i in self.due[keep:]:
            answers[i] = replace(answers[i], analysis="deferred")
        return WrittenGroup(answers, self.later, self.due[:keep])


def write_json_group(store: Store, posts: Sequence[PostedPoints], settings: Settings, analyse: bool = True) -> WrittenGroup:
    """Store several posts to distinct runs in one transaction: one commit and the
    statements of one append for the lot.  Should the transaction fail, each post is tried
    again in a transaction of its own, so one post's failure never fails another's (unless
    the store itself is unavailable: then all fail at once, as each would).  The analyses due
    with some posts are left to `analyse_written`, so they hold up no other post (a group of
    one post is analysed in its own transaction, as an append alone always was).  Without
    `analyse`, the posts due are answered as deferred, as if analysed a moment ago."""
    answers: list[IngestResult | Exception] = []
    parsed: list[tuple[int, Points, IngestResult]] = []
    for i, post in enumerate(posts):
        try:
            points, result = _parsed(post, settings)
        except Exception as e:  # refused (ApiError, a strict post's IngestError) or a defect: this post's alone
            answers.append(e)
            continue
        answers.append(result)
        if points is not None:
            parsed.append((i, points, result))
    later, due = _stored(store, posts, parsed, settings, answers, analyse) if parsed else ([], [])
    return WrittenGroup(answers, later, due)


def analyse_written(store: Store, posts: Sequence[PostedPoints], written: WrittenGroup, settings: Settings) -> None:
    """Analyse the runs of a written group's posts that wait for it, and complete their
    answers: those due with their append together in one transaction (each alone should it
    fail), a rewrite or bulk load each outside the lock (`_assess`).  An analysis that fails
    fails its own post alone (its points stay stored)."""
    answers = written.answers
    _analysed_after(store, posts, written.due, settings, answers)
    for i, before, run in written.later:
        try:
            _assess(store, before, run, settings, posts[i].now, answers[i])
        except Exception as e:
            answers[i] = e


def _stored(
    store: Store, posts: Sequence[PostedPoints], parsed: list[tuple[int, Points, IngestResult]], settings: Settings,
    answers: list[IngestResult | Exception], analyse: bool,
) -> tuple[list[tuple[int, StoredRun, StoredRun]], list[int]]:
    """`_store_group` of the parsed posts, post by post should the group fail."""
    try:
        group = [(posts[i], points, result) for i, points, result in parsed]
        return _store_group(store, group, settings, answers, [i for i, _, _ in parsed], len(parsed) > 1, analyse)
    except Exception as e:
        if len(parsed) == 1 or unavailable(e):
            for i, _, _ in parsed:
                answers[i] = e
            return [], []
    later: list[tuple[int, StoredRun, StoredRun]] = []
    due: list[int] = []
    for i, points, result in parsed:  # alone, each fails or not on its own account
        try:
            alone_later, alone_due = _store_group(store, [(posts[i], points, result)], settings, answers, [i], False, analyse)
        except Exception as alone:
            answers[i] = alone
            continue
        later += alone_later
        due += alone_due
    return later, due


def _analysed_after(
    store: Store, posts: Sequence[PostedPoints], due: list[int], settings: Settings, answers: list[IngestResult | Exception],
) -> None:
    """Analyse the runs of these committed posts, due for analysis with their append, in one
    transaction (each alone should it fail), each post's answer saying how it went."""
    if not due:
        return
    try:
        _analyse_locked(store, posts, due, settings, answers)
    except Exception as e:
        if len(due) == 1 or unavailable(e):
            for i in due:
                answers[i] = e
            return
        for i in due:
            try:
                _analyse_locked(store, posts, [i], settings, answers)
            except Exception as alone:
                answers[i] = alone


def _analyse_locked(
    store: Store, posts: Sequence[PostedPoints], due: list[int], settings: Settings, answers: list[IngestResult | Exception],
) -> None:
    results = {i: replace(answers[i]) for i in due}  # filled only once committed
    with store.write() as conn:
        locked = stored_runs.lock_runs(conn, HTTP_SOURCE, [posts[i].run for i in due], posts[due[0]].now)
        for i in due:
            _answer(results[i], analyze_locked(conn, locked[posts[i].run], settings.analysis, settings.webhooks, posts[i].now))
    for i, result in results.items():
        answers[i] = result


def _parsed(post: PostedPoints, settings: Settings) -> tuple[Points | None, IngestResult]:
    """The post's points to store (None: nothing to store) and its answer so far; ApiError
    for a request refused before anything is stored."""
    parsed = parse_text_log(post.body, source="request", run=post.run, strict=post.strict, fmt="ndjson" if post.ndjson else None)
    result = IngestResult(rejected=[problem_dict(p) for p in parsed.problems])
    points = parsed.runs.pop(post.run, None)
    for other, extra in parsed.runs.items():
        result.rejected.append({"reason": f"run {other!r} is not this URL's run {post.run!r}", "points": len(extra)})
    if post.strict and result.rejected:
        raise ApiError(422, "invalid_input", "the body has bad records", result.rejected)
    if points is None or not len(points):
        return None, result
    if len(points) > settings.max_points_per_request:
        raise ApiError(413, "too_many_points", f"{len(points)} points in one request; the limit is {settings.max_points_per_request}")
    return _last_of_each_step(points, result), result


def _store_group(
    store: Store, group: list[tuple[PostedPoints, Points, IngestResult]], settings: Settings,
    answers: list[IngestResult | Exception], at: list[int], apart: bool, analyse: bool,
) -> tuple[list[tuple[int, StoredRun, StoredRun]], list[int]]:
    """Store the group's points in one transaction, its runs locked in one statement; put
    each post's answer (a copy of its answer so far, so a failed try leaves none half-made)
    at its place in `answers`.  Returned, to see to once committed: the posts whose runs
    need more analysis (a rewrite, a bulk load: place in `answers`, the run before and
    after), and, when `apart`, those due for analysis with their append (places in
    `answers`); without `apart` those are analysed in this transaction.  Without `analyse`,
    none is due."""
    results = [replace(result) for _, _, result in group]
    with store.write() as conn:
        locked = stored_runs.lock_runs(conn, HTTP_SOURCE, [post.run for post, _, _ in group], group[0][0].now)
        storing: list[tuple[int, Storing]] = []
        for k, (post, points, _) in enumerate(group):
            stored, result = locked[post.run], results[k]
            triage = _triage(conn, stored, points)
            fresh = triage.fresh
            result.duplicates += len(points) - len(fresh)
            result.accepted, result.replaced = len(fresh), triage.replaced
            if not len(fresh):
                continue
            segment, rollbacks, segments = _segments(fresh, triage.rewound, stored.state.segments)
            result.rollbacks = [{"tags": list(r.tags), "from_step": r.from_step, "to_step": r.to_step} for r in rollbacks]
            state = RunState(segments, stored.state.plugins)
            storing.append((k, Storing(stored, fresh, segment, rollbacks, state, post.now, dirty=True)))
        updated = store_points_of_runs(conn, [s for _, s in storing])
        after: list[tuple[int, StoredRun, StoredRun]] = []
        due: list[int] = []
        for (k, s), run in zip(storing, updated):
            if not analyse or not due_for_analysis(s.run, settings.analysis_interval, s.now):
                results[k].analysis = "deferred"  # as `_assess` would say: the background analysis picks it up
            elif not _analysed_with_append(s.run, len(s.points), s.rollbacks, settings, s.now):
                after.append((at[k], s.run, run))
            elif apart:
                due.append(at[k])
            else:
                _answer(results[k], analyze_locked(conn, run, settings.analysis, settings.webhooks, s.now))
    for k, result in enumerate(results):
        answers[at[k]] = result
    return after, due


def rollback(store: Store, run: str, to_step: int, settings: Settings, now: float) -> IngestResult:
    """Roll every tag of a posted run back to `to_step`, as a job resumed from a checkpoint
    announces: their writes from `to_step` on are hidden, and later posts there are new.
    Nothing to hide (`to_step` past the last step) changes nothing."""
    with store.write() as conn:
        if not stored_runs.find_runs(conn, run, HTTP_SOURCE):
            raise ApiError(404, "not_found", f"no run {run!r} has been posted")
        stored = stored_runs.lock_run(conn, HTTP_SOURCE, run, now)
        result = IngestResult()
        if stored.last_step is None or to_step > max(stored.state.segments.max_step.values(), default=-1):
            return result
        state = stored.state.segments
        found = Rollback(max(state.max_step.values()), to_step, REQUEST, now, state.segment + 1, purge=True)
        maxima = {tag: min(step, to_step - 1) for tag, step in state.max_step.items()}
        segments = SegmentState(found.segment, maxima)
        empty = Points.empty()
        updated = store_points(conn, stored, empty, np.empty(0, np.int32), (found,), RunState(segments, stored.state.plugins), now,
                               dirty=True)
        result.rollbacks = [{"tags": [], "from_step": found.from_step, "to_step": found.to_step}]
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
        changed = bool(len(read.points) or rollbacks)
        updated = store_points(conn, stored, read.points, segment, tuple(rollbacks), RunState(segments, tags.known_plugins()), now,
                               dirty=changed)
        if not changed:
            return result
    _assess(store, stored, updated, settings, now, result)
    return result


def _assess(store: Store, before: StoredRun, run: StoredRun, settings: Settings, now: float, result: IngestResult) -> None:
    """The points are committed and the run marked as waiting for analysis.  Analyse it now
    (outside the write lock), unless it was analysed less than `analysis_interval` ago: then
    the background analysis picks it up (bulk loads stay fast; a training loop posting every
    few seconds gets its alerts in the response).  A crash in between loses nothing: the
    run is still waiting.  A failed analysis is said in the answer; the points stay stored."""
    if not due_for_analysis(before, settings.analysis_interval, now):
        result.analysis = "deferred"
        return
    _answer(result, analyze_now(store, run, settings.analysis, settings.webhooks, now))


SMALL_APPEND = 1024  # points not yet analysed, an append's included, that its own transaction analyses


def _analysed_with_append(before: StoredRun, posted: int, rollbacks: tuple[Rollback, ...], settings: Settings, now: float) -> bool:
    """Whether to analyse in the append's own transaction, under the run's lock: the analysis
    is due, the append rewrites nothing and the points not yet analysed (this append's and
    those of appends deferred since the last analysis) are few, so the analysis costs a few
    ms and holds up only this run's appends.  Otherwise (a bulk load, a rewrite) the run is
    analysed after the commit, outside the lock (`_assess`)."""
    waiting = before.points - (before.analyzed_points or 0)
    return posted + waiting <= SMALL_APPEND and not rollbacks and due_for_analysis(before, settings.analysis_interval, now)


def _answer(result: IngestResult, applied: Applied) -> None:
    result.changes = applied.changes
    result.analysis = "done" if applied.error is None else "failed"
    result.analysis_error = applied.error


def _last_of_each_step(points: Points, result: IngestResult) -> Points:
    """Of several points at one (tag, step) in a request, the last: the same value again is a
    duplicate, another value is superseded, and both are counted in the answer."""
    n = len(points)
    order = np.lexsort((np.arange(n), points.step, points.tag))
    tag, step = points.tag[order], points.step[order]
    repeated = (tag[1:] == tag[:-1]) & (step[1:] == step[:-1])  # i repeats i + 1's (tag, step)
    if not repeated.any():
        return points
    earlier = order[:-1][repeated]
    later = order[1:][repeated]
    same = (points.value[earlier] == points.value[later]) | (np.isnan(points.value[earlier]) & np.isnan(points.value[later]))
    result.duplicates += int(same.sum())
    for tag_id in np.unique(points.tag[earlier[~same]]):
        count = int(np.sum(points.tag[earlier[~same]] == tag_id))
        result.rejected.append({
            "reason": f"{points.tags[tag_id]!r} has steps posted twice in this request with different values: "
                      "the later value is kept", "points": count,
        })
    keep = np.ones(n, bool)
    keep[earlier] = False
    return Points(points.tags, points.tag[keep], points.step[keep], points.wall_time[keep], points.value[keep])


@dataclass(frozen=True)
class _Triage:
    """A request's points against what the run holds."""

    fresh: Points  # what to store: new (tag, step)s and new values for stored ones
    replaced: int  # of fresh: new values at a tag's last stored step
    rewound: dict[str, tuple[int, int]]  # tag -> (lowest step rewritten below its last, its last step)


def _triage(conn: Connection, run: StoredRun, points: Points) -> _Triage:
    """Sort posted points that are not past a tag's last stored step: a stored (step, value)
    is a duplicate (a retry), unless it is posted at an older step with a later wall time:
    the job is going over those steps again (a resume from a checkpoint of a deterministic
    run computes the same values), which rewinds the tag like a new value would.  A retry
    sends the wall times it sent before."""
    keep = np.ones(len(points), bool)
    replaced, rewound = 0, {}
    resumes = None  # loaded only if some step is not past what is stored
    for tag_id, name in enumerate(points.tags):
        mine = np.flatnonzero(points.tag == tag_id)
        if not len(mine):
            continue
        steps, values = points.step[mine], points.value[mine]
        highest = run.state.segments.max_step.get(name)
        if highest is None or steps.min() > highest:
            continue  # all past what is stored: the usual append
        found = stored_runs.load_tag_writes_timed(conn, run.id, name, from_step=int(steps.min()))
        if found is None:
            continue
        writes, wall_times = found
        if resumes is None:
            resumes = stored_runs.load_resumes(conn, run.id)
        view = current_view(np.zeros(len(writes.step), np.int8), writes.step, writes.segment, resume_steps(resumes, name))
        known_steps, known_values, known_times = writes.step[view], writes.value[view], wall_times[view]
        if not len(known_steps):
            continue
        order = np.argsort(known_steps)
        known_steps, known_values, known_times = known_steps[order], known_values[order], known_times[order]
        at = np.clip(np.searchsorted(known_steps, steps), 0, len(known_steps) - 1)
        hit = known_steps[at] == steps
        same = hit & ((known_values[at] == values) | (np.isnan(known_values[at]) & np.isnan(values)))
        again = same & (steps < highest) & (points.wall_time[mine] > known_times[at])  # NaN: never
        keep[mine[same & ~again]] = False
        changed = hit & ~same
        below = (changed & (steps < highest)) | again
        replaced += int(np.sum(changed & ~below))
        if below.any():
            low = int(steps[below].min())
            rewound[name] = (low, int(highest))
            keep[mine[steps >= low]] = True  # the stored ones from there on are hidden: none is a duplicate
    fresh = points if keep.all() else Points(points.tags, points.tag[keep], points.step[keep], points.wall_time[keep], points.value[keep])
    return _Triage(fresh, replaced, rewound)


def _segments(
    points: Points, rewound: dict[str, tuple[int, int]], state: SegmentState
) -> tuple[np.ndarray, tuple[Rollback, ...], SegmentState]:
    """The segment of each posted point, the rollback of the rewound tags (if any) and the
    state after: a rewound tag's last step is now its highest step in this request."""
    maxima = dict(state.max_step)
    rollbacks: tuple[Rollback, ...] = ()
    segment_id = state.segment
    if rewound:
        segment_id += 1
        to_step = min(low for low, _ in rewound.values())
        from_step = max(high for _, high in rewound.values())
        wall_time = points.wall_time[points.step == to_step]
        first_time = float(wall_time[0]) if len(wall_time) and np.isfinite(wall_time[0]) else None
        rollbacks = (Rollback(from_step, to_step, REQUEST, first_time, segment_id, purge=False, tags=tuple(sorted(rewound))),)
        for name in rewound:
            maxima.pop(name)
    for tag_id, name in enumerate(points.tags):
        steps = points.step[points.tag == tag_id]
        if len(steps):
            maxima[name] = max(maxima.get(name, int(steps.max())), int(steps.max()))
    return np.full(len(points), segment_id, np.int32), rollbacks, SegmentState(segment_id, maxima)

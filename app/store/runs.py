"""Runs at rest: the run row (locked while a scan works on it), its files' read offsets,
its points (chunks per tag) and its rollbacks.  Every function works inside the caller's
transaction: points and the offsets they were read up to commit together or not at all."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from analyzers.series import Resume, TagWrites, hidden_by_resumes
from app.ingest.logdir import RunState
from app.ingest.points import Points
from app.ingest.restarts import Rollback, SegmentState
from app.store import chunks, streams
from app.store.schema import alerts, chunk_summaries, files, rollbacks, runs, tags
from app.store.schema import chunks as chunk_table
from app.store.summaries import grown_columns, summary_columns


@dataclass(frozen=True)
class StoredRun:
    id: int
    source: str
    name: str
    state: RunState
    last_step: int | None
    points: int
    updated_at: float = 0.0
    analyzed_at: float | None = None
    analyzed_points: int | None = None
    analysis_error: str | None = None  # why the last analysis failed, if it did
    health: dict | None = None  # as of the last applied analysis
    last_seen_at: float | None = None  # see app/liveness.py
    finished_at: float | None = None
    pace: dict | None = None


@dataclass(frozen=True)
class StoredFile:
    offset: int
    size: int
    end: str
    head: str | None = None  # fingerprint of the first bytes (app.ingest.events); None: unknown


def lock_run(conn: Connection, source: str, name: str, now: float) -> StoredRun:
    """The run's row, created if new, locked until the transaction ends, in one statement:
    an insert that, for a run already stored, updates nothing but takes the row's lock
    (PostgreSQL: as FOR UPDATE would; SQLite: the transaction already holds the database's
    write lock) and returns the row as it is once locked."""
    params = {"source": source, "name": name, "state": _state_json(RunState()), "now": now}
    return _stored(conn.execute(_lock_statement(conn.dialect.name), params).one())


def lock_runs(conn: Connection, source: str, names: Sequence[str], now: float) -> dict[str, StoredRun]:
    """`lock_run` of several runs of a source in one statement (a group of appends).  Rows
    are locked in name order, the order every group takes them in, so two groups sharing
    runs wait for each other rather than deadlock."""
    names = sorted(set(names))
    if len(names) == 1:  # one row: a plain execute costs less than a batch of one
        return {names[0]: lock_run(conn, source, names[0], now)}
    state = _state_json(RunState())
    params = [{"source": source, "name": name, "state": state, "now": now} for name in names]
    return {row.name: _stored(row) for row in conn.execute(_lock_statement(conn.dialect.name), params)}


@functools.cache
def _lock_statement(dialect: str) -> sa.Executable:
    """Built once per dialect: every append runs it, and building costs more than running."""
    insert = _insert(dialect)(runs).values(
        source=sa.bindparam("source"), name=sa.bindparam("name"), state=sa.bindparam("state", type_=runs.c.state.type),
        points=0, updated_at=sa.bindparam("now"),
    )
    upsert = insert.on_conflict_do_update(index_elements=["source", "name"], set_={"name": insert.excluded.name})
    return upsert.returning(*runs.c)


def known_files(conn: Connection, source: str) -> dict[str, dict[str, StoredFile]]:
    """Run name -> file path -> what was read of it, for every run of a source (one query:
    deciding that a logdir is unchanged costs a stat per file and nothing else)."""
    query = sa.select(runs.c.name, files.c.path, files.c.offset, files.c.size, files.c.end, files.c.head).join(
        files, files.c.run_id == runs.c.id
    ).where(runs.c.source == source)
    out: dict[str, dict[str, StoredFile]] = {}
    for name, path, offset, size, end, head in conn.execute(query):
        out.setdefault(name, {})[path] = StoredFile(offset, size, end, head)
    return out


def run_files(conn: Connection, run_id: int) -> dict[str, StoredFile]:
    query = sa.select(files.c.path, files.c.offset, files.c.size, files.c.end, files.c.head).where(files.c.run_id == run_id)
    return {path: StoredFile(offset, size, end, head) for path, offset, size, end, head in conn.execute(query)}


def files_of_runs(conn: Connection, run_ids: list[int]) -> dict[int, dict[str, StoredFile]]:
    """Run id -> file path -> what was read of it, for these runs in one query (a scan
    reads a batch of runs' offsets at once, not a query per run)."""
    query = sa.select(files.c.run_id, files.c.path, files.c.offset, files.c.size, files.c.end, files.c.head).where(
        files.c.run_id.in_(run_ids)
    )
    out: dict[int, dict[str, StoredFile]] = {}
    for run_id, path, offset, size, end, head in conn.execute(query):
        out.setdefault(run_id, {})[path] = StoredFile(offset, size, end, head)
    return out


def save_files(conn: Connection, run_id: int, progress: Mapping[str, StoredFile]) -> None:
    for path, f in progress.items():
        values = {"run_id": run_id, "path": path, "offset": f.offset, "size": f.size, "end": f.end, "head": f.head}
        if conn.execute(_SAVE_FILE, {f"f_{k}": v for k, v in values.items()}).rowcount == 0:
            conn.execute(files.insert(), values)


# Built once: a scan saves each run's offsets.
_SAVE_FILE = (
    files.update()
    .where(files.c.run_id == sa.bindparam("f_run_id"), files.c.path == sa.bindparam("f_path"))
    .values({name: sa.bindparam(f"f_{name}", type_=files.c[name].type) for name in ("offset", "size", "end", "head")})
)


CHUNK_POINTS = 16384  # a read of recent steps decodes at most this much history per tag
SMALL_CHUNK = 1024  # a tag's last chunk this small takes the next append in, rather than a new row


def append_points(conn: Connection, run_id: int, points: Points, segment: np.ndarray) -> None:
    """Chunks of at most CHUNK_POINTS points per tag, in write order.  Small appends (a
    training loop posting every step) go into the tag's last chunk while it is small, so a
    run's chunk count grows with its points, not with how often it was appended to."""
    append_points_of_runs(conn, [(run_id, points, segment)])


def append_points_of_runs(conn: Connection, appends: Sequence[tuple[int, Points, np.ndarray]]) -> None:
    """`append_points` of several runs (run id, points, their segments; each run once).  The
    statements grow with neither the runs nor the tags posted: one read of the tags' last
    chunks, one insert of any new tags, one batch of chunk updates and one of new chunks
    (with their summaries)."""
    appends = [(run_id, points, segment) for run_id, points, segment in appends if len(points)]
    if not appends:
        return
    wanted = {(run_id, points.tags[t]) for run_id, points, _ in appends for t in np.unique(points.tag)}
    lasts = _last_chunks(conn, sorted({run_id for run_id, _ in wanted}), sorted({name for _, name in wanted}))
    lasts = {key: last for key, last in lasts.items() if key in wanted}
    ids = {key: last.tag_id for key, last in lasts.items()} | _add_tags(conn, sorted(wanted - lasts.keys()))
    grown, rows = [], []
    for run_id, points, segment in appends:
        order = np.argsort(points.tag, kind="stable")
        bounds = np.flatnonzero(np.diff(points.tag[order])) + 1
        for part in np.split(order, bounds):
            key = (run_id, points.tags[points.tag[part[0]]])
            columns = (points.step[part], segment[part], points.wall_time[part], points.value[part])
            last = lasts.get(key)
            if len(part) < SMALL_CHUNK and last is not None and last.chunk_id is not None:
                row, summary = _grown_rows(last, columns)
                grown.append(({"chunk_id": last.chunk_id, **row}, {"summarised": last.chunk_id, **summary}))
                continue
            for i in range(0, len(part), CHUNK_POINTS):
                rows.append(_chunk_row(ids[key], *(c[i : i + CHUNK_POINTS] for c in columns)))
    if grown:
        conn.execute(_GROW_CHUNK, [row for row, _ in grown])
        conn.execute(_GROW_SUMMARY, [summary for _, summary in grown])
    if rows:
        insert = chunk_table.insert().returning(chunk_table.c.id, sort_by_parameter_order=True)
        new_ids = conn.execute(insert, [row for row, _ in rows]).scalars().all()
        conn.execute(chunk_summaries.insert(), [{"chunk_id": i, **summary} for i, (_, summary) in zip(new_ids, rows)])


@dataclass(frozen=True)
class _LastChunk:
    """A stored tag and its last chunk when that is small enough to grow (else chunk_id None),
    with the chunk's summary columns (None: it has no summary row)."""

    tag_id: int
    chunk_id: int | None
    count: int | None
    first_step: int | None
    last_step: int | None
    data: bytes | None
    summary: dict | None


def _last_chunks(conn: Connection, run_ids: list[int], names: list[str]) -> dict[tuple[int, str], _LastChunk]:
    """(run id, tag) -> the tag, with its last chunk if small, of these runs' tags of these
    names that are stored (one query; some pairs may not have been asked for)."""
    out = {}
    for run_id, name, tag_id, chunk_id, count, first, last, data, ordered, low, bad, blocks in conn.execute(
        _LAST_CHUNKS, {"run_ids": run_ids, "names": names}
    ):
        summary = None if blocks is None else {"ordered": ordered, "min_segment": low, "nonfinite": bad, "blocks": blocks}
        out[run_id, name] = _LastChunk(tag_id, chunk_id, count, first, last, data, summary)
    return out


def _last_chunks_query() -> sa.Select:
    same_tag = chunk_table.alias("same_tag")
    newest = sa.select(sa.func.max(same_tag.c.id)).where(same_tag.c.tag_id == tags.c.id).correlate(tags).scalar_subquery()
    return (
        sa.select(
            tags.c.run_id, tags.c.name, tags.c.id, chunk_table.c.id, chunk_table.c.count, chunk_table.c.first_step,
            chunk_table.c.last_step, chunk_table.c.data, chunk_summaries.c.ordered, chunk_summaries.c.min_segment,
            chunk_summaries.c.nonfinite, chunk_summaries.c.blocks,
        )
        .select_from(
            tags.outerjoin(chunk_table, sa.and_(chunk_table.c.id == newest, chunk_table.c.count < SMALL_CHUNK))
            .outerjoin(chunk_summaries, chunk_summaries.c.chunk_id == chunk_table.c.id)
        )
        .where(tags.c.run_id.in_(sa.bindparam("run_ids", expanding=True)), tags.c.name.in_(sa.bindparam("names", expanding=True)))
    )


_LAST_CHUNKS = _last_chunks_query()  # built once: every append runs it
_GROW_CHUNK = chunk_table.update().where(chunk_table.c.id == sa.bindparam("chunk_id"))
_GROW_SUMMARY = chunk_summaries.update().where(chunk_summaries.c.chunk_id == sa.bindparam("summarised"))


def _add_tags(conn: Connection, keys: list[tuple[int, str]]) -> dict[tuple[int, str], int]:
    """Store new tags, (run id, name) each (their runs' rows are locked: no one else adds
    them meanwhile)."""
    if not keys:
        return {}
    added = conn.execute(tags.insert().returning(tags.c.run_id, tags.c.name, tags.c.id),
                         [{"run_id": run_id, "name": name} for run_id, name in keys])
    return {(run_id, name): tag_id for run_id, name, tag_id in added}


def _grown_rows(last: _LastChunk, columns: tuple[np.ndarray, ...]) -> tuple[dict, dict]:
    """The rows of a tag's last chunk and its summary once these writes are added: the new
    writes packed as a part of their own after the chunk's bytes (`app.store.chunks.append`;
    the chunk packed whole again when it cannot take a part), and its summary extended by
    theirs.  A chunk without a summary to extend is summarised whole."""
    if last.summary is None:
        return _chunk_row(last.tag_id, *_with_writes(last, columns))
    data = chunks.append(last.data, *columns) or chunks.pack(*_with_writes(last, columns))
    step = columns[0]
    row = {
        "tag_id": last.tag_id,
        "count": last.count + len(step),
        "first_step": min(int(last.first_step), int(step.min())),
        "last_step": max(int(last.last_step), int(step.max())),
        "data": data,
    }
    return row, grown_columns(last.summary, *columns)


def _with_writes(last: _LastChunk, columns: tuple[np.ndarray, ...]) -> list[np.ndarray]:
    """The chunk's columns, unpacked, with these writes after its own."""
    return [np.concatenate([old, new]) for old, new in zip(chunks.unpack(last.data, last.count), columns)]


def _chunk_row(tag_id: int, step: np.ndarray, segment: np.ndarray, wall_time: np.ndarray, value: np.ndarray) -> tuple[dict, dict]:
    """A chunk's row, and its summary's (without the chunk's id)."""
    row = {
        "tag_id": tag_id,
        "count": len(step),
        "first_step": int(step.min()),
        "last_step": int(step.max()),
        "data": chunks.pack(step, segment, wall_time, value),
    }
    return row, summary_columns(step, segment, wall_time, value)


def delete_points(conn: Connection, run_id: int) -> None:
    """Forget a run's points and rollbacks (a text log re-read whole after it changed)."""
    tag_ids = sa.select(tags.c.id).where(tags.c.run_id == run_id)
    conn.execute(chunk_table.delete().where(chunk_table.c.tag_id.in_(tag_ids)))
    conn.execute(rollbacks.delete().where(rollbacks.c.run_id == run_id))
    streams.forget(conn, run_id)  # its analysis saw the points replaced


def delete_files(conn: Connection, run_id: int) -> None:
    """Forget how far each of a run's files was read (a run read again from the start)."""
    conn.execute(files.delete().where(files.c.run_id == run_id))


def load_writes(conn: Connection, run_id: int) -> dict[str, TagWrites]:
    """Every stored write of every tag of a run, in write order."""
    query = (
        sa.select(tags.c.name, chunk_table.c.count, chunk_table.c.data)
        .join(chunk_table, chunk_table.c.tag_id == tags.c.id)
        .where(tags.c.run_id == run_id)
        .order_by(tags.c.id, chunk_table.c.id)
    )
    parts: dict[str, list[tuple[np.ndarray, ...]]] = {}
    for name, count, data in conn.execute(query):
        parts.setdefault(name, []).append(chunks.unpack_series(data, count))
    return {
        name: TagWrites(
            step=np.concatenate([p[0] for p in pieces]),
            value=np.concatenate([p[2] for p in pieces]),
            segment=np.concatenate([p[1] for p in pieces]),
        )
        for name, pieces in parts.items()
    }


def add_rollbacks(conn: Connection, run_id: int, found: tuple[Rollback, ...]) -> None:
    if found:
        conn.execute(
            rollbacks.insert(),
            [
                {"run_id": run_id, "from_step": r.from_step, "to_step": r.to_step, "segment": r.segment,
                 "file": r.source, "wall_time": r.wall_time, "purge": int(r.purge), "tags": list(r.tags) or None}
                for r in found
            ],
        )


def load_resumes(conn: Connection, run_id: int) -> tuple[Resume, ...]:
    query = sa.select(rollbacks).where(rollbacks.c.run_id == run_id).order_by(rollbacks.c.segment)
    return tuple(Resume(r.from_step, r.to_step, r.segment, r.wall_time, tuple(r.tags or ())) for r in conn.execute(query))


@dataclass(frozen=True)
class RunSave:
    """What storing points changes in a run's row (`save_runs`)."""

    run_id: int
    state: RunState
    points: int
    last_step: int | None
    now: float
    liveness: Mapping[str, object]
    dirty: bool


def save_runs(conn: Connection, saves: Sequence[RunSave]) -> None:
    """Several runs' rows after storing points, in one statement per set of columns written
    (usually one): each run's state and counts, its `liveness` columns (app/liveness.py)
    and, when `dirty`, waiting for analysis since `now` unless it already was."""
    batches: dict[tuple[tuple[str, ...], bool], list[dict]] = {}
    for save in saves:
        values = {"state": _state_json(save.state), "points": save.points, "last_step": save.last_step,
                  "updated_at": save.now, **save.liveness}
        params = {f"v_{column}": value for column, value in values.items()}
        batches.setdefault((tuple(sorted(values)), save.dirty), []).append({**params, "run_id": save.run_id, "dirty_at": save.now})
    for (columns, dirty), params in batches.items():
        conn.execute(_save_statement(columns, dirty), params)


def update_run(conn: Connection, run_id: int, values: Mapping[str, object]) -> None:
    """Set these columns of the run's row (what an analysis applied records)."""
    params = {f"v_{column}": value for column, value in values.items()}
    conn.execute(_save_statement(tuple(sorted(values)), False), {**params, "run_id": run_id})


@functools.cache
def _save_statement(columns: tuple[str, ...], dirty: bool) -> sa.Executable:
    """Built once per set of columns: every append runs it."""
    values = {column: sa.bindparam(f"v_{column}", type_=runs.c[column].type) for column in columns}
    if dirty:
        values["dirty_since"] = sa.func.coalesce(runs.c.dirty_since, sa.bindparam("dirty_at"))
    return runs.update().where(runs.c.id == sa.bindparam("run_id")).values(**values)


def _insert(dialect: str):
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert


def _state_json(state: RunState) -> dict:
    return {
        "segment": state.segments.segment,
        "max_step": state.segments.max_step,
        "plugins": state.plugins,
    }


def _state(data: dict) -> RunState:
    return RunState(SegmentState(data["segment"], {k: int(v) for k, v in data["max_step"].items()}), dict(data["plugins"]))


def get_run(conn: Connection, run_id: int) -> StoredRun:
    return _stored(conn.execute(sa.select(runs).where(runs.c.id == run_id)).one())


def find_runs(conn: Connection, name: str, source: str | None = None) -> list[StoredRun]:
    """Runs called `name` (under `source` when given): several logdirs may each have one."""
    query = sa.select(runs).where(runs.c.name == name)
    if source is not None:
        query = query.where(runs.c.source == source)
    return [_stored(row) for row in conn.execute(query.order_by(runs.c.source))]


def run_states(conn: Connection, source: str, names: list[str]) -> dict[str, tuple[int, RunState]]:
    """Name -> (run id, state of its files' reading), of these names under `source` that are
    stored (one query of those columns: a scan needs no more of a run to read its files, and
    decoding a whole row's JSON columns was a few percent of a cron tick)."""
    query = sa.select(runs.c.name, runs.c.id, runs.c.state).where(runs.c.source == source, runs.c.name.in_(names))
    return {name: (run_id, _state(state)) for name, run_id, state in conn.execute(query)}


def runs_by_id(conn: Connection, ids: Sequence[int]) -> dict[int, StoredRun]:
    """Id -> run, of these ids that are stored (one query)."""
    return {row.id: _stored(row) for row in conn.execute(sa.select(runs).where(runs.c.id.in_(list(ids))))}


def list_runs(conn: Connection) -> list[StoredRun]:
    return [_stored(row) for row in conn.execute(sa.select(runs).order_by(runs.c.source, runs.c.name))]


def tag_summary(conn: Connection, run_id: int) -> list[tuple[str, int, int, int]]:
    """(tag, writes, first step, last step) of each tag of a run."""
    query = (
        sa.select(tags.c.name, sa.func.sum(chunk_table.c.count), sa.func.min(chunk_table.c.first_step),
                  sa.func.max(chunk_table.c.last_step))
        .join(chunk_table, chunk_table.c.tag_id == tags.c.id)
        .where(tags.c.run_id == run_id)
        .group_by(tags.c.name)
        .order_by(tags.c.name)
    )
    return [(name, int(n), int(first), int(last)) for name, n, first, last in conn.execute(query)]


def load_tag_writes(conn: Connection, run_id: int, tag: str, from_step: int | None = None) -> TagWrites | None:
    """Every write of one tag (those of chunks reaching `from_step` or later), in write order."""
    found = load_tag_writes_timed(conn, run_id, tag, from_step)
    return found[0] if found is not None else None


def load_tag_writes_timed(
    conn: Connection, run_id: int, tag: str, from_step: int | None = None
) -> tuple[TagWrites, np.ndarray] | None:
    """`load_tag_writes` and each write's wall time (NaN where none was recorded): what tells
    a retry, which sends a point's wall time again, from a job going over its steps again."""
    query = (
        sa.select(chunk_table.c.count, chunk_table.c.data)
        .join(tags, tags.c.id == chunk_table.c.tag_id)
        .where(tags.c.run_id == run_id, tags.c.name == tag)
        .order_by(chunk_table.c.id)
    )
    if from_step is not None:
        query = query.where(chunk_table.c.last_step >= from_step)
    pieces = [chunks.unpack(data, count) for count, data in conn.execute(query)]
    if not pieces:
        return None
    writes = TagWrites(
        step=np.concatenate([p[0] for p in pieces]),
        value=np.concatenate([p[3] for p in pieces]),
        segment=np.concatenate([p[1] for p in pieces]),
    )
    return writes, np.concatenate([p[2] for p in pieces])


@dataclass(frozen=True)
class ChunkSpan:
    """Where one stored chunk of a tag's writes lies, and what its summary columns say,
    without its data."""

    id: int
    count: int
    first_step: int
    last_step: int
    ordered: bool = False
    min_segment: int | None = None
    nonfinite: int | None = None
    summarized: bool = False  # its per-block summary is stored (app/store/summaries.py)


def tag_chunks(conn: Connection, run_id: int, tag: str, start: int | None, end: int | None) -> list[ChunkSpan] | None:
    """The chunks of one tag holding writes in [start, end] (None: unbounded), in write
    order; None when the run has no such tag."""
    tag_id = conn.execute(sa.select(tags.c.id).where(tags.c.run_id == run_id, tags.c.name == tag)).scalar()
    if tag_id is None:
        return None
    query = sa.select(
        chunk_table.c.id, chunk_table.c.count, chunk_table.c.first_step, chunk_table.c.last_step,
        chunk_summaries.c.ordered == 1, chunk_summaries.c.min_segment, chunk_summaries.c.nonfinite,
        chunk_summaries.c.chunk_id.is_not(None),
    ).outerjoin(chunk_summaries, chunk_summaries.c.chunk_id == chunk_table.c.id).where(chunk_table.c.tag_id == tag_id)
    if start is not None:
        query = query.where(chunk_table.c.last_step >= start)
    if end is not None:
        query = query.where(chunk_table.c.first_step <= end)
    return [
        ChunkSpan(i, n, first, last, bool(ordered), low, bad, bool(summarized))
        for i, n, first, last, ordered, low, bad, summarized in conn.execute(query.order_by(chunk_table.c.id))
    ]


SERIES_BATCH = 8  # chunks fetched per query while walking a tag: a few MB at most


def current_points(
    conn: Connection, spans: list[ChunkSpan], start: int | None, end: int | None, resume_to: Mapping[int, int],
    wall_time: bool = False,
) -> Iterator[tuple[np.ndarray, ...]]:
    """(step, value) of a tag's current view within [start, end] (with `wall_time`: (step,
    value, wall time)), one chunk at a time, latest write first, each step once: the series
    of a run of millions of points is never held whole.

    The current view is decided step by step (`analyzers.series`): a write is in it when no
    later resume hides it and no later unhidden write of its step exists.  Walking the
    chunks from the latest, a chunk's unhidden steps are remembered only where an earlier
    chunk's step range reaches them (a rollback or a late write), so an append-only tag
    remembers nothing."""
    if not spans:
        return
    lows = np.array([s.first_step for s in spans], np.int64)
    highs = np.array([s.last_step for s in spans], np.int64)
    earlier_low = np.minimum.accumulate(lows)  # [i]: the lowest step of chunks 0..i
    earlier_high = np.maximum.accumulate(highs)
    later: list[np.ndarray] = []  # sorted unhidden steps of later chunks that earlier ones reach
    for batch_end in range(len(spans), 0, -SERIES_BATCH):
        batch = range(batch_end - 1, max(batch_end - SERIES_BATCH, 0) - 1, -1)
        query = sa.select(chunk_table.c.id, chunk_table.c.data).where(chunk_table.c.id.in_([spans[i].id for i in batch]))
        data = dict(conn.execute(query).all())
        for i in batch:
            step, segment, wall, value = chunks.unpack(data.pop(spans[i].id), spans[i].count)
            if start is not None or end is not None:
                inside = _between(step, start, end)
                step, segment, wall, value = step[inside], segment[inside], wall[inside], value[inside]
            shown = ~hidden_by_resumes(step, segment, resume_to)
            step, wall, value = step[shown], wall[shown], value[shown]
            if len(step) > 1 and not np.all(step[1:] > step[:-1]):
                _, last = np.unique(step[::-1], return_index=True)  # the latest write of each step
                keep = np.sort(len(step) - 1 - last)
                step, wall, value = step[keep], wall[keep], value[keep]
            if later and len(step):
                superseded = np.zeros(len(step), bool)
                for steps in later:
                    if steps[0] <= step.max() and steps[-1] >= step.min():
                        superseded |= np.isin(step, steps)
                step, wall, value = step[~superseded], wall[~superseded], value[~superseded]
            if i > 0:
                reached = step[(step >= earlier_low[i - 1]) & (step <= earlier_high[i - 1])]
                if len(reached):
                    later.append(np.sort(reached))
            yield (step, value, wall) if wall_time else (step, value)


def _between(step: np.ndarray, start: int | None, end: int | None) -> np.ndarray:
    inside = np.ones(len(step), bool)
    if start is not None:
        inside &= step >= start
    if end is not None:
        inside &= step <= end
    return inside


def rollback_rows(conn: Connection, run_id: int) -> list[dict]:
    query = sa.select(rollbacks).where(rollbacks.c.run_id == run_id).order_by(rollbacks.c.segment)
    return [
        {"from_step": r.from_step, "to_step": r.to_step, "segment": r.segment, "file": r.file,
         "wall_time": r.wall_time, "purge": bool(r.purge), "tags": r.tags}
        for r in conn.execute(query)
    ]


def _stored(row) -> StoredRun:
    return StoredRun(
        row.id, row.source, row.name, _state(row.state), row.last_step, row.points, row.updated_at,
        row.analyzed_at, row.analyzed_points, row.analysis_error, row.health, row.last_seen_at, row.finished_at,
        row.pace,
    )


def claim_dirty_runs(conn: Connection, analysed_before: float, now: float, limit: int) -> list[StoredRun]:
    """Up to `limit` runs whose points have waited for the deferred analysis since
    `analysed_before` or longer and that were not analysed since, oldest waiting first,
    marked analysed at `now` so that another worker's loop (or an append's inline analysis)
    leaves them to this one: two workers analysed each waiting run twice, the second
    analysis dropped.  A run that started waiting later is left to its own posts: a training
    loop still posting gets its analysis in an answer once per interval, as when alone.  One
    claimed and not applied (the worker died) is claimed again once `now` is past the
    interval.  Rows locked by a writer are skipped on PostgreSQL (taken at the next round),
    so a claim never waits for, or deadlocks with, a group of appends."""
    waiting = (
        sa.select(runs.c.id)
        .where(runs.c.dirty_since <= analysed_before,
               sa.or_(runs.c.analyzed_at.is_(None), runs.c.analyzed_at <= analysed_before))
        .order_by(runs.c.dirty_since, runs.c.id)
        .limit(limit)
    )
    if conn.dialect.name == "postgresql":
        waiting = waiting.with_for_update(skip_locked=True)
    claimed = conn.execute(runs.update().where(runs.c.id.in_(waiting.scalar_subquery())).values(analyzed_at=now)
                           .returning(*runs.c))
    return sorted((_stored(row) for row in claimed), key=lambda run: (run.source, run.name))


def owed_runs(conn: Connection, sources: Sequence[str]) -> list[StoredRun]:
    """Runs of these sources whose stored points still wait for their analysis (a scan that
    analyses apart from storing was stopped in between), in (source, name) order."""
    if not sources:
        return []
    query = sa.select(runs).where(runs.c.dirty_since.is_not(None), runs.c.source.in_(list(sources)))
    return [_stored(row) for row in conn.execute(query.order_by(runs.c.source, runs.c.name))]


def quiet_runs(conn: Connection, seen_before: float, sources: list[str] | None = None) -> list[StoredRun]:
    """The runs whose `stale` alert may have to change: those not finished, seen last before
    `seen_before` and without an open stale alert about their last step (one that is open
    stays so until the run moves), and those whose open stale alert is about another step
    or a run since marked finished (it may have to resolve).  A service asks this every few
    seconds: runs already judged cost nothing."""
    open_stale = sa.and_(alerts.c.run_id == runs.c.id, alerts.c.kind == "stale", alerts.c.state != "resolved")
    judged = sa.exists().where(open_stale, alerts.c.start_step == runs.c.last_step)
    outdated = sa.exists().where(open_stale, sa.or_(alerts.c.start_step != runs.c.last_step, runs.c.finished_at.is_not(None)))
    query = sa.select(runs).where(
        sa.or_(sa.and_(runs.c.finished_at.is_(None), runs.c.last_seen_at < seen_before, ~judged), outdated)
    )
    if sources is not None:
        query = query.where(runs.c.source.in_(sources))
    return [_stored(row) for row in conn.execute(query.order_by(runs.c.id))]


@dataclass(frozen=True)
class RunPace:
    """What /metrics exports of a run (no points, no reading state)."""

    id: int
    source: str
    name: str
    last_step: int | None
    last_seen_at: float | None
    pace: dict | None


def recent_runs(conn: Connection, limit: int) -> list[RunPace]:
    """The `limit` runs that advanced most recently (the metrics endpoint's cardinality cap)."""
    query = (
        sa.select(runs.c.id, runs.c.source, runs.c.name, runs.c.last_step, runs.c.last_seen_at, runs.c.pace)
        .order_by(sa.func.coalesce(runs.c.last_seen_at, runs.c.updated_at).desc(), runs.c.id)
        .limit(limit)
    )
    return [RunPace(*row) for row in conn.execute(query)]


def count_runs(conn: Connection) -> int:
    return int(conn.execute(sa.select(sa.func.count()).select_from(runs)).scalar_one())

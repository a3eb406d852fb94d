"""A run's streaming analysis at rest: its state (saved in the transaction that applies the
analysis, so the state, the alerts and the points it saw commit together), where each
tag's fed writes end, and the checkpoints a rollback replays from.  Reads here touch only
the chunks not yet fed (a tag's last one, usually) or, for a replay, those after a
checkpoint: never the whole run."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from analyzers.series import TagWrites
from app.store import chunks
from app.store.schema import chunks as chunk_table
from app.store.schema import stream_checkpoints, stream_states, tags

CHECKPOINT_POINTS = 65536  # a checkpoint every 64 small chunks' worth of points
CHECKPOINTS_KEPT = 12  # the newest 4 and older ones thinned to a roughly doubling spacing


@dataclass(frozen=True)
class SavedState:
    data: bytes
    positions: dict[str, tuple[int, int]]  # tag -> (last chunk fed, writes of it fed)
    version: int
    points: int
    checkpoint: int  # points of the run's newest checkpoint (0: none)


@dataclass(frozen=True)
class Checkpoint:
    id: int
    points: int
    fed: dict[str, int]  # tag -> last step fed


def load_state(conn: Connection, run_id: int) -> SavedState | None:
    """The run's saved state and where its newest checkpoint stands, in one query (an
    analysed append runs it)."""
    row = conn.execute(_LOAD_STATE, {"run_id": run_id}).first()
    return None if row is None else _saved_state(row)


def load_states(conn: Connection, run_ids: list[int]) -> dict[int, SavedState]:
    """`load_state` of several runs in one query (a scan's batch); a run without a saved
    state is absent."""
    return {row.run_id: _saved_state(row) for row in conn.execute(_LOAD_STATES, {"run_ids": run_ids})}


def _saved_state(row) -> SavedState:
    positions = {tag: (int(c), int(n)) for tag, (c, n) in row.positions.items()}
    return SavedState(row.data, positions, row.version, row.points, row.checkpoint or 0)


def _load_state_query(runs: sa.ColumnElement[bool]) -> sa.Select:
    newest = (
        sa.select(sa.func.max(stream_checkpoints.c.points))
        .where(stream_checkpoints.c.run_id == stream_states.c.run_id)
        .scalar_subquery()
    )
    return sa.select(stream_states, newest.label("checkpoint")).where(runs)


# Built once: every analysed append runs one.
_LOAD_STATE = _load_state_query(stream_states.c.run_id == sa.bindparam("run_id"))
_LOAD_STATES = _load_state_query(stream_states.c.run_id.in_(sa.bindparam("run_ids", expanding=True)))


def save_state(conn: Connection, run_id: int, data: bytes, positions: dict[str, tuple[int, int]], points: int,
               version: int | None) -> bool:
    """Save the state an analysis reached from `version` (None: from no state); False, and
    nothing saved, when another analysis saved one since."""
    values = {"data": data, "positions": {t: list(p) for t, p in positions.items()}, "points": points}
    if version is None:
        if conn.execute(sa.select(stream_states.c.run_id).where(stream_states.c.run_id == run_id)).first():
            return False
        conn.execute(stream_states.insert().values(run_id=run_id, version=1, **values))
        return True
    params = {f"s_{name}": value for name, value in values.items()}
    moved = conn.execute(_SAVE_STATE, {**params, "s_run_id": run_id, "s_from": version, "s_version": version + 1})
    return moved.rowcount == 1


# Built once: every analysis runs it.
_SAVE_STATE = (
    stream_states.update()
    .where(stream_states.c.run_id == sa.bindparam("s_run_id"), stream_states.c.version == sa.bindparam("s_from"))
    .values({name: sa.bindparam(f"s_{name}", type_=stream_states.c[name].type) for name in ("version", "data", "positions", "points")})
)


def forget(conn: Connection, run_id: int) -> None:
    """Drop the state and checkpoints (the run's points were replaced)."""
    conn.execute(stream_states.delete().where(stream_states.c.run_id == run_id))
    conn.execute(stream_checkpoints.delete().where(stream_checkpoints.c.run_id == run_id))


def _tag_ids(conn: Connection, run_id: int) -> list[tuple[str, int]]:
    """The run's tags in the order they were first stored (the order a batch read gives)."""
    return list(conn.execute(sa.select(tags.c.name, tags.c.id).where(tags.c.run_id == run_id).order_by(tags.c.id)).all())


def new_writes(
    conn: Connection, run_id: int, positions: dict[str, tuple[int, int]]
) -> tuple[dict[str, TagWrites], dict[str, tuple[int, int]]]:
    """The writes stored since `positions`, per tag in write order, and the positions after
    them (one query: each tag's chunks from its last one fed on, every chunk of a tag not
    fed yet).  A tag's last chunk may have grown since (small appends go into it): only its
    writes past those fed are new, and only the parts holding them are decoded."""
    params = {"run_id": run_id}
    for i, (name, (chunk_id, _)) in enumerate(positions.items()):
        params |= {f"tag_{i}": name, f"since_{i}": chunk_id}
    pieces: dict[str, list] = {}
    after = dict(positions)
    for name, cid, count, data in conn.execute(_new_writes_query(len(positions)), params):
        chunk_id, fed = positions.get(name, (0, 0))
        skip = fed if cid == chunk_id else 0
        if count > skip:
            step, segment, value = chunks.unpack_series(data, count, skip)
            pieces.setdefault(name, []).append((step, value, segment))
        after[name] = (cid, count)
    return {name: _joined(parts) for name, parts in pieces.items()}, after


@functools.cache
def _new_writes_query(tags_fed: int) -> sa.Select:
    """`new_writes`' query for a state that fed this many tags, built once (every analysis
    runs it; building and compiling it cost more than running it): each tag's chunks from
    its last one fed on."""
    since = sa.case(
        {sa.bindparam(f"tag_{i}", type_=sa.Text): sa.bindparam(f"since_{i}", type_=sa.Integer) for i in range(tags_fed)},
        value=tags.c.name, else_=0,
    ) if tags_fed else sa.literal(0)
    return (
        sa.select(tags.c.name, chunk_table.c.id, chunk_table.c.count, chunk_table.c.data)
        .join(chunk_table, chunk_table.c.tag_id == tags.c.id)
        .where(tags.c.run_id == sa.bindparam("run_id"), chunk_table.c.id >= since)
        .order_by(tags.c.id, chunk_table.c.id)
    )


def writes_after(conn: Connection, run_id: int, fed: dict[str, int]) -> tuple[dict[str, TagWrites], dict[str, tuple[int, int]]]:
    """Every write at a step past `fed` (tag -> last step a checkpoint fed; every write of
    a tag it has not seen), from the chunks reaching past it, and the positions at the end."""
    out: dict[str, TagWrites] = {}
    positions: dict[str, tuple[int, int]] = {}
    for name, tag_id in _tag_ids(conn, run_id):
        after = fed.get(name, -1)
        query = (
            sa.select(chunk_table.c.count, chunk_table.c.data)
            .where(chunk_table.c.tag_id == tag_id, chunk_table.c.last_step > after)
            .order_by(chunk_table.c.id)
        )
        pieces = []
        for count, data in conn.execute(query):
            step, segment, value = chunks.unpack_series(data, count)
            keep = step > after
            pieces.append((step[keep], value[keep], segment[keep]))
        last = conn.execute(
            sa.select(chunk_table.c.id, chunk_table.c.count).where(chunk_table.c.tag_id == tag_id)
            .order_by(chunk_table.c.id.desc()).limit(1)
        ).first()
        if last is not None:
            positions[name] = (int(last.id), int(last.count))
        if pieces:
            out[name] = _joined(pieces)
    return out, positions


def _joined(pieces: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> TagWrites:
    return TagWrites(
        step=np.concatenate([p[0] for p in pieces]),
        value=np.concatenate([p[1] for p in pieces]),
        segment=np.concatenate([p[2] for p in pieces]),
    )


def checkpoints(conn: Connection, run_id: int) -> list[Checkpoint]:
    """The run's checkpoints, oldest first."""
    query = sa.select(stream_checkpoints.c.id, stream_checkpoints.c.points, stream_checkpoints.c.fed).where(
        stream_checkpoints.c.run_id == run_id
    )
    return [Checkpoint(i, p, {t: int(s) for t, s in f.items()}) for i, p, f in conn.execute(query.order_by(stream_checkpoints.c.points))]


def latest_checkpoint(conn: Connection, run_id: int, upto: int | None = None) -> int:
    """Points of the run's newest checkpoint (at most `upto`), 0 when none."""
    query = sa.select(sa.func.max(stream_checkpoints.c.points)).where(stream_checkpoints.c.run_id == run_id)
    if upto is not None:
        query = query.where(stream_checkpoints.c.points <= upto)
    return conn.execute(query).scalar() or 0


def checkpoint_data(conn: Connection, checkpoint_id: int) -> bytes:
    return conn.execute(sa.select(stream_checkpoints.c.data).where(stream_checkpoints.c.id == checkpoint_id)).scalar_one()


def add_checkpoint(conn: Connection, run_id: int, data: bytes, points: int, fed: dict[str, int]) -> None:
    """Keep this state as a checkpoint, and thin the older ones: the newest 4 stay, and of
    the rest the one closest to its older neighbour goes until CHECKPOINTS_KEPT remain, so
    the kept ones reach back roughly twice as far with each step back."""
    conn.execute(stream_checkpoints.insert().values(run_id=run_id, points=points, fed=fed, data=data))
    kept = checkpoints(conn, run_id)
    while len(kept) > CHECKPOINTS_KEPT:
        older = kept[:-4]
        gaps = [older[i].points - older[i - 1].points for i in range(1, len(older))]
        drop = older[1 + int(np.argmin(gaps))] if gaps else older[0]
        conn.execute(stream_checkpoints.delete().where(stream_checkpoints.c.id == drop.id))
        kept = [c for c in kept if c.id != drop.id]


def drop_checkpoints_after(conn: Connection, run_id: int, points: int) -> None:
    """Checkpoints newer than the one a replay started from saw rewritten steps: gone."""
    conn.execute(
        stream_checkpoints.delete().where(stream_checkpoints.c.run_id == run_id, stream_checkpoints.c.points > points)
    )

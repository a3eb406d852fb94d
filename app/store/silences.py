"""Silences at rest, and which alerts the active ones silence."""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.alerts.lifecycle import AlertRecord
from app.alerts.silences import MATCHERS, Silence
from app.store.schema import silences


def add(conn: Connection, silence: Silence) -> Silence:
    values = {name: silence.matchers.get(name) for name in MATCHERS}
    result = conn.execute(silences.insert().values(
        created_by=silence.created_by, comment=silence.comment, created_at=silence.created_at,
        ends_at=silence.ends_at, **values,
    ))
    return Silence(result.inserted_primary_key[0], silence.matchers, silence.created_by, silence.comment,
                   silence.created_at, silence.ends_at)


def listed(conn: Connection, now: float | None = None) -> list[Silence]:
    """The silences active at `now` (None: every one, expired included), newest first."""
    query = sa.select(silences).order_by(silences.c.id.desc())
    if now is not None:
        query = query.where(silences.c.ends_at > now)
    return [_silence(row) for row in conn.execute(query)]


def get(conn: Connection, silence_id: int) -> Silence | None:
    row = conn.execute(sa.select(silences).where(silences.c.id == silence_id)).first()
    return _silence(row) if row else None


def expire(conn: Connection, silence_id: int, now: float) -> Silence | None:
    """End a silence now (one already over keeps its end); None if there is no such silence."""
    conn.execute(silences.update().where(silences.c.id == silence_id, silences.c.ends_at > now).values(ends_at=now))
    return get(conn, silence_id)


def silenced(conn: Connection, records: Iterable[AlertRecord], now: float) -> set[str]:
    """The ids of the alerts an active silence matches."""
    active = listed(conn, now)
    if not active:
        return set()
    return {r.id for r in records if any(s.matches(r) for s in active)}


def _silence(row) -> Silence:
    matchers = {name: getattr(row, name) for name in MATCHERS if getattr(row, name) is not None}
    return Silence(row.id, matchers, row.created_by, row.comment, row.created_at, row.ends_at)

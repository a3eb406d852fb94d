"""Logdirs the service watches.  Several service processes on one PostgreSQL share them:
each poll claims the logdirs that are due with FOR UPDATE SKIP LOCKED and pushes their next
poll time forward, so a logdir is scanned by one process at a time."""

from __future__ import annotations

import os

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.ingest.remote import is_url, url_contains
from app.store.schema import logdirs

_REGISTRATION_LOCK = 0x6C6F6764  # "logd": PostgreSQL advisory lock serialising registrations


def add_logdir(conn: Connection, path: str, now: float) -> dict | None:
    """Register a path; None if it is registered already."""
    if conn.execute(sa.select(logdirs.c.id).where(logdirs.c.path == path)).first():
        return None
    conn.execute(logdirs.insert().values(path=path, created_at=now, next_poll_at=now))
    return get_logdir(conn, path=path)


def lock_registrations(conn: Connection) -> None:
    """Until the transaction ends, no other registration runs (the overlap check and the
    insert must see the same logdirs; SQLite's write transaction already serialises them)."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _REGISTRATION_LOCK})


def overlapping(conn: Connection, path: str) -> list[dict]:
    """The watched logdirs that hold `path` or lie under it: a run under both would be
    stored twice, once under each."""
    return [row for row in list_logdirs(conn)
            if row["path"] != path and (contains(row["path"], path) or contains(path, row["path"]))]


def contains(directory: str, path: str) -> bool:
    """Whether `path` is `directory` or lies under it (both resolved already; URLs by prefix)."""
    if is_url(directory) or is_url(path):
        return is_url(directory) and is_url(path) and url_contains(directory, path)
    return os.path.commonpath([directory, path]) == directory


def get_logdir(conn: Connection, *, logdir_id: int | None = None, path: str | None = None) -> dict | None:
    query = sa.select(logdirs).where(logdirs.c.id == logdir_id if path is None else logdirs.c.path == path)
    row = conn.execute(query).first()
    return dict(row._mapping) if row else None


def list_logdirs(conn: Connection) -> list[dict]:
    return [dict(r._mapping) for r in conn.execute(sa.select(logdirs).order_by(logdirs.c.id))]


def delete_logdir(conn: Connection, logdir_id: int) -> bool:
    return conn.execute(logdirs.delete().where(logdirs.c.id == logdir_id)).rowcount == 1


def claim_due(conn: Connection, now: float, interval: float) -> list[dict]:
    """The logdirs due for a scan, their next poll moved `interval` ahead (claimed)."""
    query = sa.select(logdirs).where(logdirs.c.next_poll_at <= now).order_by(logdirs.c.next_poll_at)
    if conn.dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True)
    due = [dict(r._mapping) for r in conn.execute(query)]
    if due:
        conn.execute(
            logdirs.update().where(logdirs.c.id.in_([d["id"] for d in due])).values(next_poll_at=now + interval)
        )
    return due


def record_scan(conn: Connection, logdir_id: int, now: float, error: str | None) -> None:
    conn.execute(logdirs.update().where(logdirs.c.id == logdir_id).values(last_scan_at=now, last_error=error))

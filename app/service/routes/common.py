"""What every route needs: the store, the settings, a run found by name, a bounded body."""

from __future__ import annotations

from fastapi import Request
from sqlalchemy.engine import Connection

from app.service.errors import ApiError
from app.service.settings import Settings
from app.store import runs as stored_runs
from app.store.db import Store
from app.store.runs import StoredRun


def store_of(request: Request) -> Store:
    return request.app.state.store


def settings_of(request: Request) -> Settings:
    return request.app.state.settings


def one_run(conn: Connection, name: str, source: str | None) -> StoredRun:
    """The run called `name`: 404 if there is none, 409 if several logdirs have one."""
    found = stored_runs.find_runs(conn, name, source)
    if not found:
        raise ApiError(404, "not_found", f"no run {name!r}" + (f" in {source!r}" if source else ""))
    if len(found) > 1:
        raise ApiError(409, "ambiguous_run", f"several runs are called {name!r}: give ?source=",
                       {"sources": [r.source for r in found]})
    return found[0]


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it passes `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, "body_too_large", f"the body is {declared} bytes; the limit is {limit}")
    parts, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, "body_too_large", f"the body is over the {limit}-byte limit")
        parts.append(chunk)
    return b"".join(parts)

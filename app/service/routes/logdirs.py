"""Logdirs the service watches: only under the configured allowed roots."""

from __future__ import annotations

import os
import time

from fastapi import APIRouter, Path, Request, Response

from app.ingest.remote import is_url, normalize
from app.scan import allowed_source
from app.service.auth import READ, WRITE
from app.service.errors import ApiError
from app.service.models import Error, Logdir, LogdirBody
from app.service.routes.common import settings_of, store_of
from app.store import logdirs as stored_logdirs

router = APIRouter(prefix="/v1/logdirs", tags=["logdirs"])


def allowed(path: str, roots: tuple[str, ...]) -> str | None:
    """The real path of `path` if it lies under one of `roots` (after resolving `..` and
    symlinks on both sides), else None; a URL (`s3://...`) only under a URL root, by
    prefix.  Checked again at every poll, for the logdir and each of its files
    (`app.ingest.files`)."""
    real = normalize(path) if is_url(path) else os.path.realpath(path)
    return real if allowed_source(real, roots) else None


@router.post("", response_model=Logdir, status_code=201, dependencies=[WRITE],
             responses={403: {"model": Error}, 404: {"model": Error}, 409: {"model": Error}}, summary="Watch a logdir")
def add(body: LogdirBody, request: Request) -> Logdir:
    """The poller scans it every `poll_interval` seconds, with the same code as `losswatch scan`.
    The path may be a URL prefix (`s3://bucket/logs`) under a URL given to `--allow-root`;
    it is listed at the first poll (its errors are in `last_error`).
    A logdir that holds a watched one or lies inside one is refused (409): a run under both
    would be stored twice."""
    settings = settings_of(request)
    remote = is_url(body.path)
    if "\x00" in body.path or not (remote or os.path.isabs(body.path)):
        raise ApiError(422, "invalid_path", "the path must be absolute")
    real = allowed(body.path, settings.allowed_roots)
    if real is None:
        raise ApiError(403, "forbidden_path", "the path is outside the allowed roots")
    if not remote and not os.path.isdir(real):
        raise ApiError(404, "not_found", "no such directory")
    with store_of(request).write() as conn:
        stored_logdirs.lock_registrations(conn)
        clash = stored_logdirs.overlapping(conn, real)
        if clash:
            other = clash[0]
            where = "inside" if stored_logdirs.contains(other["path"], real) else "holds"
            raise ApiError(
                409, "overlapping_logdir",
                f"{real} {where} the watched logdir {other['path']} (id {other['id']}): "
                "a run under both would be stored twice",
                {"logdir": {"id": other["id"], "path": other["path"]}},
            )
        row = stored_logdirs.add_logdir(conn, real, time.time())
    if row is None:
        raise ApiError(409, "exists", "that logdir is already watched")
    request.app.state.wake_poller()
    return Logdir(**row)


@router.get("", response_model=list[Logdir], dependencies=[READ], summary="Watched logdirs")
def list_all(request: Request) -> list[Logdir]:
    with store_of(request).read() as conn:
        return [Logdir(**row) for row in stored_logdirs.list_logdirs(conn)]


@router.delete("/{logdir_id}", status_code=204, dependencies=[WRITE], responses={404: {"model": Error}},
               summary="Stop watching a logdir (its runs and alerts stay)")
def delete(request: Request, logdir_id: int = Path(..., ge=1, le=2**31 - 1)) -> Response:
    with store_of(request).write() as conn:
        if not stored_logdirs.delete_logdir(conn, logdir_id):
            raise ApiError(404, "not_found", f"no logdir {logdir_id}")
    return Response(status_code=204)

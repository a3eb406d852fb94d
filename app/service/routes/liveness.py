"""Marking a run finished: its job ended normally, so its silence is not a crash."""

from __future__ import annotations

import time

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from app.service.auth import WRITE
from app.service.models import AlertChange, Error
from app.service.routes.common import one_run, settings_of, store_of, utf8_url
from app.service.settings import Settings
from app.store import runs as stored_runs
from app.store.db import Store
from app.updates import Reported, finish

router = APIRouter(prefix="/v1/runs", tags=["runs"], dependencies=[Depends(utf8_url)])

_ERRORS = {401: {"model": Error}, 403: {"model": Error}, 404: {"model": Error}, 409: {"model": Error},
           422: {"model": Error}, 503: {"model": Error}}


class Finished(BaseModel):
    run: str
    source: str
    finished_at: float = Field(description="Unix time it was marked finished")
    alerts: list[AlertChange] = Field(description="alert changes this caused: an open stale alert resolves")
    model_config = ConfigDict(extra="forbid")


@router.post("/{run:path}/finish", response_model=Finished, responses=_ERRORS, dependencies=[WRITE],
             summary="Mark a run finished: no stale alert from now on")
async def post_finish(
    request: Request,
    run: str = Path(..., description="The run"),
    source: str | None = Query(None, description="The run's source when several runs share its name (posted runs: 'http')."),
) -> Finished:
    """Call it when a job ends normally (the client does on close): the run stops being
    judged stale, and an open stale alert resolves.  New points un-finish it."""
    source, changes, at = await run_in_threadpool(_finish, store_of(request), settings_of(request), run, source, time.time())
    return Finished(
        run=run, source=source, finished_at=at,
        alerts=[{"change": r.event.change.value, "state": r.event.record.state.value, "step": r.event.step,
                 "reason": r.event.reason or None, "alert": r.event.record.finding} for r in changes],
    )


def _finish(store: Store, settings: Settings, run: str, source: str | None, now: float) -> tuple[str, list[Reported], float]:
    with store.write() as conn:
        found = one_run(conn, run, source)
        locked = stored_runs.lock_run(conn, found.source, found.name, now)
        return found.source, finish(conn, locked, settings.analysis, settings.webhooks, now), now

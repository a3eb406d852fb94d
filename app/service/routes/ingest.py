"""POST points and event-file bytes to a run."""

from __future__ import annotations

import time

from fastapi import APIRouter, Path, Query, Request
from starlette.concurrency import run_in_threadpool

from app.service.auth import WRITE
from app.service.ingest import IngestResult, ingest_events, ingest_json, rollback
from app.service.models import Error, IngestResponse, RollbackBody
from app.service.routes.common import read_body, settings_of, store_of

router = APIRouter(prefix="/v1/runs", tags=["ingest"])

RunName = Path(..., min_length=1, max_length=512, description="The run; posted runs live under the source 'http'.")
_ERRORS = {401: {"model": Error}, 403: {"model": Error}, 413: {"model": Error}, 422: {"model": Error}}

_POINTS_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {"type": "object"},
                "examples": {
                    "canonical": {"value": {"points": [{"step": 10, "tag": "train/loss", "value": 2.31, "wall_time": 1700000000.0}]}},
                    "wide rows": {"value": [{"step": 10, "loss": 2.31, "grad_norm": 0.8, "learning_rate": 3e-4}]},
                },
            },
            "application/x-ndjson": {
                "schema": {"type": "string"},
                "example": '{"step": 10, "tag": "train/loss", "value": 2.31}\n{"step": 11, "tag": "train/loss", "value": 2.29}\n',
            },
        },
    }
}
_EVENTS_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


@router.post(
    "/{run:path}/points", response_model=IngestResponse, responses=_ERRORS, openapi_extra=_POINTS_BODY, dependencies=[WRITE],
    summary="Append points (JSON, NDJSON or wide rows)",
)
async def post_points(
    request: Request,
    run: str = RunName,
    strict: bool = Query(False, description="Reject the whole request if any record is bad."),
) -> IngestResponse:
    """Canonical `{"points": [...]}`, NDJSON (`Content-Type: application/x-ndjson`) or wide
    rows (`{"step": 10, "loss": 2.31, ...}`).  Idempotent: a point already stored with the same
    value is a duplicate; a different value for a stored step is a rewrite, as after a restart."""
    settings = settings_of(request)
    body = await read_body(request, settings.max_body_bytes)
    ndjson = request.headers.get("content-type", "").startswith("application/x-ndjson")
    result = await run_in_threadpool(ingest_json, store_of(request), run, body, ndjson, strict, settings, time.time())
    return _response(request, run, result, "json")


@router.post(
    "/{run:path}/events", response_model=IngestResponse, responses={**_ERRORS, 409: {"model": Error}},
    openapi_extra=_EVENTS_BODY, dependencies=[WRITE], summary="Append TensorBoard event-file bytes",
)
async def post_events(
    request: Request,
    run: str = RunName,
    file: str = Query(..., min_length=1, max_length=512, description="The event file's name."),
    offset: int = Query(0, ge=0, description="The byte offset in that file the body starts at."),
) -> IngestResponse:
    """The bytes of event file `file` from byte `offset` on: a whole file, or a later chunk
    of it.  The answer's `next_offset` is where the next chunk starts (a partial last record
    is not stored: send it again from there); a gap is refused with 409 and the offset expected."""
    settings = settings_of(request)
    body = await read_body(request, settings.max_body_bytes)
    result = await run_in_threadpool(ingest_events, store_of(request), run, file, offset, body, settings, time.time())
    return _response(request, run, result, "events")


@router.post(
    "/{run:path}/rollback", response_model=IngestResponse, responses={**_ERRORS, 404: {"model": Error}},
    dependencies=[WRITE], summary="Roll every tag of a posted run back to a step (a resume)",
)
async def post_rollback(request: Request, body: RollbackBody, run: str = RunName) -> IngestResponse:
    """Call it when a job resumes from a checkpoint: every tag's writes from `to_step` on are
    hidden (kept in the store, out of the current view), and the run gets a restart alert.
    A `to_step` past the run's last step changes nothing (`rollbacks` is empty)."""
    result = await run_in_threadpool(rollback, store_of(request), run, body.to_step, settings_of(request), time.time())
    return _response(request, run, result, "json")


def _response(request: Request, run: str, result: IngestResult, via: str) -> IngestResponse:
    request.app.state.metrics.points_ingested.labels(via=via).inc(result.accepted)
    return IngestResponse(
        run=run,
        accepted=result.accepted,
        duplicates=result.duplicates,
        replaced=result.replaced,
        rejected=result.rejected,
        rollbacks=result.rollbacks,
        analysis=result.analysis,
        analysis_error=result.analysis_error,
        alerts=[
            {"change": r.event.change.value, "state": r.event.record.state.value, "step": r.event.step,
             "reason": r.event.reason or None, "alert": r.event.record.finding}
            for r in result.changes
        ],
        next_offset=result.next_offset,
        end=result.end,
    )

"""Reading runs: the list, one run, a downsampled series, a run's alerts."""

from __future__ import annotations

import numpy as np
from fastapi import APIRouter, Path, Query, Request

from analyzers.roles import infer_role
from analyzers.series import current_view, resume_steps
from app.downsample import minmax_indices
from app.ingest.points import json_number
from app.service.auth import READ
from app.service.errors import ApiError
from app.service.models import AlertView, Error, RunDetail, RunSummary, SeriesResponse
from app.service.routes.alerts import alert_view
from app.service.routes.common import one_run, store_of
from app.store import alerts as stored_alerts
from app.store import runs as stored_runs

router = APIRouter(prefix="/v1/runs", tags=["runs"], dependencies=[READ])

RunName = Path(..., min_length=1, max_length=512)
Source = Query(None, description="The run's source ('http' or a logdir path) when several runs share its name.")
_NOT_FOUND = {404: {"model": Error}, 409: {"model": Error}}


@router.get("", response_model=list[RunSummary], summary="Every run, with its open alerts")
def list_runs(request: Request) -> list[RunSummary]:
    with store_of(request).read() as conn:
        runs = stored_runs.list_runs(conn)
        open_counts = stored_alerts.open_counts(conn)
    return [_summary(r, open_counts.get(r.id, {})) for r in runs]


@router.get("/{run:path}/series", response_model=SeriesResponse, responses=_NOT_FOUND, summary="One tag's points, downsampled")
def series(
    request: Request,
    run: str = RunName,
    tag: str = Query(..., min_length=1),
    start: int | None = Query(None, description="First step"),
    end: int | None = Query(None, description="Last step"),
    max_points: int = Query(2000, ge=8, le=100_000, description="At most this many points: each stretch keeps its min and max, so spikes survive"),
    source: str | None = Source,
) -> SeriesResponse:
    with store_of(request).read() as conn:
        found = one_run(conn, run, source)
        writes = stored_runs.load_tag_writes(conn, found.id, tag)
        resumes = stored_runs.load_resumes(conn, found.id)
    if writes is None:
        raise ApiError(404, "not_found", f"run {run!r} has no tag {tag!r}")
    keep = current_view(np.zeros(len(writes.step), np.int8), writes.step, writes.segment, resume_steps(resumes, tag))
    step, value = writes.step[keep], writes.value[keep]
    order = np.argsort(step, kind="stable")
    step, value = step[order], value[order]
    inside = (step >= (start if start is not None else step.min(initial=0))) & (step <= (end if end is not None else step.max(initial=0)))
    step, value = step[inside], value[inside]
    chosen = minmax_indices(step, value, max_points)
    return SeriesResponse(
        run=run, tag=tag, total=len(step), downsampled=len(chosen) < len(step),
        points=[(int(s), json_number(float(v))) for s, v in zip(step[chosen], value[chosen])],
    )


@router.get("/{run:path}/alerts", response_model=list[AlertView], responses=_NOT_FOUND, summary="A run's alerts, every state")
def run_alerts(request: Request, run: str = RunName, source: str | None = Source) -> list[AlertView]:
    with store_of(request).read() as conn:
        found = one_run(conn, run, source)
        rows = stored_alerts.query_alerts(conn, run_id=found.id)
    return [alert_view(*row) for row in rows]


@router.get("/{run:path}", response_model=RunDetail, responses=_NOT_FOUND, summary="One run: tags, rollbacks, open alerts")
def get_run(request: Request, run: str = RunName, source: str | None = Source) -> RunDetail:
    with store_of(request).read() as conn:
        found = one_run(conn, run, source)
        tags = stored_runs.tag_summary(conn, found.id)
        rollbacks = stored_runs.rollback_rows(conn, found.id)
        counts = stored_alerts.open_counts(conn).get(found.id, {})
    summary = _summary(found, counts)
    return RunDetail(
        **summary.model_dump(),
        tags=[{"tag": t, "role": infer_role(t).value, "points": n, "first_step": a, "last_step": b} for t, n, a, b in tags],
        rollbacks=rollbacks,
    )


def _summary(run, counts: dict[str, int]) -> RunSummary:
    return RunSummary(
        source=run.source, name=run.name, points=run.points, last_step=run.last_step, updated_at=run.updated_at,
        open_alerts={s: counts.get(s, 0) for s in ("critical", "warning", "info")}, analysis_error=run.analysis_error,
    )

"""Reading runs: the list, one run, a downsampled series, a run's alerts."""

from __future__ import annotations

import time

import numpy as np
from fastapi import APIRouter, Depends, Query, Request

from analyzers.config import AnalysisConfig
from analyzers.roles import infer_role
from analyzers.series import restart_steps, resume_steps
from app import liveness
from app.axis import wants_log
from app.ingest.points import json_number
from app.ingest.textlogs import MAX_NAME, MAX_STEP
from app.service.auth import READ
from app.service.baseline_band import BAND_SIGMAS, as_detected, band_points, drawn
from app.service.errors import ApiError
from app.service.limits import HEAVY_SERIES_WRITES
from app.service.models import AlertView, BaselineResponse, Error, RunDetail, RunSummary, SeriesResponse
from app.service.routes.alerts import alert_view
from app.service.routes.common import checked_name, one_run, settings_of, store_of, utf8_url
from app.service.routes.run_names import run_name
from app.store import alerts as stored_alerts
from app.store import runs as stored_runs
from app.store.envelope import downsampled_series

router = APIRouter(prefix="/v1/runs", tags=["runs"], dependencies=[READ, Depends(utf8_url)])

RunName = Depends(run_name)
Source = Query(None, description="The run's source ('http' or a logdir path) when several runs share its name.")
_NOT_FOUND = {
    400: {"model": Error}, 401: {"model": Error}, 403: {"model": Error}, 404: {"model": Error}, 409: {"model": Error},
    422: {"model": Error},
}
_SERIES_ERRORS = {**_NOT_FOUND, 503: {"model": Error}}
_AUTH = {401: {"model": Error}, 403: {"model": Error}}


@router.get("", response_model=list[RunSummary], responses=_AUTH, summary="Every run, with its open alerts")
def list_runs(request: Request) -> list[RunSummary]:
    with store_of(request).read() as conn:
        runs = stored_runs.list_runs(conn)
        open_counts = stored_alerts.open_counts(conn)
        stale = stored_alerts.open_of_kind(conn, liveness.STALE)
    now = time.time()
    return [_summary(r, open_counts.get(r.id, {}), settings_of(request).analysis, now, r.id in stale) for r in runs]


@router.get("/{run:path}/series", response_model=SeriesResponse, responses=_SERIES_ERRORS, summary="One tag's points, downsampled")
def series(
    request: Request,
    run: str = RunName,
    tag: str = Query(..., description="The tag"),
    start: int | None = Query(None, ge=-MAX_STEP, le=MAX_STEP, description="First step (a zoomed chart may ask from below 0)"),
    end: int | None = Query(None, ge=-MAX_STEP, le=MAX_STEP, description="Last step"),
    max_points: int = Query(2000, ge=8, le=100_000, description="At most this many points: each stretch keeps its min and max, so spikes survive"),
    source: str | None = Source,
) -> SeriesResponse:
    """The tag's current view between `start` and `end`, downsampled (`app.downsample.MinMaxSketch`)
    from the chunks' summaries where they give what it keeps, else read chunk by chunk
    (`app.store.envelope`): a run of millions of points is never held whole, and a
    zoomed-out read decompresses few of its chunks.  A read over many stored points is a heavy request (503 when the service is full)."""
    _check_window(tag, start, end)
    with request.app.state.heavy.claim() as claim, store_of(request).read() as conn:
        found = one_run(conn, run, source)
        spans = _tag_spans(conn, claim, found.id, run, tag, start, end)
        resume_to = resume_steps(stored_runs.load_resumes(conn, found.id), tag)
        sketch = downsampled_series(conn, spans, start, end, resume_to, max_points).sketch
    _, step, value, wall = sketch.result_with_extra()
    return SeriesResponse(
        run=run, tag=tag, total=sketch.count, downsampled=len(step) < sketch.count,
        points=[(int(s), json_number(float(v))) for s, v in zip(step, value)],
        wall_times=[float(w) if np.isfinite(w) else None for w in wall],
        log_axis=wants_log(np.asarray(value, dtype=float)[np.isfinite(value)]),
    )


@router.get("/{run:path}/baseline", response_model=BaselineResponse, responses=_SERIES_ERRORS,
            summary="One tag's baseline and noise band, as the spike detector measures them")
def baseline(
    request: Request,
    run: str = RunName,
    tag: str = Query(..., description="The tag"),
    start: int | None = Query(None, ge=-MAX_STEP, le=MAX_STEP, description="First step"),
    end: int | None = Query(None, ge=-MAX_STEP, le=MAX_STEP, description="Last step"),
    max_points: int = Query(2000, ge=8, le=100_000, description="At most this many points, at an even stride"),
    source: str | None = Source,
) -> BaselineResponse:
    """Read whole (the trailing median of each point needs the points before it): a heavy
    request past HEAVY_SERIES_WRITES stored points, as a full series read is."""
    _check_window(tag, start, end)
    with request.app.state.heavy.claim() as claim, store_of(request).read() as conn:
        found = one_run(conn, run, source)
        spans = _tag_spans(conn, claim, found.id, run, tag, None, None)
        resumes = stored_runs.load_resumes(conn, found.id)
        chunks = list(stored_runs.current_points(conn, spans, None, None, resume_steps(resumes, tag)))
    steps = np.concatenate([c[0] for c in chunks]) if chunks else np.zeros(0, np.int64)
    values = np.concatenate([c[1] for c in chunks]) if chunks else np.zeros(0)
    config = settings_of(request).analysis.for_run(found.source, found.name)
    steps, values, averaged = as_detected(found.name, tag, steps, np.asarray(values, dtype=float), config, restart_steps(resumes, tag))
    points = band_points(steps, values, config.spikes.baseline, start, end, max_points)
    losses = drawn(steps, values, start, end, max_points) if averaged else []
    return BaselineResponse(run=run, tag=tag, sigmas=BAND_SIGMAS, points=points, averaged=averaged, losses=losses)


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
        alerting = found.id in stored_alerts.open_of_kind(conn, liveness.STALE)
    config = settings_of(request).analysis
    summary = _summary(found, counts, config, time.time(), alerting)
    return RunDetail(
        **summary.model_dump(),
        overrides=[o.label for o in config.applied(found.source, found.name)],
        tags=[{"tag": t, "role": infer_role(t, found.name).value, "points": n, "first_step": a, "last_step": b} for t, n, a, b in tags],
        rollbacks=rollbacks,
    )



def _summary(run, counts: dict[str, int], config: AnalysisConfig, now: float, alerting: bool) -> RunSummary:
    return RunSummary(
        source=run.source, name=run.name, points=run.points, last_step=run.last_step, updated_at=run.updated_at,
        open_alerts={s: counts.get(s, 0) for s in ("critical", "warning", "info")}, analysis_error=run.analysis_error,
        health=run.health, last_seen=run.last_seen_at, status=liveness.status(run, config, now, alerting),
    )


def _check_window(tag: str, start: int | None, end: int | None) -> None:
    """What a series or baseline read refuses before touching the store."""
    checked_name(tag, "tag", MAX_NAME)
    if start is not None and end is not None and start > end:
        raise ApiError(422, "invalid_request", f"start ({start}) is after end ({end})")


def _tag_spans(conn, claim, run_id: int, run: str, tag: str, start: int | None, end: int | None) -> list:
    """The tag's stored chunks between `start` and `end` (404 for a tag the run lacks); a read
    over more than HEAVY_SERIES_WRITES stored points takes a heavy-request slot."""
    spans = stored_runs.tag_chunks(conn, run_id, tag, start, end)
    if spans is None:
        raise ApiError(404, "not_found", f"run {run!r} has no tag {tag!r}")
    if sum(s.count for s in spans) > HEAVY_SERIES_WRITES:
        claim.take()
    return spans

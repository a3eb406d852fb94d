"""Health and metrics, for load balancers and Prometheus."""

from __future__ import annotations

import sqlalchemy as sa
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.service.errors import RETRY_AFTER
from app.service.models import Health
from app.service.routes.common import store_of
from app.store.db import head_revision, schema_revision, unavailable

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health, responses={503: {"model": Health}},
            summary="Is the database reachable, with the schema this losswatch needs")
def healthz(request: Request) -> Response:
    try:
        with store_of(request).read() as conn:
            revision = schema_revision(conn)
    except sa.exc.SQLAlchemyError as e:
        if not unavailable(e):
            raise
        return _unhealthy("unreachable")
    if revision is None:
        return _unhealthy("no losswatch schema: the database is empty (restart `losswatch serve` to create it)")
    if revision != head_revision():
        return _unhealthy(f"the schema is at revision {revision}; this losswatch needs {head_revision()}")
    return JSONResponse({"status": "ok", "database": "ok"})


def _unhealthy(reason: str) -> JSONResponse:
    return JSONResponse({"status": "unavailable", "database": reason}, status_code=503,
                        headers={"Retry-After": str(RETRY_AFTER)})


@router.get("/metrics", response_class=Response, summary="Prometheus metrics",
            responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

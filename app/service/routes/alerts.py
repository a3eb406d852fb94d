"""Alerts across runs: filter them, acknowledge them, silence them."""

from __future__ import annotations

from fastapi import APIRouter, Path, Query, Request

from app.alerts.lifecycle import AlertRecord
from app.service.auth import READ, WRITE
from app.service.errors import ApiError
from app.service.models import AlertView, Error, SilenceBody
from app.service.routes.common import store_of
from app.store import alerts as stored_alerts

router = APIRouter(prefix="/v1/alerts", tags=["alerts"])

ALERT_ID = "^[0-9a-f]{1,32}$"  # what alert ids look like (fingerprints): anything else names no alert
AlertId = Path(..., pattern=ALERT_ID)


def alert_view(record: AlertRecord, source: str, acknowledged: bool, silenced: bool) -> AlertView:
    return AlertView(
        id=record.id, source=source, run=record.run, state=record.state.value, severity=record.severity,
        kind=record.kind, tag=record.tag, classification=record.classification, start_step=record.start_step,
        since_step=record.since_step, since_time=record.since_time, acknowledged=acknowledged, silenced=silenced,
        inhibited_by=record.inhibited_by, finding=record.finding,
    )


@router.get("", response_model=list[AlertView], dependencies=[READ], summary="Alerts, filtered")
def list_alerts(
    request: Request,
    state: str | None = Query(None, pattern="^(pending|firing|resolved)$"),
    severity: str | None = Query(None, pattern="^(info|warning|critical)$"),
    since: float | None = Query(None, description="Only alerts whose state changed at or after this Unix time"),
    limit: int = Query(1000, ge=1, le=10_000),
) -> list[AlertView]:
    with store_of(request).read() as conn:
        rows = stored_alerts.query_alerts(conn, state=state, severity=severity, since=since, limit=limit)
    return [alert_view(*row) for row in rows]


@router.post("/{alert_id}/acknowledge", response_model=AlertView, responses={404: {"model": Error}},
             dependencies=[WRITE], summary="Acknowledge an alert")
def acknowledge(request: Request, alert_id: str = AlertId) -> AlertView:
    return _flag(request, alert_id, acknowledged=True)


@router.put("/{alert_id}/silence", response_model=AlertView, responses={404: {"model": Error}},
            dependencies=[WRITE], summary="Silence (or unsilence) an alert's webhooks")
def silence(body: SilenceBody, request: Request, alert_id: str = AlertId) -> AlertView:
    return _flag(request, alert_id, silenced=body.silenced)


def _flag(request: Request, alert_id: str, **flags: bool) -> AlertView:
    with store_of(request).write() as conn:
        if not stored_alerts.set_flags(conn, alert_id, **flags):
            raise ApiError(404, "not_found", f"no alert {alert_id!r}")
        [row] = [r for r in stored_alerts.query_alerts(conn, alert_id=alert_id)]
    return alert_view(*row)

"""Silences with matchers and an end, in the manner of Alertmanager: make, list, expire."""

from __future__ import annotations

import time

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from app.alerts.silences import Silence, SilenceError, new_silence
from app.service.auth import READ, WRITE
from app.service.errors import ApiError
from app.service.models import Error
from app.service.routes.common import store_of
from app.store import silences as stored_silences

router = APIRouter(prefix="/v1/silences", tags=["silences"])


class SilenceCreate(BaseModel):
    """A new silence: at least one matcher (globs), who and why, and its end as `ends_at`
    or `duration`.  An unknown field is a 422: a misspelt matcher must not silence more."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"example": {
        "run": "rl-*", "kind": "loss_spike", "created_by": "ann", "comment": "noisy RL runs, tuning", "duration": "2h",
    }})
    run: str | None = Field(None, description="glob on the run name")
    kind: str | None = Field(None, description="glob on the alert kind")
    tag: str | None = Field(None, description="glob on the tag")
    severity: str | None = Field(None, description="glob on the severity: info, warning, critical")
    alert_id: str | None = Field(None, description="glob on the alert id")
    created_by: str
    comment: str = ""
    ends_at: float | None = Field(None, description="Unix time the silence ends")
    duration: str | None = Field(None, description="how long from now: 2h, 90m, 1d12h")


class SilenceView(BaseModel):
    id: int
    matchers: dict[str, str]
    created_by: str
    comment: str
    created_at: float
    ends_at: float
    active: bool


def silence_view(silence: Silence, now: float) -> SilenceView:
    return SilenceView(id=silence.id, matchers=silence.matchers, created_by=silence.created_by, comment=silence.comment,
                       created_at=silence.created_at, ends_at=silence.ends_at, active=silence.active(now))


@router.post("", response_model=SilenceView, status_code=201, dependencies=[WRITE], responses={422: {"model": Error}},
             summary="Silence the alerts a set of matchers picks, until a time")
def create(body: SilenceCreate, request: Request) -> SilenceView:
    """Changes to the alerts it matches are stored and shown, and delivered nowhere (no
    webhook, no Alertmanager) while it is active."""
    now = time.time()
    matchers = body.model_dump(include={"run", "kind", "tag", "severity", "alert_id"})
    try:
        silence = new_silence(matchers, body.created_by, body.comment, now, body.ends_at, body.duration)
    except SilenceError as e:
        raise ApiError(422, "invalid_silence", str(e)) from None
    with store_of(request).write() as conn:
        return silence_view(stored_silences.add(conn, silence), now)


@router.get("", response_model=list[SilenceView], dependencies=[READ], summary="Silences, newest first")
def list_silences(request: Request, expired: bool = Query(False, description="expired ones too")) -> list[SilenceView]:
    now = time.time()
    with store_of(request).read() as conn:
        return [silence_view(s, now) for s in stored_silences.listed(conn, None if expired else now)]


@router.delete("/{silence_id}", response_model=SilenceView, dependencies=[WRITE], responses={404: {"model": Error}},
               summary="Expire a silence now")
def expire(request: Request, silence_id: int = Path(..., ge=1, le=2**31 - 1)) -> SilenceView:
    now = time.time()
    with store_of(request).write() as conn:
        silence = stored_silences.expire(conn, silence_id, now)
    if silence is None:
        raise ApiError(404, "not_found", f"no silence {silence_id}")
    return silence_view(silence, now)

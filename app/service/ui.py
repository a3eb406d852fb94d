"""The web UI: server-rendered pages (runs, a run with its charts, alerts, one alert) whose
charts read the same JSON API as any client, drawn with the bundled uPlot (no CDN)."""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import parse_qs

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from analyzers.roles import Role, infer_role
from app import liveness
from app.service import csrf
from app.service.auth import COOKIE, READ
from app.service.errors import ApiError
from app.service.routes.alerts import ALERT_ID, alert_view
from app.service.routes.common import one_run, settings_of, store_of
from app.store import alerts as stored_alerts
from app.store import runs as stored_runs
from app.store import tokens

HERE = Path(__file__).parent
STATIC = HERE / "static"
_ORDER = [Role.LOSS, Role.EVAL_LOSS, Role.GRAD_NORM, Role.LEARNING_RATE, Role.LOSS_SCALE, Role.OTHER]


def _templates() -> Jinja2Templates:
    """The pages' templates (autoescaped: every name is text), which know whether the browser
    is signed in, to offer a sign-out button."""
    templates = Jinja2Templates(directory=HERE / "templates")
    templates.env.globals["signed_in"] = lambda request: COOKIE in request.cookies
    return templates


def build_router() -> APIRouter:
    """The UI's routes (not in the OpenAPI: they are for people)."""
    templates = _templates()
    router = APIRouter(include_in_schema=False, dependencies=[READ])

    @router.get("/", response_class=HTMLResponse, name="ui_runs")
    def runs_page(request: Request) -> Response:
        with store_of(request).read() as conn:
            runs = stored_runs.list_runs(conn)
            counts = stored_alerts.open_counts(conn)
            stale = stored_alerts.open_of_kind(conn, liveness.STALE)
        config, now = settings_of(request).analysis, time.time()
        rows = [{"name": r.name, "source": r.source, "points": r.points, "last_step": r.last_step,
                 "open_alerts": counts.get(r.id, {}), "analysis_error": r.analysis_error,
                 "last_seen": _when(r.last_seen_at), "status": liveness.status(r, config, now, r.id in stale)} for r in runs]
        rows.sort(key=lambda r: (-r["open_alerts"].get("critical", 0), -r["open_alerts"].get("warning", 0), r["name"]))
        return templates.TemplateResponse(request, "runs.html", {"runs": rows})

    @router.get("/run", response_class=HTMLResponse, name="ui_run")
    def run_page(request: Request, name: str = Query(...), source: str | None = Query(None)) -> Response:
        with store_of(request).read() as conn:
            run = one_run(conn, name, source)
            tags = stored_runs.tag_summary(conn, run.id)
            rows = stored_alerts.query_alerts(conn, run_id=run.id)
            counts = stored_alerts.open_counts(conn).get(run.id, {})
            alerting = run.id in stored_alerts.open_of_kind(conn, liveness.STALE)
        charts = sorted(({"tag": t, "role": infer_role(t).value} for t, *_ in tags),
                        key=lambda c: (_ORDER.index(Role(c["role"])), c["tag"]))
        context = {
            "run": {"name": run.name, "source": run.source, "points": run.points, "last_step": run.last_step,
                    "open_alerts": counts, "analysis_error": run.analysis_error, "last_seen": _when(run.last_seen_at),
                    "status": liveness.status(run, settings_of(request).analysis, time.time(), alerting),
                    "overrides": [o.label for o in settings_of(request).analysis.applied(run.source, run.name)]},
            "tags": charts,
            "alerts": [alert_view(*row) for row in rows if row[0].inhibited_by is None],
        }
        return templates.TemplateResponse(request, "run.html", context)

    @router.get("/alerts", response_class=HTMLResponse, name="ui_alerts")
    def alerts_page(request: Request, state: str = Query(""), severity: str = Query("")) -> Response:
        if state not in ("", "pending", "firing", "resolved") or severity not in ("", "info", "warning", "critical"):
            raise ApiError(422, "invalid_request", "unknown state or severity")
        with store_of(request).read() as conn:
            rows = stored_alerts.query_alerts(conn, state=state or None, severity=severity or None)
        context = {"alerts": [alert_view(*row) for row in rows], "state": state, "severity": severity}
        return templates.TemplateResponse(request, "alerts.html", context)

    @router.get("/alert/{alert_id}", response_class=HTMLResponse, name="ui_alert")
    def alert_page(request: Request, alert_id: str) -> Response:
        if not re.fullmatch(ALERT_ID, alert_id):
            raise ApiError(404, "not_found", f"no alert {alert_id!r}")
        with store_of(request).read() as conn:
            found = stored_alerts.query_alerts(conn, alert_id=alert_id)
            if not found:
                raise ApiError(404, "not_found", f"no alert {alert_id!r}")
            alert = alert_view(*found[0])
            run = one_run(conn, alert.run, alert.source)
            tags = [t for t, *_ in stored_runs.tag_summary(conn, run.id)]
        chart_tag = alert.tag if alert.tag in tags else next((t for t in tags if infer_role(t) is Role.LOSS), tags[0] if tags else "")
        return templates.TemplateResponse(request, "alert.html", {"a": alert, "chart_tag": chart_tag})

    return router


def build_docs_router() -> APIRouter:
    """The OpenAPI description and its Swagger UI (bundled, like uPlot): as private as the
    API they describe, so they need a read token whenever the API does."""
    templates = _templates()
    router = APIRouter(include_in_schema=False, dependencies=[READ])

    @router.get("/openapi.json", name="openapi")
    def openapi(request: Request) -> JSONResponse:
        return JSONResponse(request.app.openapi())

    @router.get("/docs", response_class=HTMLResponse, name="docs")
    def docs(request: Request) -> Response:
        return templates.TemplateResponse(request, "docs.html", {})

    return router


def build_login_router() -> APIRouter:
    """Signing in sets the token as an HttpOnly, SameSite=Strict cookie (Secure over HTTPS),
    which the pages and the API accept; signing out clears it.  Both refuse other sites'
    forms (`csrf.check_origin`); their bodies are capped small (`limits.SIGN_IN_BYTES`)."""
    templates = _templates()
    router = APIRouter(include_in_schema=False)

    @router.get("/login", response_class=HTMLResponse, name="ui_login")
    def login_form(request: Request) -> Response:
        return templates.TemplateResponse(request, "login.html", {})

    @router.post("/login", name="ui_login_submit")
    async def login(request: Request) -> Response:
        csrf.check_origin(request)
        token = parse_qs((await request.body()).decode(errors="replace")).get("token", [""])[0]
        with store_of(request).read() as conn:
            known = tokens.scopes_of(conn, token) is not None
        if not known:
            return templates.TemplateResponse(request, "login.html", {"error": "unknown token"}, status_code=401)
        response = RedirectResponse(request.url_for("ui_runs"), status_code=303)
        response.set_cookie(COOKIE, token, path="/", httponly=True, samesite="strict", secure=csrf.secure_cookie(request))
        return response

    @router.post("/logout", name="ui_logout")
    async def logout(request: Request) -> Response:
        csrf.check_origin(request)
        response = RedirectResponse(request.url_for("ui_login"), status_code=303)
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict", secure=csrf.secure_cookie(request))
        return response

    return router


def _when(t: float | None) -> str:
    """A wall time as people read it in a list (UTC, to the second)."""
    return "" if t is None else datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")

"""The web UI: server-rendered pages (runs, a run with its charts, alerts, one alert) whose
charts read the same JSON API as any client, drawn with the bundled uPlot (no CDN)."""

from __future__ import annotations

import functools
import re
import time
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import parse_qs

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from analyzers.roles import infer_role
from analyzers.series import resume_steps
from app import liveness
from app.ingest.points import json_number
from app.service import csrf
from app.service import ui_views as views
from app.service.auth import COOKIE, READ
from app.service.errors import ApiError
from app.service.routes.alerts import ALERT_ID, alert_view
from app.service.routes.common import one_run, settings_of, store_of
from app.store import alerts as stored_alerts
from app.store import runs as stored_runs
from app.store import tokens

HERE = Path(__file__).parent
STATIC = HERE / "static"


@functools.cache
def _templates() -> Jinja2Templates:
    """The pages' templates (autoescaped: every name is text), which know whether the browser
    is signed in, to offer a sign-out button; built once, on first use (error pages need
    them too)."""
    templates = Jinja2Templates(directory=HERE / "templates")
    templates.env.globals["signed_in"] = lambda request: COOKIE in request.cookies
    templates.env.filters["human"] = views.human
    return templates


def _only_point(conn, run_id: int, tag: str) -> tuple[int, float | str]:
    """(step, value) of a one-point tag, for the summary table."""
    spans = stored_runs.tag_chunks(conn, run_id, tag, None, None) or []
    resume_to = resume_steps(stored_runs.load_resumes(conn, run_id), tag)
    for step, value in stored_runs.current_points(conn, spans, None, None, resume_to):
        if len(step):
            return int(step[0]), json_number(float(value[0]))
    return 0, "none"


def error_page(request: Request, status: int, message: str) -> Response:
    """An error as a page, for a person's browser (the API answers JSON)."""
    return _templates().TemplateResponse(request, "error.html", {"status": status, "message": message}, status_code=status)


def wants_page(request: Request) -> bool:
    """A browser navigating to a page (not the API, not a script's fetch)."""
    path = request.url.path
    return "text/html" in request.headers.get("accept", "") and not path.startswith(("/v1/", "/static/"))


def safe_next(target: str) -> str | None:
    """Where sign-in may return to: a path on this service only (never //host or a URL)."""
    if target.startswith("/") and not target.startswith(("//", "/\\")) and "\\" not in target and not target.startswith("/login"):
        return target
    return None


def build_router() -> APIRouter:
    """The UI's routes (not in the OpenAPI: they are for people)."""
    templates = _templates()
    router = APIRouter(include_in_schema=False, dependencies=[READ])

    @router.get("/", response_class=HTMLResponse, name="ui_runs")
    def runs_page(request: Request, q: str = Query("", max_length=500), regex: bool = Query(False),
                  page: int = Query(1, ge=1)) -> Response:
        match = views.matcher(q, regex)
        with store_of(request).read() as conn:
            runs = [r for r in stored_runs.list_runs(conn) if match(r.name)]
            counts = stored_alerts.open_counts(conn)
            incidents = stored_alerts.incident_counts(conn)
            stale = stored_alerts.open_of_kind(conn, liveness.STALE)
        config, now = settings_of(request).analysis, time.time()
        rows = [{"name": r.name, "source": r.source, "points": r.points, "last_step": r.last_step,
                 "open_alerts": counts.get(r.id, {}), "analysis_error": r.analysis_error,
                 "health": (r.health or {}).get("status"), "incidents": incidents.get(r.id, 0),
                 "last_seen": _when(r.last_seen_at), "status": liveness.status(r, config, now, r.id in stale)} for r in runs]
        rows.sort(key=lambda r: (-r["open_alerts"].get("critical", 0), -r["open_alerts"].get("warning", 0),
                                 views.natural_key(r["name"]), r["source"]))
        shown, pages = views.page_of(rows, page)
        context = {"runs": shown, "total": len(rows), "q": q, "regex": regex, "page": min(page, pages), "pages": pages}
        return templates.TemplateResponse(request, "runs.html", context)

    @router.get("/run", response_class=HTMLResponse, name="ui_run")
    def run_page(request: Request, name: str = Query(...), source: str | None = Query(None)) -> Response:
        with store_of(request).read() as conn:
            run = one_run(conn, name, source)
            tags = stored_runs.tag_summary(conn, run.id)
            rows = stored_alerts.query_alerts(conn, run_id=run.id)
            counts = stored_alerts.open_counts(conn).get(run.id, {})
            alerting = run.id in stored_alerts.open_of_kind(conn, liveness.STALE)
            groups, summary_tags = views.tag_groups(tags, run.name)
            summaries = [(t, *_only_point(conn, run.id, t)) for t in summary_tags]
        context = {
            "run": {"name": run.name, "source": run.source, "points": run.points, "last_step": run.last_step,
                    "open_alerts": counts, "analysis_error": run.analysis_error, "health": run.health,
                    "last_seen": _when(run.last_seen_at),
                    "status": liveness.status(run, settings_of(request).analysis, time.time(), alerting),
                    "overrides": [o.label for o in settings_of(request).analysis.applied(run.source, run.name)]},
            "runs": [{"name": run.name, "source": run.source}],
            "groups": groups,
            "summaries": summaries,
            "alerts": [alert_view(*row) for row in rows if row[0].inhibited_by is None],
        }
        return templates.TemplateResponse(request, "run.html", context)

    @router.get("/compare", response_class=HTMLResponse, name="ui_compare")
    def compare_page(request: Request, runs: str = Query("", max_length=10_000), run: list[str] = Query([])) -> Response:
        names = [n for n in [*runs.split(","), *run] if n]
        names = list(dict.fromkeys(names))
        if not 2 <= len(names) <= views.MAX_COMPARED:
            raise ApiError(422, "invalid_request", f"compare takes 2 to {views.MAX_COMPARED} runs (?runs=a,b), not {len(names)}")
        with store_of(request).read() as conn:
            found = [one_run(conn, n, None) for n in names]
            tags = {r.name: [t for t, points, *_ in stored_runs.tag_summary(conn, r.id) if points > 1] for r in found}
        order = sorted({t for ts in tags.values() for t in ts},
                       key=lambda t: (views.ORDER.index(infer_role(t)), t))
        charts = [{"tag": t, "role": infer_role(t).value, "runs": [n for n in names if t in tags[n]]} for t in order]
        context = {"runs": [{"name": r.name, "source": r.source} for r in found], "charts": charts}
        return templates.TemplateResponse(request, "compare.html", context)

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
            tags = stored_runs.tag_summary(conn, run.id)
        charts = views.alert_charts(alert.kind, alert.tag, [t for t, *_ in tags], run.name)
        first, last = min((a for _, _, a, _ in tags), default=0), max((b for *_, b in tags), default=0)
        window = views.alert_window(alert.finding, alert.state != "resolved" and alert.kind != "restart", first, last)
        context = {"a": alert, "charts": charts, "window": window, "runs": [{"name": run.name, "source": run.source}]}
        return templates.TemplateResponse(request, "alert.html", context)

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
    def login_form(request: Request, next: str = Query("", max_length=4096)) -> Response:
        return templates.TemplateResponse(request, "login.html", {"next": safe_next(next) or ""})

    @router.post("/login", name="ui_login_submit")
    async def login(request: Request) -> Response:
        csrf.check_origin(request)
        form = parse_qs((await request.body()).decode(errors="replace"))
        token, target = form.get("token", [""])[0], safe_next(form.get("next", [""])[0])
        with store_of(request).read() as conn:
            known = tokens.scopes_of(conn, token) is not None
        if not known:
            return templates.TemplateResponse(request, "login.html", {"error": "unknown token", "next": target or ""}, status_code=401)
        response = RedirectResponse(target or request.url_for("ui_runs"), status_code=303)
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

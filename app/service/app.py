"""`create_app(settings)`: the FastAPI app, built on demand; nothing is built at import."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from importlib.metadata import version
from urllib.parse import urlencode

import httpx
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.service import errors, ui
from app.service.append_groups import AppendGroups
from app.service.auth import Gate
from app.service.background import Background
from app.service.headers import SecurityHeaders
from app.service.limits import BodyLimit, BodyTooLarge, Slots
from app.service.metrics import Metrics
from app.service.routes import alerts, ingest, liveness, logdirs, ops, runs, silences
from app.service.routes.run_names import EncodedRunNames
from app.service.settings import Settings
from app.store.db import Timeouts, open_store

log = logging.getLogger("losswatch.http")

DESCRIPTION = """\
losswatch watches training runs' loss curves and raises alerts: loss spikes classified by
how they end (fast-recovering, slow-recovering, divergent), grad-norm explosions, NaN/Inf,
fp16 loss-scale collapse, divergence, plateaus, overfitting of eval losses, restarts; and
each run's health (healthy, unstable, diverged, stalled, overfitting, converged).

Post points from a training loop (`POST /v1/runs/{run}/points`), or register a TensorBoard
logdir (`POST /v1/logdirs`), then read runs, series and alerts. Authenticate with
`Authorization: Bearer <token>` (tokens from `losswatch token create`; read or write scope).
"""


def create_app(settings: Settings) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = open_store(settings.db_url, Timeouts(settings.db_connect_timeout, settings.db_statement_timeout))
        client = httpx.Client()
        app.state.store = store
        app.state.settings = settings
        app.state.appends = AppendGroups(store, settings)
        app.state.metrics = Metrics(store, settings.metrics_max_runs, settings.analysis)
        app.state.gate = Gate(store, settings.auth)
        log.info("auth", extra={"mode": settings.auth, "locked": app.state.gate.locked()})
        background = Background(store, settings, app.state.metrics, client)
        app.state.wake_poller = background.wake
        task = asyncio.create_task(background.run()) if settings.background else None
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            client.close()
            app.state.appends.close()
            store.close()

    app = FastAPI(title="losswatch", version=version("losswatch"), description=DESCRIPTION, lifespan=lifespan,
                  openapi_url=None, docs_url=None, redoc_url=None)  # served by ui.build_docs_router, behind READ
    app.state.heavy = Slots(settings.max_heavy_requests)
    errors.install(app)
    app.add_exception_handler(errors.ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(BodyTooLarge, _body_too_large)
    app.add_exception_handler(StarletteHTTPException, _no_route)
    app.add_middleware(EncodedRunNames)
    app.add_middleware(BodyLimit, ingest_bytes=settings.max_body_bytes)
    app.add_middleware(RequestLog)
    app.add_middleware(SecurityHeaders)
    for router in (ingest.router, liveness.router, runs.router, alerts.router, logdirs.router, ops.router, silences.router):
        app.include_router(router)
    app.include_router(ui.build_docs_router())
    app.include_router(ui.build_login_router())
    app.include_router(ui.build_router())
    app.mount("/static", StaticFiles(directory=ui.STATIC), name="static")
    return app


async def _api_error(request: Request, e: errors.ApiError):
    """API errors answer JSON; a person's browser gets a page, and one asked to sign in is
    sent to the login page, which returns it here."""
    if ui.wants_page(request):
        if e.status == 401:
            here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"{request.url_for('ui_login')}?{urlencode({'next': here})}", status_code=303)
        return ui.error_page(request, e.status, e.message)
    return JSONResponse(errors.error_body(e.code, e.message, e.details), status_code=e.status, headers=e.headers)


async def _body_too_large(_: Request, e: BodyTooLarge) -> JSONResponse:
    return JSONResponse(errors.error_body("body_too_large", e.detail), status_code=413, headers={"Connection": "close"})


async def _no_route(request: Request, e: StarletteHTTPException):
    """Starlette's own answers (no route matches, wrong method) in the API's error shape, or
    as a page for a browser."""
    code, message = {404: ("not_found", "no endpoint matches this URL"), 405: ("method_not_allowed", "this endpoint does not take that method")}.get(
        e.status_code, ("http_error", str(e.detail))
    )
    if e.status_code == 404 and ui.wants_page(request):
        return ui.error_page(request, 404, "there is no page at this address")
    return JSONResponse(errors.error_body(code, message), status_code=e.status_code, headers=e.headers)


async def _invalid_request(_: Request, e: RequestValidationError) -> JSONResponse:
    details = [{"where": ".".join(str(p) for p in err["loc"]), "reason": err["msg"]} for err in e.errors()]
    return JSONResponse(errors.error_body("invalid_request", "the request is not valid", details), status_code=422)


class RequestLog:
    """One structured log line per request (a plain ASGI middleware: Starlette's
    BaseHTTPMiddleware costs a task and a stream per request)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def remember_status(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, remember_status)
        finally:
            log.info(
                "request",
                extra={"method": scope["method"], "path": scope["path"], "status": status,
                       "ms": round((time.perf_counter() - started) * 1000, 2)},
            )

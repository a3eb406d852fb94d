"""The service's one error type, and how the lower layers' errors become HTTP answers:
translated here, once."""

from __future__ import annotations

import logging
from typing import Any

import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from app.ingest.problems import IngestError
from app.store.db import StoreError, unavailable

log = logging.getLogger("losswatch.http")

RETRY_AFTER = 5  # seconds a client is told to wait when the database is unavailable
UNAVAILABLE_MESSAGE = "the database is unavailable: try again later"


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, details: Any = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.details = status, code, message, details
        self.headers = headers


def error_body(code: str, message: str, details: Any = None) -> dict:
    body: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        body["details"] = details
    return {"error": body}


def problem_dict(problem) -> dict:
    out = {"reason": problem.reason}
    for key in ("line", "json_path", "offset"):
        value = getattr(problem, key)
        if value is not None:
            out[key] = value
    return out


def install(app: FastAPI) -> None:
    """Handlers for the lower layers' errors (ApiError's own is the app's: it knows the UI)."""

    @app.exception_handler(IngestError)
    async def ingest_error(_: Request, e: IngestError) -> JSONResponse:
        details = [problem_dict(p) for p in e.problems]
        return JSONResponse(error_body("invalid_input", "the input has bad records", details), status_code=422)

    @app.exception_handler(StoreError)
    @app.exception_handler(sa.exc.DBAPIError)
    @app.exception_handler(sa.exc.TimeoutError)
    async def store_error(request: Request, e: Exception) -> JSONResponse:
        """The database is down, unreachable, too slow or without its schema: 503, to retry
        (the cause is logged, not shown).  Any other database error is a defect: 500."""
        if not unavailable(e):
            log.error("database error", exc_info=e, extra={"path": request.url.path})
            return internal_error_response()
        log.warning("database unavailable", extra={"path": request.url.path, "error": _first_line(e)})
        return JSONResponse(
            error_body("store_unavailable", UNAVAILABLE_MESSAGE), status_code=503, headers={"Retry-After": str(RETRY_AFTER)}
        )

    @app.exception_handler(Exception)
    async def internal_error(_: Request, e: Exception) -> JSONResponse:
        # Starlette logs the traceback after this answer is sent.
        return internal_error_response()


def internal_error_response() -> JSONResponse:
    return JSONResponse(error_body("internal_error", "the service failed to answer this request"), status_code=500)


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__

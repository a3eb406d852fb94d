"""The service's one error type, and how the lower layers' errors become HTTP answers:
translated here, once."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from app.ingest.problems import IngestError
from app.store.db import StoreError


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
    async def store_error(_: Request, e: StoreError) -> JSONResponse:
        return JSONResponse(error_body("store_unavailable", str(e)), status_code=503)

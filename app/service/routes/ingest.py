"""POST points and event-file bytes to a run."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import TypeAdapter, ValidationError
from starlette.concurrency import run_in_threadpool

from app.ingest.problems import IngestError
from app.service.auth import WRITE, authorize, bearer_credentials
from app.service.errors import ApiError, problem_dict
from app.service.ingest import IngestResult, PostedPoints, ingest_events, ingest_json, rollback
from app.service.models import Error, IngestResponse, RollbackBody
from app.service.routes.common import checked_name, read_body, settings_of, store_of, utf8_url

router = APIRouter(prefix="/v1/runs", tags=["ingest"])
UTF8_URL = Depends(utf8_url)

RUN_DESCRIPTION = "The run; posted runs live under the source 'http'."
RunName = Path(..., description=RUN_DESCRIPTION)
STRICT_DESCRIPTION = "Reject the whole request if any record is bad."
MAX_OFFSET = 2**62  # beyond any file; keeps offset arithmetic inside int64
# A body this small (a training loop's few points) is written with others arriving meanwhile,
# in one transaction (app/service/append_groups.py); a larger one (a bulk load) alone.
GROUPED_BODY_BYTES = 64 << 10
_ERRORS = {
    400: {"model": Error}, 401: {"model": Error}, 403: {"model": Error}, 404: {"model": Error}, 413: {"model": Error},
    415: {"model": Error}, 422: {"model": Error}, 503: {"model": Error},
}  # 404: a URL no route matches (a run name with a line break)

_POINTS_OPENAPI = {  # what FastAPI would document for `run: str = RunName, strict: bool = Query(False)` and WRITE
    "parameters": [
        {"name": "run", "in": "path", "required": True, "description": RUN_DESCRIPTION,
         "schema": {"type": "string", "title": "Run", "description": RUN_DESCRIPTION}},
        {"name": "strict", "in": "query", "required": False, "description": STRICT_DESCRIPTION,
         "schema": {"type": "boolean", "default": False, "title": "Strict", "description": STRICT_DESCRIPTION}},
    ],
    "security": [{"HTTPBearer": []}],
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {"type": "object"},
                "examples": {
                    "canonical": {"value": {"points": [{"step": 10, "tag": "train/loss", "value": 2.31, "wall_time": 1700000000.0}]}},
                    "wide rows": {"value": [{"step": 10, "loss": 2.31, "grad_norm": 0.8, "learning_rate": 3e-4}]},
                },
            },
            "application/x-ndjson": {
                "schema": {"type": "string"},
                "example": '{"step": 10, "tag": "train/loss", "value": 2.31}\n{"step": 11, "tag": "train/loss", "value": 2.29}\n',
            },
        },
    }
}
_EVENTS_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


class _RequestRoute(APIRoute):
    """A route whose endpoint takes the request and returns its response: documented as
    declared (its response model, responses and `openapi_extra`), and called as is, without
    FastAPI's solving of dependencies and parameters and validating of the answer."""

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
        return self.endpoint


async def post_points(request: Request) -> Response:
    """Canonical `{"points": [...]}`, NDJSON (`Content-Type: application/x-ndjson`) or wide
    rows (`{"step": 10, "loss": 2.31, ...}`).  Idempotent: a point already stored with the same
    value is a duplicate; a different value for a stored step is a rewrite, as after a restart.
    400 when the body cannot be read as its Content-Type says, 422 when every record is bad."""
    # A training loop's every few steps: the URL, token and `strict` are checked here, in the
    # order and with the answers FastAPI's dependencies and parameters give the other routes,
    # and the answer is serialised once (`_RequestRoute`): about a third less of the app's CPU
    # per post (bench/append.py).
    await utf8_url(request)
    await authorize(request, "write", await bearer_credentials(request))
    strict = _query_flag(request, "strict")
    run = checked_name(request.path_params["run"], "run name")
    fmt = _points_format(request)
    settings = settings_of(request)
    with request.app.state.heavy.claim() as claim:
        body = await read_body(request, settings.max_body_bytes, claim)
        _check_json_start(body, fmt)
        try:
            if len(body) <= GROUPED_BODY_BYTES:
                result = await request.app.state.appends.post(PostedPoints(run, body, fmt == "ndjson", strict, time.time()))
            else:
                result = await run_in_threadpool(
                    ingest_json, store_of(request), run, body, fmt == "ndjson", strict, settings, time.time()
                )
        except IngestError as e:
            details = [problem_dict(p) for p in e.problems]
            if all(_unreadable(d) for d in details):
                raise _unreadable_body(fmt, details) from e
            raise
        _refuse_if_nothing_stored(result, fmt)
    answer = _response(request, run, result, "json")
    return Response(_INGEST_RESPONSE.dump_json(answer), media_type="application/json")


router.add_api_route(
    "/{run:path}/points", post_points, methods=["POST"], response_model=IngestResponse, responses=_ERRORS,
    openapi_extra=_POINTS_OPENAPI, summary="Append points (JSON, NDJSON or wide rows)", route_class_override=_RequestRoute,
)


_INGEST_RESPONSE = TypeAdapter(IngestResponse)  # serialises as FastAPI does a route's response_model
_FLAG = TypeAdapter(bool)


def _query_flag(request: Request, name: str) -> bool:
    """A boolean query parameter (absent: False), read as FastAPI reads `bool = Query(False)`:
    the same words accepted, and the same 422 for any other."""
    value = request.query_params.get(name)
    if value is None:
        return False
    try:
        return _FLAG.validate_python(value)
    except ValidationError as e:
        raise RequestValidationError([{**error, "loc": ("query", name)} for error in e.errors(include_url=False)]) from e


@router.post(
    "/{run:path}/events", response_model=IngestResponse, responses={**_ERRORS, 409: {"model": Error}},
    openapi_extra=_EVENTS_BODY, dependencies=[UTF8_URL, WRITE], summary="Append TensorBoard event-file bytes",
)
async def post_events(
    request: Request,
    run: str = RunName,
    file: str = Query(..., description="The event file's name."),
    offset: int = Query(0, ge=0, le=MAX_OFFSET, description="The byte offset in that file the body starts at."),
) -> IngestResponse:
    """The bytes of event file `file` from byte `offset` on: a whole file, or a later chunk
    of it.  The answer's `next_offset` is where the next chunk starts (a partial last record
    is not stored: send it again from there); a gap is refused with 409 and the offset expected.
    400 when the bytes are not event-file records at all, 422 when every record is bad."""
    checked_name(run, "run name")
    checked_name(file, "file name")
    media_type, _ = _media_type(request)
    if media_type not in ("", EVENTS_TYPE):
        raise _unsupported(media_type, (EVENTS_TYPE,))
    settings = settings_of(request)
    with request.app.state.heavy.claim() as claim:
        body = await read_body(request, settings.max_body_bytes, claim)
        result = await run_in_threadpool(ingest_events, store_of(request), run, file, offset, body, settings, time.time())
    if not result.accepted and result.rejected:
        if result.end == "corrupt":
            raise ApiError(400, "unreadable_body", "the body cannot be read as TensorBoard event records", result.rejected)
        raise ApiError(422, "invalid_input", NOTHING_STORED, result.rejected)
    return _response(request, run, result, "events")


@router.post(
    "/{run:path}/rollback", response_model=IngestResponse, responses={**_ERRORS, 404: {"model": Error}},
    dependencies=[UTF8_URL, WRITE], summary="Roll every tag of a posted run back to a step (a resume)",
)
async def post_rollback(request: Request, body: RollbackBody, run: str = RunName) -> IngestResponse:
    """Call it when a job resumes from a checkpoint: every tag's writes from `to_step` on are
    hidden (kept in the store, out of the current view), and the run gets a restart alert.
    A `to_step` past the run's last step changes nothing (`rollbacks` is empty)."""
    checked_name(run, "run name")
    result = await run_in_threadpool(rollback, store_of(request), run, body.to_step, settings_of(request), time.time())
    return _response(request, run, result, "json")


# --- what a body is and whether it could be read ---------------------------------------------

JSON_TYPE, NDJSON_TYPES, EVENTS_TYPE = "application/json", ("application/x-ndjson", "application/ndjson"), "application/octet-stream"
NOTHING_STORED = "every record was rejected: nothing was stored"
# Reasons `parse_text_log` gives when the body itself, not a record in it, cannot be read
# (its docstring lists them word for word).
_UNREADABLE_REASONS = ("invalid JSON", "invalid UTF-8")
_FORMAT_NAMES = {"json": "JSON", "ndjson": "NDJSON"}


def _media_type(request: Request) -> tuple[str, dict[str, str]]:
    """The Content-Type's media type (lowercase, '' when absent) and parameters."""
    media_type, *params = request.headers.get("content-type", "").split(";")
    parsed = {}
    for param in params:
        name, _, value = param.partition("=")
        parsed[name.strip().lower()] = value.strip().strip('"').lower()
    return media_type.strip().lower(), parsed


def _points_format(request: Request) -> str:
    """'json' (JSON or, detected by content, NDJSON) or 'ndjson'; 415 for any other type or
    a charset other than UTF-8.  No Content-Type at all is read as JSON."""
    media_type, params = _media_type(request)
    if media_type not in ("", JSON_TYPE, *NDJSON_TYPES):
        raise _unsupported(media_type, (JSON_TYPE, NDJSON_TYPES[0]))
    charset = params.get("charset", "utf-8")
    if charset not in ("utf-8", "utf8"):
        raise ApiError(415, "unsupported_media_type", f"charset {charset!r} is not supported; send UTF-8")
    return "ndjson" if media_type in NDJSON_TYPES else "json"


def _unsupported(media_type: str, supported: tuple[str, ...]) -> ApiError:
    return ApiError(
        415, "unsupported_media_type",
        f"Content-Type {media_type!r} is not supported here; send {' or '.join(supported)}",
        {"supported": list(supported)},
    )


def _check_json_start(body: bytes, fmt: str) -> None:
    """400 for a body that is blank, or whose first character cannot start a JSON value the
    endpoint reads (an object or a list): CSV, a form, or gzip sent without its header."""
    stripped = body.lstrip(b" \t\r\n")
    if not stripped:
        raise _unreadable_body(fmt, [{"reason": "the body is empty"}])
    at = len(body) - len(stripped)
    if stripped[:1] in (b"{", b"["):
        return
    if stripped[:2] == b"\x1f\x8b":
        reason = "the body is gzip-compressed: send it with Content-Encoding: gzip"
    elif stripped[:2] in (b"\xff\xfe", b"\xfe\xff"):
        reason = "the body is UTF-16: send UTF-8"
    else:
        reason = f"the body must start with '{{' or '[', got {stripped[:1]!r}"
    raise _unreadable_body(fmt, [{"reason": reason, "line": body.count(b"\n", 0, at) + 1, "offset": at}])


def _unreadable(problem: dict) -> bool:
    return problem["reason"].startswith(_UNREADABLE_REASONS)


def _unreadable_body(fmt: str, details: list[dict]) -> ApiError:
    return ApiError(400, "unreadable_body", f"the body cannot be read as {_FORMAT_NAMES[fmt]}", details)


def _refuse_if_nothing_stored(result: IngestResult, fmt: str) -> None:
    """A request that stored nothing and found nothing already stored, because of what was
    wrong with it, is an error: 400 when the body could not be read at all, else 422."""
    if result.accepted or result.duplicates or not result.rejected:
        return
    if all(_unreadable(r) for r in result.rejected):
        raise _unreadable_body(fmt, result.rejected)
    raise ApiError(422, "invalid_input", NOTHING_STORED, result.rejected)


def _response(request: Request, run: str, result: IngestResult, via: str) -> IngestResponse:
    request.app.state.metrics.points_ingested.labels(via=via).inc(result.accepted)
    return IngestResponse(
        run=run,
        accepted=result.accepted,
        duplicates=result.duplicates,
        replaced=result.replaced,
        rejected=result.rejected,
        rollbacks=result.rollbacks,
        analysis=result.analysis,
        analysis_error=result.analysis_error,
        alerts=[
            {"change": r.event.change.value, "state": r.event.record.state.value, "step": r.event.step,
             "reason": r.event.reason or None, "alert": r.event.record.finding}
            for r in result.changes
        ],
        next_offset=result.next_offset,
        end=result.end,
    )

"""What one request may cost the service, enforced while it runs.

Bodies: a size limit on every request body, enforced while it is read, so that no request
(the unauthenticated sign-in form included) can make the service hold more than its limit.

Heavy requests: posting a million points or reading the series of a long run costs hundreds
of megabytes and seconds of CPU while it runs; a dozen at once took a service to gigabytes.
Such requests each hold one of a fixed number of slots (`Settings.max_heavy_requests`); when
all are taken the request is answered 503 with `Retry-After` at once, rather than queued
without bound.  Small requests (a training loop's post of a few points, a zoomed-in series
window) never take a slot, so a bulk load cannot lock a trainer out.
"""

from __future__ import annotations

import json
import threading
from types import TracebackType

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.service.errors import ApiError, error_body

SIGN_IN_BYTES = 4 << 10  # /login and /logout: a token fits many times over
CONTROL_BYTES = 64 << 10  # every other body but points and event bytes: a logdir path, a flag


class BodyTooLarge(HTTPException):
    """Raised while a body is read past its limit.  An HTTPException, so that FastAPI's own
    body parsing passes it on instead of calling it a parse error; the app answers it 413."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the body is over the {limit}-byte limit")


def limit_for(method: str, path: str, ingest_bytes: int) -> int:
    """Points and event bytes (POST under /v1/runs/) may be as large as --max-body-bytes."""
    if method == "POST" and path.startswith("/v1/runs/"):
        return ingest_bytes
    if path in ("/login", "/logout"):
        return SIGN_IN_BYTES
    return CONTROL_BYTES


class BodyLimit:
    """Refuses a declared Content-Length over the limit before the route runs, and stops a
    body sent without one (chunked) as soon as it passes the limit."""

    def __init__(self, app: ASGIApp, ingest_bytes: int) -> None:
        self.app, self.ingest_bytes = app, ingest_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = limit_for(scope["method"], scope["path"], self.ingest_bytes)
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            await _refuse(send, f"the body is {int(declared)} bytes; the limit is {limit}")
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, limited, send)


async def _refuse(send: Send, message: str) -> None:
    body = json.dumps(error_body("body_too_large", message)).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


# --- heavy requests --------------------------------------------------------------------------

HEAVY_BODY_BYTES = 1 << 20  # a body past this (after decompression) makes its request heavy
HEAVY_SERIES_WRITES = 1 << 16  # a series read over more stored writes than this is heavy
RETRY_AFTER_SECONDS = 1


class Slots:
    """A fixed number of slots for heavy requests, shared by the threads of one process."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._free = size
        self._lock = threading.Lock()

    def claim(self) -> Claim:
        """A request's claim: it takes a slot only once it knows it is heavy."""
        return Claim(self)

    def _acquire(self) -> None:
        with self._lock:
            if self._free == 0:
                raise ApiError(
                    503, "busy",
                    f"the service is busy: all {self.size} slots for large requests are taken; retry in {RETRY_AFTER_SECONDS} s",
                    headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
                )
            self._free -= 1

    def _release(self) -> None:
        with self._lock:
            self._free += 1


class Claim:
    """Used as `with slots.claim() as claim:`; `claim.take()` once the request turns out heavy
    (503 if no slot is free); the slot is given back when the block ends."""

    def __init__(self, slots: Slots) -> None:
        self._slots = slots
        self._held = False

    def take(self) -> None:
        if not self._held:
            self._slots._acquire()
            self._held = True

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        if self._held:
            self._held = False
            self._slots._release()

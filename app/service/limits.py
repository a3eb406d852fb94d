"""A size limit on every request body, enforced while it is read, so that no request (the
unauthenticated sign-in form included) can make the service hold more than its limit."""

from __future__ import annotations

import json

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.service.errors import error_body

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

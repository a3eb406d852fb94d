"""Bearer tokens with read and write scopes.  With no token created at all the service is
open: `losswatch serve` refuses to listen beyond loopback like that unless told --insecure."""

from __future__ import annotations

import time

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.service.errors import ApiError
from app.store import tokens

_bearer = HTTPBearer(auto_error=False, description="A token from `losswatch token create`.")
COOKIE = "losswatch_token"  # set by the web UI's login form, so a browser can read pages


class TokenCache:
    """What the store says about tokens, remembered for `ttl` seconds: a training loop
    posting every step should not cost a database round trip to authenticate.  A revoked
    token is refused at most `ttl` seconds later."""

    def __init__(self, store, ttl: float = 5.0) -> None:
        self.store, self.ttl = store, ttl
        self._answers: dict[str | None, tuple[float, object]] = {}

    def scopes(self, token: str | None):
        """None: no token needed (none exist); False: unknown token; else the scopes."""
        now = time.monotonic()
        cached = self._answers.get(token)
        if cached is not None and now - cached[0] < self.ttl:
            return cached[1]
        with self.store.read() as conn:
            if token is None:
                answer = False if tokens.any_tokens(conn) else None
            else:
                answer = tokens.scopes_of(conn, token) or False
        if len(self._answers) > 10_000:
            self._answers.clear()  # bounded: guessed tokens must not grow it without end
        self._answers[token] = (now, answer)
        return answer


def require(scope: str):
    """A dependency admitting requests whose token has `scope` ("read" or "write")."""

    def check(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> None:
        token = credentials.credentials if credentials else request.cookies.get(COOKIE)
        scopes = request.app.state.tokens.scopes(token)
        if token is None:
            if scopes is False:
                raise ApiError(401, "unauthorized", "this service needs a bearer token: Authorization: Bearer <token>")
            return
        if scopes is False:
            raise ApiError(401, "unauthorized", "unknown token")
        if scope not in scopes:
            raise ApiError(403, "forbidden", f"this token may not {scope}")

    return Depends(check)


READ = require("read")
WRITE = require("write")

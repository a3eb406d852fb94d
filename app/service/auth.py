"""Bearer tokens with read and write scopes.  With no token created at all the service is
open: `losswatch serve` refuses to listen beyond loopback like that unless told --insecure."""

from __future__ import annotations

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.service.errors import ApiError
from app.store import tokens

_bearer = HTTPBearer(auto_error=False, description="A token from `losswatch token create`.")
COOKIE = "losswatch_token"  # set by the web UI's login form, so a browser can read pages


def require(scope: str):
    """A dependency admitting requests whose token has `scope` ("read" or "write")."""

    def check(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> None:
        token = credentials.credentials if credentials else request.cookies.get(COOKIE)
        with request.app.state.store.read() as conn:
            if token is None:
                if tokens.any_tokens(conn):
                    raise ApiError(401, "unauthorized", "this service needs a bearer token: Authorization: Bearer <token>")
                return
            scopes = tokens.scopes_of(conn, token)
        if scopes is None:
            raise ApiError(401, "unauthorized", "unknown token")
        if scope not in scopes:
            raise ApiError(403, "forbidden", f"this token may not {scope}")

    return Depends(check)


READ = require("read")
WRITE = require("write")

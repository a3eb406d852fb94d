"""Bearer tokens with read and write scopes, and whether a request needs one.

Whether the service needs a token is decided when it starts (`Settings.auth`, which
`losswatch serve` computes), never from whether tokens happen to exist at request time:
revoking the last token leaves a service that refuses everyone, not an open one.  The one
mode that watches the store, `until_first_token` (loopback with no token at start), only ever
moves from open to locked."""

from __future__ import annotations

import time

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from app.service import csrf
from app.service.errors import ApiError
from app.service.settings import AuthMode
from app.store import tokens
from app.store.db import Store

_bearer = HTTPBearer(auto_error=False, description="A token from `losswatch token create`.")
COOKIE = "losswatch_token"  # set by the web UI's login form, so a browser can read pages


class TokenCache:
    """What the store says about tokens, remembered for `ttl` seconds: a training loop
    posting every step should not cost a database round trip to authenticate.  A revoked
    token is refused at most `ttl` seconds later."""

    def __init__(self, store: Store, ttl: float = 5.0) -> None:
        self.store, self.ttl = store, ttl
        self._answers: dict[str, tuple[float, set[str] | None]] = {}

    def cached(self, token: str) -> tuple[bool, set[str] | None]:
        """(whether the answer is remembered, `scopes(token)` if it is): a request's check
        asks this first, on the event loop, and the store only when it must."""
        cached = self._answers.get(token)
        if cached is not None and time.monotonic() - cached[0] < self.ttl:
            return True, cached[1]
        return False, None

    def scopes(self, token: str) -> set[str] | None:
        """The token's scopes; None for an unknown (or revoked) token."""
        now = time.monotonic()
        known, answer = self.cached(token)
        if known:
            return answer
        with self.store.read() as conn:
            answer = tokens.scopes_of(conn, token)
        if len(self._answers) > 10_000:
            self._answers.clear()  # bounded: guessed tokens must not grow it without end
        self._answers[token] = (now, answer)
        return answer


class Gate:
    """Whether requests need a token, for the life of the process (see the module doc)."""

    def __init__(self, store: Store, mode: AuthMode, ttl: float = 5.0) -> None:
        self.store, self.mode = store, mode
        self.tokens = TokenCache(store, ttl)
        self._locked = mode == "required" or (mode == "until_first_token" and self._tokens_exist())

    def locked(self) -> bool:
        """True when a request without a token must be refused.  In `until_first_token` the
        store is asked until it holds a token (no cache: the first token locks at once); from
        then on the answer is True for good, whatever is revoked later."""
        if self.mode == "open":
            return False
        if not self._locked:
            self._locked = self._tokens_exist()
        return self._locked

    def settled(self) -> bool:
        """Whether `locked()` answers without asking the store."""
        return self.mode != "until_first_token" or self._locked

    def _tokens_exist(self) -> bool:
        with self.store.read() as conn:
            return tokens.any_tokens(conn)


def require(scope: str):
    """A dependency admitting requests whose token has `scope` ("read" or "write"): see
    `authorize`."""

    async def check(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> None:
        await authorize(request, scope, credentials)

    return Depends(check)


async def authorize(request: Request, scope: str, credentials: HTTPAuthorizationCredentials | None) -> None:
    """Admit the request if its token has `scope` ("read" or "write"), else 401 or 403.
    Writes that no bearer token vouches for (a browser's cookie, or none on an open service)
    must also pass the cross-site checks of `csrf.check`.  It runs on the event loop (a sync
    check would cost every request a hand-off to a thread) and goes to a thread only when the
    store must be asked: a token not in the cache, a gate not yet settled.  `credentials`:
    the Authorization header's bearer token (`bearer_credentials`), if any."""
    gate: Gate = request.app.state.gate
    token = credentials.credentials if credentials else request.cookies.get(COOKIE)
    by_cookie = False
    if gate.mode != "open":
        if token is None:
            if gate.locked() if gate.settled() else await run_in_threadpool(gate.locked):
                raise ApiError(401, "unauthorized", "this service needs a bearer token: Authorization: Bearer <token>")
            csrf.check_loopback_host(request)  # open, on loopback: only until_first_token gets here
        else:
            known, scopes = gate.tokens.cached(token)
            if not known:
                scopes = await run_in_threadpool(gate.tokens.scopes, token)
            if scopes is None:
                raise ApiError(401, "unauthorized", "unknown token")
            if scope not in scopes:
                raise ApiError(403, "forbidden", f"this token may not {scope}")
            by_cookie = credentials is None
    if scope == "write" and credentials is None:
        csrf.check(request, by_cookie)


async def bearer_credentials(request: Request) -> HTTPAuthorizationCredentials | None:
    """The Authorization header's bearer token, read as the `require` dependencies read it
    (for a route that checks `authorize` itself)."""
    return await _bearer(request)


READ = require("read")
WRITE = require("write")

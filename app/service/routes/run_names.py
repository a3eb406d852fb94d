"""Run names in URLs.  A name may hold slashes (`exp/lr-3e-4`), and the routes take the
name as a path (`/v1/runs/{run:path}/series`), so `/v1/runs/a/series` is the series of run
`a`, never the run called `a/series`.  A client that sends the name as one segment, each `/`
encoded as `%2F` (what `encodeURIComponent` and `quote(name, safe="")` do), is understood
exactly: the reads of runs.py take the name from the raw path then."""

from __future__ import annotations

from urllib.parse import unquote

from fastapi import Path, Request
from starlette.types import ASGIApp, Receive, Scope, Send

from app.service.routes.common import checked_name

PREFIX = "/v1/runs/"
_NAME_KEY = "losswatch.run"  # where EncodedRunNames leaves the name it decoded
_PLACEHOLDER = "-"  # the one-segment stand-in routed in its place
MAX_NAME = 512


class EncodedRunNames:
    """For a read (GET, HEAD) under /v1/runs/ whose first raw segment holds an encoded slash:
    routes it with a one-segment stand-in for the name, and keeps the decoded name for
    `run_name`.  Writes need nothing of this: their suffixes (`/points`, `/events`) are
    not names anyone reads back through a route of the same shape."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path") if scope["type"] == "http" and scope["method"] in ("GET", "HEAD") else None
        if raw and raw.startswith(PREFIX.encode()):
            first, sep, rest = raw[len(PREFIX):].partition(b"/")
            if b"%2f" in first.lower():
                scope = {**scope, "path": PREFIX + _PLACEHOLDER + sep.decode() + unquote(rest.decode("latin-1")),
                         _NAME_KEY: unquote(first.decode("latin-1"))}
        await self.app(scope, receive, send)


def run_name(
    request: Request,
    run: str = Path(..., description="The run's name. Send `/` in it as `%2F` to read a run whose name ends in `/series`, `/baseline` "
                                     "or `/alerts`."),
) -> str:
    """The run a read is about: the decoded one-segment name when the client sent one,
    checked as every name in a URL is (`checked_name`)."""
    return checked_name(request.scope.get(_NAME_KEY, run), "run name", MAX_NAME)

"""The watcher's HTTP calls to the service, with timeouts, and how each answer is taken.

A watcher is given a transport (tests may give one that fails on cue); the default speaks
HTTP with urllib.  Every outcome is one of: delivered (2xx), refused for good (the body is
bad: resending it would fail the same way), or not delivered (no answer, 5xx, auth or rate
limits): the points are kept and sent again."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Optional

NDJSON = "application/x-ndjson"
# A bad body stays bad: these are not retried (413 is split first, see the watcher).
REFUSED_FOR_GOOD = (400, 413, 415, 422)


@dataclass
class Answer:
    status: int
    body: Any  # the decoded JSON answer, or None
    retry_after: Optional[float] = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def refused_for_good(self) -> bool:
        return self.status in REFUSED_FOR_GOOD

    def error_message(self) -> str:
        """The service's own words for an error answer (`{"error": {"message": ...}}`)."""
        error = self.body.get("error") if isinstance(self.body, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        return f"HTTP {self.status}: {message}" if message else f"HTTP {self.status}"


class Unreachable(Exception):
    """No answer: refused, reset, timed out, or not HTTP."""


class HttpTransport:
    def __init__(self, url: str, token: Optional[str], timeout: float) -> None:
        self.base = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def post_points(self, run: str, body: bytes) -> Answer:
        return self._call("POST", f"/v1/runs/{_quoted(run)}/points", body, NDJSON)

    def run_alerts(self, run: str) -> Answer:
        return self._call("GET", f"/v1/runs/{_quoted(run)}/alerts?source=http", None, None)

    def finish_run(self, run: str, timeout: Optional[float] = None) -> Answer:
        """Mark the posted run finished; `timeout` shortens the request's to what close() has left."""
        return self._call("POST", f"/v1/runs/{_quoted(run)}/finish?source=http", b"", None, timeout)

    def _call(
        self, method: str, path: str, body: Optional[bytes], content_type: Optional[str], timeout: Optional[float] = None
    ) -> Answer:
        request = urllib.request.Request(self.base + path, data=body, method=method)
        if content_type:
            request.add_header("Content-Type", content_type)
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout if timeout is None else min(timeout, self.timeout)) as response:
                return Answer(response.status, _json(response.read()))
        except urllib.error.HTTPError as e:
            with e:
                return Answer(e.code, _json(e.read()), _retry_after(e.headers.get("Retry-After")))
        except (urllib.error.URLError, OSError, socket.timeout, ValueError) as e:
            # ValueError: http.client's answer to a reply that is not HTTP
            raise Unreachable(str(getattr(e, "reason", e))) from e


def _quoted(run: str) -> str:
    """A run name as one path segment (a `/` inside it encoded), as the README says."""
    return urllib.parse.quote(run, safe="")


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _retry_after(value: Optional[str]) -> Optional[float]:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None

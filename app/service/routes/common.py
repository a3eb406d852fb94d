"""What every route needs: the store, the settings, a run found by name, names checked, a
bounded body."""

from __future__ import annotations

import zlib
from urllib.parse import unquote_to_bytes

from fastapi import Request
from sqlalchemy.engine import Connection

from app.ingest.names import MAX_NAME_CHARS, name_problem
from app.service.errors import ApiError
from app.service.limits import HEAVY_BODY_BYTES, Claim
from app.service.settings import Settings
from app.store import runs as stored_runs
from app.store.db import Store
from app.store.runs import StoredRun


def store_of(request: Request) -> Store:
    return request.app.state.store


def settings_of(request: Request) -> Settings:
    return request.app.state.settings


MAX_SOURCE_CHARS = 4096  # a source is a logdir path: longer than a name may be


def one_run(conn: Connection, name: str, source: str | None) -> StoredRun:
    """The run called `name`: 404 if there is none, 409 if several logdirs have one; 422 for
    a name or source no run can have (the API's routes and the UI's pages look runs up here)."""
    checked_name(name, "run name")
    if source is not None:
        checked_name(source, "source", MAX_SOURCE_CHARS)
    found = stored_runs.find_runs(conn, name, source)
    if not found:
        raise ApiError(404, "not_found", f"no run {name!r}" + (f" in {source!r}" if source else ""))
    if len(found) > 1:
        raise ApiError(409, "ambiguous_run", f"several runs are called {name!r}: give ?source=",
                       {"sources": [r.source for r in found]})
    return found[0]


def checked_name(value: str, what: str, max_chars: int = MAX_NAME_CHARS) -> str:
    """`value` if it may name a run, tag or file (`app.ingest.names`), else 422 saying why."""
    problem = name_problem(value, max_chars)
    if problem is not None:
        shown = repr(value[:40]) + ("..." if len(value) > 40 else "")
        raise ApiError(422, "invalid_name", f"{what} {shown} {problem}")
    return value


async def utf8_url(request: Request) -> None:
    """400 for a URL whose percent-decoded path or query is not UTF-8: decoded leniently it
    would name a run or tag other than the one the client meant.  Async: run on the event
    loop, not handed to a thread (it reads nothing but the URL)."""
    parts = (("path", request.scope.get("raw_path") or b""), ("query", request.scope.get("query_string") or b""))
    for where, raw in parts:
        decoded = unquote_to_bytes(raw.replace(b"+", b" ") if where == "query" else raw)
        try:
            decoded.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ApiError(400, "invalid_url", f"the URL's {where} is not UTF-8 once percent-decoded (byte {e.start})") from e


async def read_body(request: Request, limit: int, claim: Claim | None = None) -> bytes:
    """The request body, decompressed when it comes with `Content-Encoding: gzip`.

    Refused with 413 as soon as it passes `limit` bytes, compressed or decompressed: a gzip
    bomb is inflated a piece at a time and stopped at the limit, never held whole.  415 for
    any other encoding, 400 for gzip that does not decompress.  `claim` (a heavy-request
    slot) is taken once the body passes `limits.HEAVY_BODY_BYTES`."""
    gunzip = _Gunzip(limit) if _encoding(request) == "gzip" else None
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, "body_too_large", f"the body is {declared} bytes; the limit is {limit}")
    if claim is not None and declared is not None and declared.isdigit() and int(declared) > HEAVY_BODY_BYTES:
        claim.take()  # refused before reading a byte of it
    parts, size, sent = [], 0, 0
    async for chunk in request.stream():
        sent += len(chunk)
        if sent > limit:
            raise ApiError(413, "body_too_large", f"the body is over the {limit}-byte limit")
        if gunzip is not None:
            chunk = gunzip.feed(chunk)
        size += len(chunk)
        if size > limit:
            raise ApiError(413, "body_too_large", f"the body is over the {limit}-byte limit once decompressed")
        if claim is not None and size > HEAVY_BODY_BYTES:
            claim.take()
        parts.append(chunk)
    if gunzip is not None:
        gunzip.finish()
    return b"".join(parts)


def _encoding(request: Request) -> str:
    """'gzip' or 'identity'; 415 for anything else (deflate, br, zstd, gzip twice ...)."""
    header = request.headers.get("content-encoding", "")
    codings = [c.strip().lower() for c in header.split(",") if c.strip() and c.strip().lower() != "identity"]
    if not codings:
        return "identity"
    if codings in (["gzip"], ["x-gzip"]):
        return "gzip"
    raise ApiError(415, "unsupported_encoding", f"Content-Encoding {header!r} is not supported; send gzip or no encoding")


class _Gunzip:
    """Streamed gzip decompression (one or more members) that never inflates more than
    `limit` + 1 bytes of what it is fed."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._out = 0
        self._seen = 0  # compressed bytes fed so far
        self._member = zlib.decompressobj(wbits=31)
        self._open = False  # the current member has started but not ended

    def feed(self, data: bytes) -> bytes:
        pieces = []
        first = self._seen
        self._seen += len(data)
        while data:
            self._open = True
            try:
                piece = self._member.decompress(data, self._limit - self._out + 1)
            except zlib.error as e:
                raise ApiError(400, "bad_gzip", f"the gzip body does not decompress ({e}) in compressed bytes {first}-{self._seen}") from e
            self._out += len(piece)
            pieces.append(piece)
            if self._out > self._limit:
                raise ApiError(413, "body_too_large", f"the body is over the {self._limit}-byte limit once decompressed")
            if self._member.eof:
                data = self._member.unused_data
                self._member, self._open = zlib.decompressobj(wbits=31), False
            else:
                data = self._member.unconsumed_tail
        return b"".join(pieces)

    def finish(self) -> None:
        if self._open:
            raise ApiError(400, "bad_gzip", f"the gzip body is cut short at compressed byte {self._seen}")

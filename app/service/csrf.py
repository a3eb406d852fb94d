"""Cross-site request forgery.  A page on another site can make a browser send this
service's cookie (or reach an open service on loopback) with a form or a no-cors fetch, but
it cannot hide the Origin header browsers add, nor send a JSON content type or a custom
header without a CORS preflight, which this service never grants."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from fastapi import Request

from app.service.errors import ApiError

JSON_TYPES = ("application/json", "application/x-ndjson")
CUSTOM_HEADER = "X-Requested-With"
_DEFAULT_PORTS = {"http": 80, "https": 443}


def check(request: Request, by_cookie: bool) -> None:
    """Refuse a write from another site: any whose Origin is not this service's, and, when
    the cookie is what signs it in, one with neither a JSON body nor `X-Requested-With`."""
    check_origin(request)
    if by_cookie and not (_content_type(request) in JSON_TYPES or CUSTOM_HEADER in request.headers):
        raise ApiError(403, "cross_site", "a write signed in by the cookie needs Content-Type: application/json "
                                          f"or an {CUSTOM_HEADER} header")


def check_origin(request: Request) -> None:
    """An Origin header, when there is one, must be this service's: the Host the request was
    sent to, or `--external-url`."""
    origin = request.headers.get("origin")
    if origin is not None and not _same_origin(origin, request):
        raise ApiError(403, "cross_site", f"cross-site request refused: Origin {origin} is not this service")


def check_loopback_host(request: Request) -> None:
    """An open loopback service answers only to loopback names: a page on another site that
    points its own name at 127.0.0.1 (DNS rebinding) sends its name as Host, and must not
    read or write what the service holds."""
    host = request.headers.get("host", "")
    try:
        name, _ = _endpoint("http", host)
        loopback = name == "localhost" or ipaddress.ip_address(name).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ApiError(403, "cross_site", f"an open loopback service answers only to 127.0.0.1, [::1] or localhost, "
                                          f"not Host {host}: create a token to use another name")


def secure_cookie(request: Request) -> bool:
    """The sign-in cookie is Secure when the browser reaches the service over HTTPS."""
    external = request.app.state.settings.external_url
    return request.url.scheme == "https" or (external is not None and external.startswith("https://"))


def _same_origin(origin: str, request: Request) -> bool:
    parsed = urlsplit(origin)
    if parsed.scheme not in _DEFAULT_PORTS or not parsed.hostname:
        return False  # "null" (a sandboxed frame, a file: page) is never this service
    try:
        mine = _endpoint(parsed.scheme, parsed.netloc)
    except ValueError:
        return False
    external = request.app.state.settings.external_url
    if external is not None:
        theirs = urlsplit(external)
        if theirs.scheme == parsed.scheme and _endpoint(theirs.scheme, theirs.netloc) == mine:
            return True
    host = request.headers.get("host")
    try:
        return host is not None and _endpoint(parsed.scheme, host) == mine
    except ValueError:
        return False


def _endpoint(scheme: str, netloc: str) -> tuple[str, int]:
    """(host, port) of a netloc, with the scheme's default port filled in."""
    parts = urlsplit("//" + netloc)
    return (parts.hostname or "").lower(), parts.port or _DEFAULT_PORTS[scheme]


def _content_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()

"""The service's defences other than token checks: body caps on every route (the sign-in form
included), security headers on every response, cross-site checks on writes, the sign-in
cookie and signing out, which routes are public, and run names that look like routes."""

from __future__ import annotations

import socket
from urllib.parse import quote, urlsplit

import httpx
import pytest

from app.store import tokens
from app.store.db import open_store
from tests.service_helpers import server_process, service

FORM = {"Content-Type": "application/x-www-form-urlencoded"}
POINTS = {"points": [{"step": 1, "tag": "train/loss", "value": 2.0}]}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One real `losswatch serve`, open on loopback as started without a token."""
    url = f"sqlite:///{tmp_path_factory.mktemp('security') / 'store.db'}"
    with server_process(url) as (base, _):
        yield base


def raw_request(base: str, head: str, body: bytes = b"") -> tuple[int, bytes]:
    """Send a request as bytes on a socket and read the status line and the body: what a
    client that never stops sending sees."""
    parts = urlsplit(base)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    status = int(answer.split(b" ", 2)[1])
    return status, answer.split(b"\r\n\r\n", 1)[1]


def test_the_sign_in_form_is_refused_past_4_kib_before_its_body_is_read(server):
    host = urlsplit(server).netloc
    head = f"POST /login HTTP/1.1\nHost: {host}\nContent-Type: application/x-www-form-urlencoded\nContent-Length: 400000000\n"
    status, body = raw_request(server, head, b"token=" + b"x" * 1000)  # 400 MB announced, 1 KB sent
    assert status == 413 and b'"the body is 400000000 bytes; the limit is 4096"' in body
    chunked = f"POST /login HTTP/1.1\nHost: {host}\nContent-Type: application/x-www-form-urlencoded\nTransfer-Encoding: chunked\n"
    status, body = raw_request(server, chunked, b"".join(b"400\r\n" + b"x" * 1024 + b"\r\n" for _ in range(8)))
    assert status == 413 and b'"the body is over the 4096-byte limit"' in body
    assert httpx.get(f"{server}/healthz").status_code == 200


def test_every_response_carries_the_security_headers(server):
    responses = [
        httpx.get(f"{server}/"), httpx.get(f"{server}/v1/runs"), httpx.get(f"{server}/nope"),
        httpx.get(f"{server}/static/losswatch.js"), httpx.get(f"{server}/docs"), httpx.get(f"{server}/healthz"),
        httpx.post(f"{server}/v1/logdirs", content=b"{}" * 40_000, headers={"Content-Type": "application/json"}),
    ]
    assert [r.status_code for r in responses] == [200, 200, 404, 200, 200, 200, 413]
    for r in responses:
        assert r.headers["content-security-policy"] == (
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
            "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
        )
        assert r.headers["x-content-type-options"] == "nosniff" and r.headers["x-frame-options"] == "DENY"
        assert r.headers["referrer-policy"] == "same-origin"


def test_an_open_loopback_service_answers_only_to_loopback_names(server):
    port = urlsplit(server).port
    rebound = httpx.get(f"{server}/v1/runs", headers={"Host": f"rebound.example:{port}"})  # DNS rebinding
    assert rebound.status_code == 403 and rebound.json()["error"]["message"] == (
        f"an open loopback service answers only to 127.0.0.1, [::1] or localhost, not Host rebound.example:{port}: "
        "create a token to use another name")
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "[::1]"):
        assert httpx.get(f"{server}/v1/runs", headers={"Host": host}).status_code == 200, host


def test_a_run_whose_name_ends_in_series_or_alerts_is_read_back_by_its_encoded_name(server):
    for name in ("exp", "exp/series", "exp/alerts", "series"):
        assert httpx.post(f"{server}/v1/runs/{name}/points", json=POINTS).status_code == 200
    for name in ("exp/series", "exp/alerts", "series", "exp"):
        encoded = quote(name, safe="")
        assert httpx.get(f"{server}/v1/runs/{encoded}").json()["name"] == name
        assert httpx.get(f"{server}/v1/runs/{encoded}/series", params={"tag": "train/loss"}).json()["run"] == name
        assert httpx.get(f"{server}/v1/runs/{encoded}/alerts").status_code == 200
    # unencoded, the last segment is the route, as before: the series of "exp", not the run "exp/series"
    assert httpx.get(f"{server}/v1/runs/exp/series", params={"tag": "train/loss"}).json()["run"] == "exp"
    assert httpx.get(f"{server}/v1/runs/exp/series/series", params={"tag": "train/loss"}).json()["run"] == "exp/series"


def signed_in(url: str, scope: str = "write", base: str = "http://127.0.0.1", **settings):
    """A service with a token, and a client signed in through the login form."""
    store = open_store(url)
    with store.write() as conn:
        token = tokens.create_token(conn, "me", scope, 0.0)
    store.close()
    context = service(url, **settings)
    client = context.__enter__()
    client.base_url = base
    response = client.post("/login", content=f"token={token}", headers=FORM, follow_redirects=False)
    assert response.status_code == 303
    return context, client, token, response


def test_cookie_writes_need_a_json_body_or_a_custom_header_and_this_origin(tmp_path):
    context, c, token, _ = signed_in(f"sqlite:///{tmp_path / 's.db'}")
    try:
        mine = {"Origin": "http://127.0.0.1"}
        assert c.post("/v1/runs/r/points", json=POINTS, headers=mine).status_code == 200
        assert c.post("/v1/runs/r/points", json=POINTS).status_code == 200  # no Origin: not a browser
        other = c.post("/v1/runs/r/points", json=POINTS, headers={"Origin": "https://evil.example"})
        assert other.status_code == 403
        assert other.json()["error"] == {
            "code": "cross_site", "message": "cross-site request refused: Origin https://evil.example is not this service"}
        plain = c.post("/v1/runs/r/points", content=b'{"points": []}', headers={"Content-Type": "text/plain", **mine})
        assert plain.status_code == 403 and plain.json()["error"]["message"] == (
            "a write signed in by the cookie needs Content-Type: application/json or an X-Requested-With header")
        assert c.delete("/v1/logdirs/1").status_code == 403
        assert c.delete("/v1/logdirs/1", headers={"X-Requested-With": "fetch"}).status_code == 404  # passed the checks
        c.cookies.clear()  # a bearer token is not sent by browsers on their own: no cross-site check
        bearer = {"Authorization": f"Bearer {token}", "Origin": "https://evil.example"}
        assert c.post("/v1/runs/r/points", content=b'{"points": []}', headers={**bearer, "Content-Type": "text/plain"}).status_code != 403
    finally:
        context.__exit__(None, None, None)


def test_an_open_service_refuses_writes_from_other_origins(tmp_path):
    with service(f"sqlite:///{tmp_path / 's.db'}", auth="open") as c:
        assert c.post("/v1/runs/r/points", json=POINTS, headers={"Origin": "http://attacker.example"}).status_code == 403
        assert c.post("/v1/runs/r/points", json=POINTS, headers={"Origin": "null"}).status_code == 403
        assert c.post("/v1/runs/r/points", json=POINTS, headers={"Origin": "http://127.0.0.1"}).status_code == 200
        assert c.get("/v1/runs", headers={"Origin": "http://attacker.example"}).status_code == 200  # reads: CORS guards them


def test_the_cookie_is_secure_over_https_or_behind_an_https_external_url(tmp_path):
    cases = [("http://127.0.0.1", "https://lw.example", True),  # a proxy ends TLS: the service sees http
             ("https://127.0.0.1", None, True), ("http://127.0.0.1", None, False)]
    for i, (base, external, secure) in enumerate(cases):
        context, _, _, response = signed_in(f"sqlite:///{tmp_path / f'{i}.db'}", base=base, external_url=external)
        context.__exit__(None, None, None)
        cookie = response.headers["set-cookie"].lower()
        assert ("; secure" in cookie) is secure, (base, external)
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie


def test_sign_out_clears_the_cookie(tmp_path):
    context, c, _, _ = signed_in(f"sqlite:///{tmp_path / 's.db'}", base="https://127.0.0.1", external_url="https://lw.example")
    try:
        assert '<button type="submit">Sign out</button>' in c.get("/").text
        assert c.post("/logout", headers={"Origin": "https://evil.example"}).status_code == 403
        assert c.get("/v1/runs").status_code == 200  # still signed in
        out = c.post("/logout", headers={"Origin": "https://lw.example"}, follow_redirects=False)
        assert out.status_code == 303 and out.headers["location"].endswith("/login")
        assert 'losswatch_token=""' in out.headers["set-cookie"] and "max-age=0" in out.headers["set-cookie"].lower()
        assert c.get("/v1/runs").status_code == 401
        assert "Sign out" not in c.get("/login").text
    finally:
        context.__exit__(None, None, None)


def test_which_routes_are_public_when_tokens_are_required(tmp_path):
    context, c, token, _ = signed_in(f"sqlite:///{tmp_path / 's.db'}", scope="read")
    try:
        c.cookies.clear()
        for path in ("/openapi.json", "/docs", "/v1/runs", "/"):
            assert c.get(path).status_code == 401, path
        assert c.get("/docs", headers={"Accept": "text/html"}, follow_redirects=False).headers["location"].endswith("/login?next=%2Fdocs")
        assert c.get("/openapi.json", headers={"Authorization": f"Bearer {token}"}).json()["info"]["title"] == "losswatch"
        for path in ("/healthz", "/metrics", "/login", "/static/losswatch.js", "/static/vendor/uPlot.iife.min.js"):
            assert c.get(path).status_code == 200, path
        assert c.get("/redoc").status_code == 404
    finally:
        context.__exit__(None, None, None)


def test_control_bodies_are_capped_even_without_a_length(tmp_path):
    with service(f"sqlite:///{tmp_path / 's.db'}") as c:
        chunks = (b" " * 1024 for _ in range(100))  # a generator: sent chunked, no Content-Length
        r = c.put("/v1/alerts/abc/silence", content=chunks, headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and r.json()["error"] == {
            "code": "body_too_large", "message": "the body is over the 65536-byte limit"}

"""Names in URLs (runs, tags, event files, sources) are checked at the route: no NUL or other
control character, no lone surrogate, at most 512 characters (4096 for a source path), and
the URL itself must be UTF-8.  A bad name is a 422 saying what and where, never a 500."""

from __future__ import annotations

import httpx
import pytest

from app.ingest.names import name_problem
from tests.service_helpers import server_process, service


@pytest.fixture
def client(store_url):
    with service(store_url) as c:
        yield c


def error_of(response) -> tuple[int, str, str]:
    error = response.json()["error"]
    return response.status_code, error["code"], error["message"]


POINT = [{"step": 1, "loss": 2.0}]


def test_name_problems_word_for_word():
    assert name_problem("exp/run-1 (lr=3e-4)") is None
    assert name_problem("") == "is empty"
    assert name_problem("x" * 513) == "is 513 characters long; the limit is 512"
    assert name_problem("a\x00b") == "has a control character (U+0000) at character 2"
    assert name_problem("ab\x7f") == "has a control character (U+007F) at character 3"
    assert name_problem("\ud800") == "has a lone surrogate (U+D800) at character 1"
    assert name_problem("x" * 600, 4096) is None


def test_a_run_name_with_nul_is_422_on_every_backend(client):
    r = client.post("/v1/runs/a%00b/points", json=POINT)
    assert error_of(r) == (422, "invalid_name", "run name 'a\\x00b' has a control character (U+0000) at character 2")
    assert client.get("/v1/runs/a%00b").status_code == 422
    assert client.get("/v1/runs/a%00b/alerts").status_code == 422
    assert client.get("/v1/runs").json() == []


def test_a_long_run_name_is_422_with_its_length(client):
    r = client.post("/v1/runs/" + "r" * 600 + "/points", json=POINT)
    assert error_of(r) == (422, "invalid_name", f"run name {'r' * 40!r}... is 600 characters long; the limit is 512")
    assert client.post("/v1/runs/" + "r" * 512 + "/points", json=POINT).status_code == 200


def test_a_url_that_is_not_utf8_is_400(client):
    """%ED%A0%80 would decode to a lone surrogate; lenient decoding would store a mangled name."""
    r = client.post("/v1/runs/a%ED%A0%80b/points", json=POINT)
    assert error_of(r) == (400, "invalid_url", "the URL's path is not UTF-8 once percent-decoded (byte 10)")
    q = client.get("/v1/runs/a/series?tag=%FF")
    assert error_of(q) == (400, "invalid_url", "the URL's query is not UTF-8 once percent-decoded (byte 4)")


def test_tag_file_and_source_names_are_checked_too(client):
    client.post("/v1/runs/a/points", json=POINT)
    tag = client.get("/v1/runs/a/series", params={"tag": "loss\x01"})
    assert error_of(tag) == (422, "invalid_name", "tag 'loss\\x01' has a control character (U+0001) at character 5")
    file = client.post("/v1/runs/a/events", params={"file": "events\x00"}, content=b"")
    assert error_of(file) == (422, "invalid_name", "file name 'events\\x00' has a control character (U+0000) at character 7")
    source = client.get("/v1/runs/a", params={"source": "/data\x00"})
    assert error_of(source) == (422, "invalid_name", "source '/data\\x00' has a control character (U+0000) at character 6")


def test_nul_in_a_run_name_on_postgresql_in_a_real_server(pg_url):
    """The issue's reproduction: a 500, and the good points of the request lost.  Now the
    bad request is refused whole with 422, and the server goes on storing good ones."""
    with server_process(pg_url) as (base, _):
        bad = httpx.post(f"{base}/v1/runs/p%00q/points", json=POINT)
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_name"
        good = httpx.post(f"{base}/v1/runs/p/points", json=POINT)
        assert good.status_code == 200 and good.json()["accepted"] == 1


@pytest.mark.parametrize(
    ("path", "params", "expected"),
    [
        ("/run", {"name": "a\x00b"}, (422, "invalid_name", "run name 'a\\x00b' has a control character (U+0000) at character 2")),
        ("/run", {"name": "x", "source": "s\x00"}, (422, "invalid_name", "source 's\\x00' has a control character (U+0000) at character 2")),
        ("/alert/ab%00cd", None, (404, "not_found", "no alert 'ab\\x00cd'")),
    ],
)
def test_the_web_pages_check_names_too(client, path, params, expected):
    assert error_of(client.get(path, params=params)) == expected

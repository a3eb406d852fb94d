"""Whether the service needs a token is decided when `serve` starts, never from whether tokens
exist at request time: revoking the last token leaves a locked service, and only --insecure
runs open.  Real `losswatch serve` processes; tokens made and revoked with the real CLI."""

from __future__ import annotations

import httpx
import pytest
from click.testing import CliRunner

from app.cli import main
from tests.service_helpers import server_process, wait_for

POINTS = {"points": [{"step": 1, "tag": "train/loss", "value": 2.0}]}
NEEDS_TOKEN = "this service needs a bearer token: Authorization: Bearer <token>"


def cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def create(url: str, name: str) -> str:
    result = cli("token", "create", name, "--scope", "write", "--db", url)
    assert result.exit_code == 0, result.output
    return result.stdout.strip()


def revoked_last(name: str) -> str:
    return (f"losswatch: revoked {name!r}, the last token: a service that needed tokens stays locked (401 on every "
            "request but /healthz and /metrics) until `losswatch token create` makes a new one\n")


def anonymous(base: str) -> list[httpx.Response]:
    return [httpx.get(f"{base}/v1/runs"), httpx.post(f"{base}/v1/runs/r/points", json=POINTS), httpx.get(f"{base}/")]


@pytest.fixture
def url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'auth.db'}"


def test_revoking_the_last_token_of_a_wildcard_server_leaves_it_locked(url):
    token = create(url, "only")
    with server_process(url, "--host", "0.0.0.0") as (base, _):
        bearer = {"Authorization": f"Bearer {token}"}
        assert httpx.post(f"{base}/v1/runs/r/points", json=POINTS, headers=bearer).status_code == 200
        assert [r.status_code for r in anonymous(base)] == [401, 401, 401]
        revoked = cli("token", "revoke", "only", "--db", url)
        assert revoked.exit_code == 0 and revoked.stderr == revoked_last("only")
        for r in anonymous(base):
            assert r.status_code == 401 and r.json()["error"]["message"] == NEEDS_TOKEN
        # the revoked token itself is refused once the 5 s cache forgets it
        wait_for(lambda: httpx.get(f"{base}/v1/runs", headers=bearer).status_code == 401, timeout=15)
        assert httpx.get(f"{base}/healthz").status_code == 200


def test_a_loopback_server_started_with_tokens_stays_locked_when_all_are_revoked(url):
    create(url, "a")
    create(url, "b")
    with server_process(url) as (base, _):
        assert cli("token", "revoke", "a", "--db", url).stderr == ""  # "b" is left: nothing to say
        assert cli("token", "revoke", "b", "--db", url).stderr == revoked_last("b")
        assert [r.status_code for r in anonymous(base)] == [401, 401, 401]


def test_a_loopback_server_started_without_tokens_locks_at_the_first_token_for_good(url):
    with server_process(url) as (base, _):
        assert [r.status_code for r in anonymous(base)] == [200, 200, 200]  # open on loopback, as started
        token = create(url, "first")
        assert [r.status_code for r in anonymous(base)] == [401, 401, 401]  # at once: no cache on this check
        assert httpx.get(f"{base}/v1/runs", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        assert cli("token", "revoke", "first", "--db", url).stderr == revoked_last("first")
        assert [r.status_code for r in anonymous(base)] == [401, 401, 401]  # never open again


def test_insecure_is_the_one_way_to_run_open_even_with_tokens(url):
    create(url, "t")
    with server_process(url, "--host", "0.0.0.0", "--insecure") as (base, process):
        assert [r.status_code for r in anonymous(base)] == [200, 200, 200]
        cli("token", "revoke", "t", "--db", url)
        assert [r.status_code for r in anonymous(base)] == [200, 200, 200]
        process.terminate()
        process.wait(timeout=30)
        assert "losswatch: --insecure: no request needs a token\n" in process.stderr.read().decode()


def test_a_wildcard_server_without_a_token_refuses_to_start(url):
    result = cli("serve", "--host", "0.0.0.0", "--db", url)
    assert result.exit_code == 2
    assert result.stderr == (
        "losswatch: refusing to listen on 0.0.0.0 with no API token: anyone who can reach it could post and read. "
        "Create one with `losswatch token create NAME --scope write`, or pass --insecure\n"
    )


def test_external_url_must_be_an_origin(url):
    result = cli("serve", "--db", url, "--external-url", "https://lw.example/path")
    assert result.exit_code == 2 and "'https://lw.example/path' is not http(s)://HOST[:PORT]" in result.stderr

"""Database outages, in a real `losswatch serve` process: a TCP proxy between it and
PostgreSQL refuses connections (the database is down) or swallows them (a partition).
Every request answers 503 with the JSON error body and Retry-After instead of a plain 500
or a hang, /healthz says why, and the service recovers by itself once the database is
back.  A database emptied under the service, or held by another writer, is answered the
same way."""

from __future__ import annotations

import json
import sqlite3

import httpx
import pytest
import sqlalchemy as sa

from app.store.db import head_revision
from app.store.schema import metadata
from tests.service_helpers import server_process, service, wait_for
from tests.tcp_proxy import TcpProxy

TIMEOUTS = ("--db-connect-timeout", "2", "--db-statement-timeout", "1")
UNAVAILABLE = {"error": {"code": "store_unavailable", "message": "the database is unavailable: try again later"}}
UNREACHABLE = {"status": "unavailable", "database": "unreachable"}


def points(first: int, last: int, nan_from: int | None = None) -> dict:
    return {"points": [{"step": i, "tag": "train/loss", "value": "NaN" if nan_from is not None and i >= nan_from else 3.0 - i / 1000}
                       for i in range(first, last)]}


def assert_unavailable(response: httpx.Response) -> None:
    assert (response.status_code, response.json(), response.headers.get("retry-after")) == (503, UNAVAILABLE, "5")


@pytest.fixture
def proxied(pg_url):
    """The test's PostgreSQL schema, reached through a proxy the test can cut."""
    proxy = TcpProxy(("127.0.0.1", 5432))
    yield pg_url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}"), proxy
    proxy.close()


def every_kind_of_request(http: httpx.Client) -> list[httpx.Response]:
    return [
        http.get("/v1/runs"),
        http.get("/v1/runs/a"),
        http.get("/v1/runs/a/series", params={"tag": "train/loss"}),
        http.get("/v1/alerts"),
        http.post("/v1/runs/a/points", json=points(100, 110)),
    ]


def recovers(http: httpx.Client) -> None:
    """Back without a restart: health, reads, writes, and the background analysis."""
    wait_for(lambda: http.get("/healthz").status_code == 200, timeout=60)
    assert http.get("/healthz").json() == {"status": "ok", "database": "ok"}
    assert http.post("/v1/runs/a/points", json=points(100, 200)).status_code == 200
    assert http.get("/v1/runs/a").json()["points"] == 200
    assert "losswatch_database_up 1.0" in http.get("/metrics").text
    # a second post within --analysis-interval is left to the background loop, which survived
    assert http.post("/v1/runs/b/points", json=points(0, 300)).json()["analysis"] == "done"
    assert http.post("/v1/runs/b/points", json=points(300, 400, nan_from=300)).json()["analysis"] == "deferred"
    wait_for(lambda: [a["kind"] for a in http.get("/v1/runs/b/alerts").json()] == ["nonfinite"], timeout=60)


def test_a_refused_database_answers_503_json_then_recovers(proxied):
    url, proxy = proxied
    with server_process(url, *TIMEOUTS, "--analysis-interval", "2") as (base, process):
        with httpx.Client(base_url=base, timeout=60) as http:  # a hang fails the test
            assert http.post("/v1/runs/a/points", json=points(0, 100)).status_code == 200
            proxy.refuse()
            for response in every_kind_of_request(http):
                assert_unavailable(response)
            health = http.get("/healthz")
            assert (health.status_code, health.json(), health.headers["retry-after"]) == (503, UNREACHABLE, "5")
            metrics = http.get("/metrics")
            assert metrics.status_code == 200 and "losswatch_database_up 0.0" in metrics.text
            proxy.restore()
            recovers(http)
        process.terminate()
        process.wait(timeout=30)
        logs = [json.loads(line) for line in process.stderr.read().decode().splitlines() if line.startswith("{")]
    background = [(r["message"], r["loop"]) for r in logs if r["logger"] == "losswatch.background"]
    # each loop says once that the database went, and once that it came back
    assert background.count(("database unavailable: retrying every tick", "analysis")) == 1
    assert background.count(("database available again", "analysis")) == 1
    assert not [r for r in logs if r["level"] == "ERROR"]


def test_a_partition_answers_503_within_the_timeouts_instead_of_hanging_then_recovers(proxied):
    url, proxy = proxied
    with server_process(url, *TIMEOUTS, "--analysis-interval", "2") as (base, _):
        with httpx.Client(base_url=base, timeout=60) as http:
            assert http.post("/v1/runs/a/points", json=points(0, 100)).status_code == 200
            proxy.blackhole()
            for response in every_kind_of_request(http):
                assert_unavailable(response)
            assert http.get("/healthz").json() == UNREACHABLE
            assert "losswatch_database_up 0.0" in http.get("/metrics").text
            proxy.restore()
            recovers(http)


def emptied(url: str) -> None:
    """Drop every losswatch table, as a database recreated empty would be."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        metadata.drop_all(conn)
        conn.execute(sa.text("DROP TABLE alembic_version"))
    engine.dispose()


def test_an_emptied_database_is_unhealthy_and_says_why(store_url):
    with server_process(store_url) as (base, _):
        with httpx.Client(base_url=base, timeout=60) as http:
            assert http.post("/v1/runs/a/points", json=points(0, 10)).status_code == 200
            emptied(store_url)
            health = http.get("/healthz")
            assert health.status_code == 503
            assert health.json() == {
                "status": "unavailable",
                "database": "no losswatch schema: the database is empty (restart `losswatch serve` to create it)",
            }
            for response in every_kind_of_request(http):
                assert_unavailable(response)


def test_a_schema_at_another_revision_is_unhealthy(store_url):
    with service(store_url) as client:
        with client.app.state.store.write() as conn:
            conn.execute(sa.text("UPDATE alembic_version SET version_num = '0003'"))
        health = client.get("/healthz")
    assert health.status_code == 503
    assert health.json()["database"] == f"the schema is at revision 0003; this losswatch needs {head_revision()}"


def test_a_sqlite_database_locked_by_another_writer_answers_503_within_the_statement_timeout(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with server_process(url, "--db-statement-timeout", "1") as (base, _):
        with httpx.Client(base_url=base, timeout=60) as http:
            assert http.post("/v1/runs/a/points", json=points(0, 10)).status_code == 200
            holder = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
            holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
            try:
                assert_unavailable(http.post("/v1/runs/a/points", json=points(10, 20)))
                assert http.get("/v1/runs/a").json()["points"] == 10  # reads go on (WAL)
            finally:
                holder.rollback()
                holder.close()
            assert http.post("/v1/runs/a/points", json=points(10, 20)).status_code == 200

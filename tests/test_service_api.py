"""Reading runs and alerts, watching logdirs, tokens, health and metrics."""

from __future__ import annotations

import os
import time

import httpx
import numpy as np
import pytest

from app.store import runs as stored_runs
from app.store import tokens
from app.store.db import open_store
from tests.eventfiles import scalar_event, write_events
from tests.service_helpers import service, wait_for


def curve(n=1000, spike_at=None, nan_from=None):
    v = (2 + 3 * np.exp(-np.arange(n) / 200)) * (1 - 0.1 * np.arange(n) / n)
    if spike_at is not None:
        v[spike_at] *= 4
    if nan_from is not None:
        v[nan_from:] = np.nan
    return {"points": [{"step": i, "tag": "train/loss", "value": "NaN" if np.isnan(x) else float(x)} for i, x in enumerate(v)]}


@pytest.fixture
def client(store_url):
    with service(store_url) as c:
        yield c


def test_runs_list_and_detail(client):
    client.post("/v1/runs/ok/points", json=curve())
    client.post("/v1/runs/bad/points", json=curve(nan_from=900))
    runs = {r["name"]: r for r in client.get("/v1/runs").json()}
    assert runs["bad"]["open_alerts"] == {"critical": 1, "warning": 0, "info": 0}
    assert runs["ok"]["open_alerts"] == {"critical": 0, "warning": 0, "info": 0}
    detail = client.get("/v1/runs/bad").json()
    assert detail["tags"] == [{"tag": "train/loss", "role": "loss", "points": 1000, "first_step": 0, "last_step": 999}]
    missing = client.get("/v1/runs/nope")
    assert missing.status_code == 404 and missing.json()["error"] == {"code": "not_found", "message": "no run 'nope'"}


def test_runs_carry_their_health_from_the_last_analysis(client, store_url):
    client.post("/v1/runs/bad/points", json=curve(nan_from=900))
    val = [3.6, 3.0, 2.7, 2.6, 2.7, 2.8, 2.95, 3.1, 3.3, 3.5]
    points = curve()["points"] + [{"step": 99 + 100 * i, "tag": "val/loss", "value": v} for i, v in enumerate(val)]
    client.post("/v1/runs/over/points", json={"points": points})
    runs = {r["name"]: r["health"] for r in client.get("/v1/runs").json()}
    assert (runs["bad"]["status"], runs["bad"]["reason"]) == ("diverged", "nonfinite on train/loss since step 900")
    over = client.get("/v1/runs/over").json()["health"]
    assert over == {
        "status": "overfitting", "reason": "overfitting on val/loss since step 399", "spikes": 0,
        "spikes_per_1k_steps": 0.0, "largest_spike": None, "steps_above_band": 0,
        "best_eval": {"tag": "val/loss", "step": 399, "value": 2.6}, "last_step": 999,
    }
    store = open_store(store_url)
    try:
        with store.read() as conn:  # kept on the run's row: listing runs analyses nothing
            assert {r.name: r.health["status"] for r in stored_runs.list_runs(conn)} == {"bad": "diverged", "over": "overfitting"}
    finally:
        store.close()


def test_series_downsampling_keeps_the_spike(client):
    client.post("/v1/runs/s/points", json=curve(n=5000, spike_at=3333))
    series = client.get("/v1/runs/s/series", params={"tag": "train/loss", "max_points": 50}).json()
    assert series["total"] == 5000 and series["downsampled"] and len(series["points"]) <= 50
    assert 3333 in [step for step, _ in series["points"]]
    window = client.get("/v1/runs/s/series", params={"tag": "train/loss", "start": 100, "end": 199}).json()
    assert window["total"] == 100 and not window["downsampled"]
    assert client.get("/v1/runs/s/series", params={"tag": "nope"}).status_code == 404


def test_alerts_filters_acknowledge_and_silence(client):
    client.post("/v1/runs/bad/points", json=curve(nan_from=900))
    client.post("/v1/runs/spiky/points", json=curve(spike_at=500))
    critical = client.get("/v1/alerts", params={"severity": "critical"}).json()
    assert [(a["run"], a["kind"], a["state"]) for a in critical] == [("bad", "nonfinite", "firing")]
    assert [a["kind"] for a in client.get("/v1/alerts", params={"state": "resolved"}).json()] == ["loss_spike"]
    assert client.get("/v1/alerts", params={"since": time.time() + 60}).json() == []
    alert_id = critical[0]["id"]
    assert client.post(f"/v1/alerts/{alert_id}/acknowledge").json()["acknowledged"] is True
    assert client.put(f"/v1/alerts/{alert_id}/silence", json={"silenced": True}).json()["silenced"] is True
    assert client.post("/v1/alerts/abc123/acknowledge").status_code == 404
    assert [a["id"] for a in client.get("/v1/runs/bad/alerts").json()] == [alert_id]
    assert client.get("/v1/alerts", params={"state": "bogus"}).status_code == 422


def test_an_ambiguous_run_name_needs_its_source(store_url, tmp_path):
    for root in ("a", "b"):
        (tmp_path / root / "exp").mkdir(parents=True)
        write_events(tmp_path / root / "exp" / "events.out.tfevents.1", [scalar_event(i, "loss", 1.0) for i in range(10)])
    with service(store_url, allowed_roots=(str(tmp_path),), background=True, poll_interval=0.2) as c:
        for root in ("a", "b"):
            assert c.post("/v1/logdirs", json={"path": str(tmp_path / root)}).status_code == 201
        wait_for(lambda: len(c.get("/v1/runs").json()) == 2)
        r = c.get("/v1/runs/exp")
        assert r.status_code == 409 and r.json()["error"]["details"]["sources"] == sorted([str(tmp_path / "a"), str(tmp_path / "b")])
        assert c.get("/v1/runs/exp", params={"source": str(tmp_path / "a")}).json()["points"] == 10


def test_logdirs_only_under_allowed_roots(store_url, tmp_path):
    root = tmp_path / "logs"
    (root / "exp").mkdir(parents=True)
    (tmp_path / "secret").mkdir()
    os.symlink(tmp_path / "secret", root / "escape")
    with service(store_url, allowed_roots=(str(root),)) as c:
        ok = c.post("/v1/logdirs", json={"path": str(root / "exp")})
        assert ok.status_code == 201 and ok.json()["path"] == str(root / "exp")
        assert c.post("/v1/logdirs", json={"path": str(root / "exp")}).status_code == 409
        for bad in (str(tmp_path / "secret"), str(root / ".." / "secret"), str(root / "escape"), "/etc"):
            r = c.post("/v1/logdirs", json={"path": bad})
            assert r.status_code == 403, bad
            assert r.json()["error"] == {"code": "forbidden_path", "message": "the path is outside the allowed roots"}
        assert c.post("/v1/logdirs", json={"path": str(root / "missing")}).status_code == 404
        assert c.post("/v1/logdirs", json={"path": "relative/path"}).status_code == 422
        [listed] = c.get("/v1/logdirs").json()
        assert c.delete(f"/v1/logdirs/{listed['id']}").status_code == 204
        assert c.delete(f"/v1/logdirs/{listed['id']}").status_code == 404


def test_the_poller_scans_watched_logdirs_with_the_scan_code(store_url, tmp_path):
    (tmp_path / "exp").mkdir()
    v = np.full(600, 2.0)
    v[500:] = np.nan
    write_events(tmp_path / "exp" / "events.out.tfevents.1", [scalar_event(i, "train/loss", float(x)) for i, x in enumerate(v)])
    with service(store_url, allowed_roots=(str(tmp_path),), background=True, poll_interval=0.2) as c:
        c.post("/v1/logdirs", json={"path": str(tmp_path)})
        alerts = wait_for(lambda: c.get("/v1/alerts", params={"severity": "critical"}).json())
        assert alerts[0]["run"] == "exp" and alerts[0]["kind"] == "nonfinite"
        assert wait_for(lambda: c.get("/v1/logdirs").json()[0]["last_scan_at"])


def test_tokens_guard_reads_and_writes(store_url):
    store = open_store(store_url)
    with store.write() as conn:
        reader = tokens.create_token(conn, "ci-read", "read", 0.0)
        writer = tokens.create_token(conn, "trainer", "write", 0.0)
    store.close()
    with service(store_url) as c:
        anonymous = c.get("/v1/runs")
        assert anonymous.status_code == 401
        assert anonymous.json()["error"]["message"] == "this service needs a bearer token: Authorization: Bearer <token>"
        assert c.get("/v1/runs", headers={"Authorization": "Bearer nope"}).json()["error"]["message"] == "unknown token"
        as_reader = {"Authorization": f"Bearer {reader}"}
        assert c.get("/v1/runs", headers=as_reader).status_code == 200
        refused = c.post("/v1/runs/a/points", json=curve(), headers=as_reader)
        assert refused.status_code == 403 and refused.json()["error"]["message"] == "this token may not write"
        as_writer = {"Authorization": f"Bearer {writer}"}
        assert c.post("/v1/runs/a/points", json=curve(), headers=as_writer).status_code == 200
        assert c.get("/v1/runs", headers=as_writer).status_code == 200
        assert c.get("/healthz").status_code == 200  # load balancers need no token


def test_tokens_are_stored_hashed(store_url):
    store = open_store(store_url)
    with store.write() as conn:
        token = tokens.create_token(conn, "t", "read", 0.0)
    with store.read() as conn:
        import sqlalchemy as sa

        stored = conn.execute(sa.text("SELECT hash FROM tokens")).scalar()
    store.close()
    assert token not in stored and stored == tokens.digest(token)


def test_health_and_metrics(client):
    assert client.get("/healthz").json() == {"status": "ok", "database": "ok"}
    client.post("/v1/runs/bad/points", json=curve(nan_from=900))
    text = client.get("/metrics").text
    assert 'losswatch_points_ingested_total{via="json"} 1000.0' in text
    assert 'losswatch_alerts{severity="critical",state="firing"} 1.0' in text
    assert "losswatch_scan_duration_seconds_count" in text and "losswatch_webhook_failures_total" in text


def test_silenced_alerts_send_no_webhooks(store_url):
    seen = []
    with service(store_url, webhooks=("https://hooks.example/x",), analysis_interval=0) as c:
        c.post("/v1/runs/bad/points", json={"points": curve(nan_from=900)["points"][:950]})
        [alert] = c.get("/v1/alerts", params={"severity": "critical"}).json()
        c.put(f"/v1/alerts/{alert['id']}/silence", json={"silenced": True})
        # finite values again: the alert resolves, a change no webhook must hear of
        resolved = c.post("/v1/runs/bad/points", json={"points": curve()["points"][950:1000]}).json()
        assert [a["change"] for a in resolved["alerts"]] == ["resolved"]
        from app.alerts.webhooks import deliver_due

        client = httpx.Client(transport=httpx.MockTransport(lambda r: seen.append(r) or httpx.Response(200)))
        report = deliver_due(c.app.state.store, client)
    assert report.delivered == 1  # the firing before the silence; nothing after it


def test_two_services_on_one_postgresql_share_the_logdirs(pg_url, tmp_path):
    for r in range(6):
        (tmp_path / f"run{r}").mkdir()
        v = np.full(600, 2.0)
        v[500:] = np.nan
        write_events(tmp_path / f"run{r}" / "events.out.tfevents.1", [scalar_event(i, "train/loss", float(x)) for i, x in enumerate(v)])
    common = dict(allowed_roots=(str(tmp_path),), background=True, poll_interval=0.3)
    with service(pg_url, **common) as first, service(pg_url, **common) as second:
        first.post("/v1/logdirs", json={"path": str(tmp_path)})
        second.app.state.wake_poller()
        wait_for(lambda: len(first.get("/v1/alerts", params={"severity": "critical"}).json()) == 6)
        time.sleep(1.0)  # several more polls by both processes
        import sqlalchemy as sa

        engine = sa.create_engine(pg_url)
        with engine.connect() as conn:
            fired = conn.execute(sa.text(
                "SELECT count(*), count(DISTINCT alert_id) FROM alert_events WHERE change = 'firing'"
            )).one()
            points = conn.execute(sa.text("SELECT sum(count) FROM chunks")).scalar()
        engine.dispose()
    assert fired[0] == fired[1] >= 6 and points == 6 * 600  # each run read once, each alert fired once

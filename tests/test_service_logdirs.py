"""Watched logdirs in the real service process: a FIFO in one hangs nothing, the allowed
roots are checked again at every poll, and overlapping logdirs are refused or left to the
outer one."""

from __future__ import annotations

import os
import time

import httpx
import sqlalchemy as sa

from app.store import logdirs as stored_logdirs
from app.store.db import open_store
from tests.service_helpers import server_process, service, wait_for
from tests.test_scan_faults import logdir_with_fifo, nan_run


def runs_of(base: str) -> dict[str, int]:
    return {r["name"]: r["points"] for r in httpx.get(f"{base}/v1/runs", timeout=30).json()}


def scanned_logdir(base: str, since: float) -> dict:
    """The (only) watched logdir once a poll that started after `since` is recorded."""
    return wait_for(lambda: next((d for d in httpx.get(f"{base}/v1/logdirs", timeout=30).json()
                                  if (d["last_scan_at"] or 0) > since), None), timeout=60)


def test_a_fifo_in_a_watched_logdir_is_reported_and_hangs_nothing(tmp_path):
    logdir = tmp_path / "logs"
    fifo = logdir_with_fifo(logdir, 3)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with server_process(url, "--allow-root", str(tmp_path), "--poll-interval", "0.2") as (base, _):
        assert httpx.post(f"{base}/v1/logdirs", json={"path": str(logdir)}, timeout=30).status_code == 201
        answers = []
        for _ in range(3):  # polls keep running every 0.2 s meanwhile
            started = time.time()
            answers.append(httpx.post(f"{base}/v1/runs/trainer/points", json=[{"step": len(answers), "loss": 1.0}],
                                      timeout=60).status_code)
            watched = scanned_logdir(base, started)
        assert set(answers) == {200}
        assert watched["last_error"] == f"{fifo}: not a regular file (a FIFO): skipped"
        assert runs_of(base) == {"run0": 600, "run1": 600, "run2": 600, "trainer": 3}
        assert httpx.get(f"{base}/healthz", timeout=30).status_code == 200


def test_the_allowed_roots_are_checked_again_at_every_poll(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    nan_run(root / "logs" / "run")
    nan_run(outside / "secret", steps=700)
    link = root / "logs" / "run" / "events.out.tfevents.2"
    link.symlink_to(outside / "secret" / "events.out.tfevents.1")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with server_process(url, "--allow-root", str(root), "--poll-interval", "0.2") as (base, _):
        started = time.time()
        assert httpx.post(f"{base}/v1/logdirs", json={"path": str(root / "logs")}, timeout=30).status_code == 201
        watched = scanned_logdir(base, started)
        assert watched["last_error"] == f"{link}: its real path is outside the allowed roots: skipped"
        assert runs_of(base) == {"run": 600}
        os.rename(root / "logs", root / "moved")
        (root / "logs").symlink_to(outside)  # the registered directory, swapped for a symlink out
        swapped = time.time()
        watched = scanned_logdir(base, swapped)
        assert watched["last_error"] == f"{root / 'logs'}: resolves outside the allowed roots (a symlink?): not scanned"
        assert runs_of(base) == {"run": 600}


def test_overlapping_logdirs_are_refused(store_url, tmp_path):
    (tmp_path / "x" / "run" / "deeper").mkdir(parents=True)
    (tmp_path / "y").mkdir()
    outer, inner = str(tmp_path / "x"), str(tmp_path / "x" / "run")
    with service(store_url, allowed_roots=(str(tmp_path),)) as c:
        first = c.post("/v1/logdirs", json={"path": inner}).json()
        r = c.post("/v1/logdirs", json={"path": outer})
        assert r.status_code == 409
        assert r.json()["error"] == {
            "code": "overlapping_logdir",
            "message": f"{outer} holds the watched logdir {inner} (id {first['id']}): a run under both would be stored twice",
            "details": {"logdir": {"id": first["id"], "path": inner}},
        }
        r = c.post("/v1/logdirs", json={"path": inner + "/deeper"})
        assert r.status_code == 409 and r.json()["error"]["message"] == (
            f"{inner}/deeper inside the watched logdir {inner} (id {first['id']}): a run under both would be stored twice"
        )
        assert c.post("/v1/logdirs", json={"path": str(tmp_path / "y")}).status_code == 201
        assert c.post("/v1/logdirs", json={"path": inner}).json()["error"]["code"] == "exists"


def test_a_logdir_registered_inside_another_before_overlaps_were_refused_is_left_to_it(store_url, tmp_path):
    nan_run(tmp_path / "x" / "run")
    store = open_store(store_url)
    with store.write() as conn:  # as an older version registered them
        outer = stored_logdirs.add_logdir(conn, str(tmp_path / "x"), 0.0)
        inner = stored_logdirs.add_logdir(conn, str(tmp_path / "x" / "run"), 0.0)
    store.close()
    with service(store_url, allowed_roots=(str(tmp_path),), background=True, poll_interval=0.2) as c:
        def both_polled():
            listed = c.get("/v1/logdirs").json()
            return all(d["last_scan_at"] for d in listed) and listed

        listed = wait_for(both_polled)
        assert {d["path"]: d["last_error"] for d in listed} == {
            outer["path"]: None,
            inner["path"]: f"inside the watched logdir {outer['path']} (id {outer['id']}): not scanned, its runs are scanned there",
        }
        assert [(r["source"], r["name"], r["points"]) for r in c.get("/v1/runs").json()] == [(outer["path"], "run", 600)]
    engine = sa.create_engine(store_url)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM alert_events WHERE change = 'firing'")).scalar() == 1
    engine.dispose()

"""Stale runs: judged from a run's stored last-seen wall time and usual interval against an
injected clock (never by sleeping), by every scan, by the service's loop and on ingest;
`POST /v1/runs/{run}/finish`; the runs list's last seen and status; wall times in series."""

from __future__ import annotations

import time

import numpy as np

from analyzers.config import AnalysisConfig
from analyzers.findings import Kind
from analyzers.liveness import Liveness, StaleConfig, schedule_ended, stale_after, stale_finding, usual_interval
from app.scan import scan
from app.updates import check_liveness
from tests.eventfiles import scalar_event, write_events
from tests.service_helpers import service, wait_for

T0 = 1_800_000_000.0  # the runs' wall clock: 2027-01-15 08:00:00 UTC


def changes(events) -> list[tuple[str, str, str, int | None, str]]:
    return [(r.event.change.value, r.event.record.run, r.event.record.kind, r.event.step,
             r.event.reason or r.event.record.finding["message"]) for r in events]


def run_files(path, last: int, every: float = 10.0, lr_to: float | None = None, pause: tuple[int, float] = (0, 0.0)) -> None:
    """A run logging train/loss every 10 s of wall time (steps 0..last), pausing `pause[1]`
    seconds after step `pause[0]`; with `lr_to`, an LR that decays from 3e-4 to that share of it."""
    path.mkdir(parents=True, exist_ok=True)
    payloads = []
    for s in range(last + 1):
        wall = T0 + every * s + (pause[1] if s > pause[0] else 0.0)
        payloads.append(scalar_event(s, "train/loss", 2.0 - 1e-4 * s, wall))
        if lr_to is not None:
            payloads.append(scalar_event(s, "train/lr", 3e-4 * (1 - (1 - lr_to) * s / last), wall))
    write_events(path / "events.out.tfevents.1", payloads)


# --- the rule, pure ------------------------------------------------------------------------


def test_a_run_is_stale_after_k_usual_intervals_and_never_before_the_floor():
    config = StaleConfig()
    assert usual_interval([10.0, 10.0, 3600.0, 0.0, 11.0]) == 10.5  # a checkpoint pause does not set the pace
    assert stale_after(10.5, config) == 600.0  # 105 s < 10 minutes: the floor
    assert stale_after(120.0, config) == 1200.0  # 10 x 2 minutes
    assert stale_after(None, config) == 600.0
    live = Liveness(last_seen=T0, interval=120.0)
    assert stale_finding(live, 500, T0 + 1200.0, config) is None
    finding = stale_finding(live, 500, T0 + 1201.0, config)
    assert finding.kind is Kind.STALE and finding.ongoing and finding.start_step == 500 and finding.tag == ""
    assert finding.message == ("no new point since 2027-01-15 08:00:00 UTC at step 500 (usual interval 2 min; "
                               "stale after 20 min)")
    assert stale_finding(Liveness(T0, 120.0, finished=True), 500, T0 + 1e6, config) is None
    assert stale_finding(Liveness(T0, 120.0, schedule_ended=True), 500, T0 + 1e6, config) is None


def test_the_end_of_an_lr_schedule_is_its_decay_to_a_tenth_of_its_peak_after_the_peak():
    config = StaleConfig()
    warmup_then_cosine = np.concatenate([np.linspace(0, 3e-4, 100), 3e-4 * (0.5 + 0.5 * np.cos(np.linspace(0, np.pi, 900)))])
    assert schedule_ended(warmup_then_cosine, config)
    assert not schedule_ended(warmup_then_cosine[:700], config)  # 70% through: still at 35% of its peak
    assert not schedule_ended(np.linspace(0, 3e-4, 100), config)  # warming up: low at the start, not the end
    assert not schedule_ended(np.full(50, 3e-4), config)  # constant


# --- scans: a run that stops is noticed with no new data -------------------------------------


def test_a_scan_fires_stale_for_a_run_that_stopped_and_resolves_it_when_points_arrive(store, tmp_path):
    run_files(tmp_path / "a", 99)  # steps 0..99, the last at T0 + 990
    first = scan(store, [str(tmp_path)], clock=lambda: T0 + 990)  # read as it was written
    assert [c for c in changes(first.events) if c[2] == "stale"] == []
    assert changes(scan(store, [str(tmp_path)], clock=lambda: T0 + 990 + 600).events) == []  # 10 minutes: not yet
    later = scan(store, [str(tmp_path)], clock=lambda: T0 + 990 + 601)
    assert changes(later.events) == [
        ("firing", "a", "stale", 99, "no new point since 2027-01-15 08:16:30 UTC at step 99 (usual interval 10 s; "
                                     "stale after 10 min)"),
    ]
    assert changes(scan(store, [str(tmp_path)], clock=lambda: T0 + 5000).events) == []  # fired once
    run_files(tmp_path / "a", 120, pause=(99, 4000.0))  # the job came back: step 120 at T0 + 5200
    back = scan(store, [str(tmp_path)], clock=lambda: T0 + 5210)
    assert [c for c in changes(back.events) if c[2] == "stale"] == [
        ("resolved", "a", "stale", 120, "advanced again, to step 120 after being stale since step 99"),
    ]


def test_a_logdir_read_long_after_it_was_written_is_judged_from_when_it_was_first_seen(store, tmp_path):
    run_files(tmp_path / "old", 99)
    now = T0 + 86400 * 30  # a month later
    assert [c for c in changes(scan(store, [str(tmp_path)], clock=lambda: now).events) if c[2] == "stale"] == []
    assert [c[0] for c in changes(scan(store, [str(tmp_path)], clock=lambda: now + 601).events)] == ["firing"]


def test_a_run_whose_lr_schedule_ended_stays_quiet(store, tmp_path):
    run_files(tmp_path / "done", 99, lr_to=0.05)
    run_files(tmp_path / "crashed", 99, lr_to=0.5)
    scan(store, [str(tmp_path)], clock=lambda: T0 + 1000)
    late = scan(store, [str(tmp_path)], clock=lambda: T0 + 1e5)
    assert [(c[0], c[1]) for c in changes(late.events) if c[2] == "stale"] == [("firing", "crashed")]


def test_the_settings_set_k_and_the_floor(store, tmp_path):
    run_files(tmp_path / "a", 99, every=120.0)  # a point every 2 minutes: stale after 20
    last = T0 + 99 * 120.0
    scan(store, [str(tmp_path)], clock=lambda: last)
    assert changes(scan(store, [str(tmp_path)], clock=lambda: last + 1199).events) == []
    quick = AnalysisConfig.from_mapping({"stale": {"intervals": 3.0, "min_minutes": 1.0}})
    assert [c[0] for c in changes(scan(store, [str(tmp_path)], config=quick, clock=lambda: last + 361).events)] == ["firing"]


# --- the service: its loop, finish, the runs list -------------------------------------------


def post(client, run: str, steps: range, wall: float | None = None):
    points = [{"step": s, "tag": "train/loss", "value": 2.0 - 1e-3 * s} for s in steps]
    if wall is not None:
        for p in points:
            p["wall_time"] = wall
    response = client.post(f"/v1/runs/{run}/points", json={"points": points})
    assert response.status_code == 200, response.text
    return response.json()


def test_finish_marks_a_run_finished_resolves_its_stale_alert_and_new_points_unfinish_it(store_url):
    with service(store_url) as client:
        post(client, "job", range(0, 50))
        store = client.app.state.store
        seen = client.get("/v1/runs").json()[0]
        assert seen["status"] == "running" and seen["last_seen"] is not None
        fired = check_liveness(store, AnalysisConfig(), [], seen["last_seen"] + 601)
        assert [(c[0], c[2], c[3]) for c in changes(fired)] == [("firing", "stale", 49)]
        assert client.get("/v1/runs").json()[0]["status"] == "stale"  # its stale alert is open
        finished = client.post("/v1/runs/job/finish")
        assert finished.status_code == 200
        body = finished.json()
        assert body["run"] == "job" and body["source"] == "http"
        assert [(a["change"], a["alert"]["kind"], a["alert"]["message"]) for a in body["alerts"]] == [
            ("resolved", "stale", "marked finished after being stale since step 49"),
        ]
        assert client.get("/v1/runs").json()[0]["status"] == "finished"
        assert check_liveness(store, AnalysisConfig(), [], seen["last_seen"] + 1e6) == []  # finished: never stale
        post(client, "job", range(50, 60))
        assert client.get("/v1/runs/job").json()["status"] == "running"
        missing = client.post("/v1/runs/nope/finish")
        assert missing.status_code == 404 and missing.json()["error"]["message"] == "no run 'nope'"


def test_the_runs_list_says_stale_and_the_web_page_shows_last_seen(store_url):
    config = AnalysisConfig.from_mapping({"stale": {"min_minutes": 0.0, "intervals": 1.0}})
    with service(store_url, analysis=config) as client:
        before = time.time()
        post(client, "quiet", range(0, 10), wall=1.7e9)  # written long ago: last seen is when it was first seen
        run = client.get("/v1/runs/quiet").json()
        assert run["last_seen"] >= before and run["status"] == "stale"  # no interval yet, no floor: stale at once
        page = client.get("/").text
        assert '<span class="status status-stale">stale</span>' in page
        assert '<td class="last-seen">20' in page  # a UTC date


def test_the_services_loop_fires_stale_with_no_data_arriving(store_url, monkeypatch):
    monkeypatch.setattr("app.service.background.LIVENESS_EVERY", 0.2)
    config = AnalysisConfig.from_mapping({"stale": {"min_minutes": 0.02, "intervals": 1.0}})  # 1.2 s
    with service(store_url, analysis=config, background=True) as client:
        post(client, "hung", range(0, 10))
        stale = wait_for(lambda: [a for a in client.get("/v1/alerts").json() if a["kind"] == "stale"], timeout=20)
        assert [(a["run"], a["state"], a["severity"]) for a in stale] == [("hung", "firing", "warning")]
        post(client, "hung", range(10, 12))  # it posts again: resolved on ingest
        assert [a["state"] for a in client.get("/v1/alerts").json() if a["kind"] == "stale"] == ["resolved"]


def test_the_series_api_returns_wall_times(store_url):
    with service(store_url) as client:
        points = [{"step": s, "tag": "train/loss", "value": 1.0, "wall_time": T0 + s} for s in range(5)]
        points.append({"step": 5, "tag": "train/loss", "value": 1.0})
        client.post("/v1/runs/r/points", json={"points": points})
        body = client.get("/v1/runs/r/series", params={"tag": "train/loss"}).json()
        assert [p[0] for p in body["points"]] == [0, 1, 2, 3, 4, 5]
        assert body["wall_times"] == [T0, T0 + 1, T0 + 2, T0 + 3, T0 + 4, None]
        many = [{"step": s, "tag": "train/loss", "value": float(s % 7), "wall_time": T0 + 2 * s} for s in range(6, 5000)]
        client.post("/v1/runs/r/points", json={"points": many})
        small = client.get("/v1/runs/r/series", params={"tag": "train/loss", "max_points": 50}).json()
        assert small["downsampled"] and len(small["wall_times"]) == len(small["points"])
        assert all(w == T0 + 2 * s for (s, _), w in zip(small["points"], small["wall_times"]) if s >= 6)


def test_an_override_with_a_lower_floor_is_checked_for_its_runs(store, tmp_path):
    run_files(tmp_path / "fast-1", 99)
    run_files(tmp_path / "slow-1", 99)
    config = AnalysisConfig.from_mapping({"override": [{"run": "fast-*", "stale": {"min_minutes": 2.0}}]})
    scan(store, [str(tmp_path)], config=config, clock=lambda: T0 + 990)
    later = scan(store, [str(tmp_path)], config=config, clock=lambda: T0 + 990 + 121)
    assert [(c[0], c[1]) for c in changes(later.events)] == [("firing", "fast-1")]

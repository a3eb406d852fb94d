"""The store keeps each run's streaming state: a scan reads the state and the new writes,
never the whole run, and saves the state with the points and alerts in one transaction;
a rollback replays from the newest checkpoint before the rewritten steps, not from zero;
an alert final in an earlier analysis is left as it is."""

from __future__ import annotations

import json

import numpy as np
import pytest
import sqlalchemy as sa

from analyzers import runstream
from analyzers.config import AnalysisConfig
from app import incremental
from app.alerts.lifecycle import REWRITTEN, WITHDRAWN, AlertRecord, State, evaluate
from app.analysis import assess_writes
from app.scan import scan
from app.store import alerts as stored_alerts
from app.store import runs as stored_runs
from app.store import streams
from app.store.db import open_store
from app.store.schema import stream_checkpoints, stream_states
from tests.curves import clean_curve, running_mean_curve
from tests.eventfiles import record, scalar_event, write_events


def curve(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return (2 + 3 * np.exp(-t / 300)) * (1 - 0.1 * t / n) * (1 + 0.01 * rng.standard_normal(n))


def append(path, first_step: int, tags: dict[str, np.ndarray]) -> None:
    n = len(next(iter(tags.values())))
    with open(path, "ab") as f:
        for i in range(n):
            for tag, values in tags.items():
                f.write(record(scalar_event(first_step + i, tag, float(values[i]))))


def run_tags(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    loss = curve(n, seed)
    loss[n // 2 : n // 2 + 15] *= np.linspace(2.5, 1, 15)  # a spike
    grad = 1 + 0.05 * np.random.default_rng(seed + 1).standard_normal(n)
    grad[n // 2 - 2] = 40  # an explosion leading it
    return {"train/loss": loss, "grad_norm": grad, "lr": np.linspace(1e-3, 1e-4, n)}


def batch_view(store, name: str):
    """Alerts and health of a one-shot analysis of everything stored for the run."""
    with store.read() as conn:
        [run] = stored_runs.find_runs(conn, name)
        alerts, health = assess_writes(run.source, run.name, stored_runs.load_writes(conn, run.id),
                                       stored_runs.load_resumes(conn, run.id))
        stored = stored_alerts.load_alerts(conn, run.id)
        return run, {a.id: a.to_dict() for a in alerts}, health.to_dict(), stored


def no_whole_run_reads(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("load_writes read the whole run")
    monkeypatch.setattr(stored_runs, "load_writes", refuse)


def test_scans_in_appends_read_only_new_writes_and_end_where_one_shot_ends(store, tmp_path, monkeypatch):
    (tmp_path / "r").mkdir()
    events = tmp_path / "r" / "events.out.tfevents.1"
    write_events(events, [])
    tags = run_tags(6000)
    with monkeypatch.context() as m:
        no_whole_run_reads(m)
        for a, b in [(0, 1000), (1000, 2990), (2990, 3001), (3001, 3002), (3002, 6000)]:
            append(events, a, {t: v[a:b] for t, v in tags.items()})
            scan(store, [str(tmp_path)])
    run, want, health, stored = batch_view(store, "r")
    assert {i: r.finding for i, r in stored.items()} == want
    assert run.health == health
    with store.read() as conn:
        row = conn.execute(sa.select(stream_states).where(stream_states.c.run_id == run.id)).one()
    assert row.points == 18000 and row.version == 5


def test_a_loss_logged_as_running_means_is_analysed_again_once_its_epochs_show(store, tmp_path):
    """Scanned as it grows, 100 steps a scan: its epoch starts read as spikes until the
    third reset shows the epochs; then the run is analysed again from its start, each
    batch's loss worked back, and those alerts resolve.  It ends where one shot ends."""
    curve, _ = running_mean_curve(22, 300, spike_at=1500)  # as logged, spikes at 317 and 320; its epochs show at 600
    (tmp_path / "r").mkdir()
    events = tmp_path / "r" / "events.out.tfevents.1"
    write_events(events, [])
    for a in range(0, 3000, 100):
        append(events, a, {t: v[a : a + 100] for t, v in curve.tags.items()})
        scan(store, [str(tmp_path)])
    run, want, health, stored = batch_view(store, "r")
    assert [(a["kind"], a["classification"], a["start_step"]) for a in want.values()] == [("loss_spike", "slow_recovering", 1500)]
    assert {i: stored[i].finding for i in want} == want and run.health == health
    early = {i: r for i, r in stored.items() if i not in want}
    assert early and {r.state for r in early.values()} == {State.RESOLVED}


def test_the_state_commits_with_the_points_or_not_at_all(store, tmp_path, monkeypatch):
    (tmp_path / "r").mkdir()
    events = tmp_path / "r" / "events.out.tfevents.1"
    write_events(events, [])
    tags = run_tags(2000)
    append(events, 0, {t: v[:1000] for t, v in tags.items()})
    scan(store, [str(tmp_path)])
    append(events, 1000, {t: v[1000:] for t, v in tags.items()})

    def crash(*args, **kwargs):
        raise RuntimeError("killed mid-transaction")

    with monkeypatch.context() as m:
        m.setattr(stored_alerts, "save_alerts", crash)
        with pytest.raises(RuntimeError):
            scan(store, [str(tmp_path)])
    with store.read() as conn:
        [run] = stored_runs.find_runs(conn, "r")
        saved = streams.load_state(conn, run.id)
    assert (run.points, saved.points, saved.version) == (3000, 3000, 1)
    scan(store, [str(tmp_path)])  # the next scan does it all again, once
    run, want, health, stored = batch_view(store, "r")
    assert {i: r.finding for i, r in stored.items()} == want and run.health == health


def test_a_rollback_replays_from_the_newest_checkpoint_before_it(store, tmp_path, monkeypatch):
    monkeypatch.setattr(streams, "CHECKPOINT_POINTS", 3000)
    (tmp_path / "r").mkdir()
    first = tmp_path / "r" / "events.out.tfevents.1"
    write_events(first, [])
    tags = run_tags(9000)
    tags["train/loss"][7000:] *= 1.8  # a divergent step up, rewritten by the resume below
    for a in range(0, 8000, 1000):
        append(first, a, {t: v[a : a + 1000] for t, v in tags.items()})
        scan(store, [str(tmp_path)])
    with store.read() as conn:
        [run] = stored_runs.find_runs(conn, "r")
        kept = streams.checkpoints(conn, run.id)
    assert [c.points for c in kept] == [3000, 6000, 9000, 12000, 15000, 18000, 21000, 24000]
    replays = []
    real = streams.writes_after
    monkeypatch.setattr(streams, "writes_after", lambda conn, run_id, fed: replays.append(dict(fed)) or real(conn, run_id, fed))
    second = tmp_path / "r" / "events.out.tfevents.2"
    write_events(second, [])
    tags["train/loss"][7000:] /= 1.8
    append(second, 6500, {t: v[6500:8000] for t, v in tags.items()})
    no_whole_run_reads(monkeypatch)
    outcome = scan(store, [str(tmp_path)])  # resumed from step 6500, without the step up
    [fed] = replays
    assert max(fed.values()) == 5999  # the newest checkpoint before step 6500 (18000 points: 6000 steps of 3 tags)
    monkeypatch.undo()
    gone = [e for e in (r.event for r in outcome.events) if e.change.value == "resolved" and e.record.start_step >= 7000]
    assert gone and {e.reason for e in gone} == {"no longer seen: those steps were rewritten"}
    run, want, health, stored = batch_view(store, "r")
    assert {i: stored[i].finding for i in want} == want  # every finding of a one-shot analysis, as it says
    assert run.health == health
    with store.read() as conn:
        # those newer than the one replayed from saw rewritten steps: gone; the replayed state is one
        assert [c.points for c in streams.checkpoints(conn, run.id)] == [3000, 6000, 9000, 12000, 15000, 18000, 24000]


def record_of(alert_id: str, state: State, start: int) -> AlertRecord:
    return AlertRecord(alert_id, "r", "train/loss", "loss_spike", state, "critical", "divergent", start,
                       {"message": "m"}, start, 0.0)


def test_an_alert_final_earlier_is_left_as_it_is_and_one_open_earlier_resolves():
    stored = {"final": record_of("final", State.FIRING, 100), "open": record_of("open", State.FIRING, 200)}
    records, events = evaluate(stored, [], 500, 1.0, vanishing={"open": REWRITTEN})
    assert [(e.record.id, e.change.value, e.reason) for e in events] == [
        ("open", "resolved", "no longer seen: those steps were rewritten")
    ]
    assert [r.id for r in records] == ["open"]


def test_a_run_replaced_forgets_its_state(store, tmp_path):
    (tmp_path / "r").mkdir()
    events = tmp_path / "r" / "events.out.tfevents.1"
    write_events(events, [])
    append(events, 0, {t: v[:500] for t, v in run_tags(1000).items()})
    scan(store, [str(tmp_path)])
    with store.write() as conn:
        [run] = stored_runs.find_runs(conn, "r")
        stored_runs.delete_points(conn, run.id)
        assert streams.load_state(conn, run.id) is None
        assert conn.execute(sa.select(stream_checkpoints).where(stream_checkpoints.c.run_id == run.id)).first() is None


def test_nothing_new_reads_nothing(store, tmp_path):
    (tmp_path / "r").mkdir()
    events = tmp_path / "r" / "events.out.tfevents.1"
    write_events(events, [])
    append(events, 0, {t: v[:1990] for t, v in run_tags(2000).items()})
    scan(store, [str(tmp_path)])
    with store.read() as conn:
        [run] = stored_runs.find_runs(conn, "r")
        saved = streams.load_state(conn, run.id)
        assert streams.new_writes(conn, run.id, saved.positions)[0] == {}
        assert incremental.advance(conn, run, AnalysisConfig()).advance.points == saved.points == 3 * 1990


def test_http_appends_and_a_rollback_feed_only_new_points(store_url, monkeypatch):
    """Each post is analysed at once (analysis_interval 0) from the saved state; a rollback
    posted over HTTP replays and resolves the spike it rewrote, as a one-shot analysis says."""
    from tests.service_helpers import service

    loss = curve(3000)
    loss[2500:] *= 1.8  # a step up still firing when the rollback comes
    no_whole_run_reads(monkeypatch)
    with service(store_url, analysis_interval=0.0) as client:
        for a in range(0, 3000, 250):
            body = {"points": [{"step": s, "tag": "train/loss", "value": float(loss[s])} for s in range(a, a + 250)]}
            assert client.post("/v1/runs/h/points", json=body).json()["analysis"] == "done"
        fired = client.get("/v1/runs/h").json()
        out = client.post("/v1/runs/h/rollback", json={"to_step": 2400}).json()
        assert out["analysis"] == "done"
        gone = [c for c in out["alerts"] if c["change"] == "resolved" and c["alert"]["kind"] == "loss_spike"]
        assert [c["alert"]["start_step"] for c in gone] == [2500], fired
    monkeypatch.undo()
    store = open_store(store_url)
    try:
        run, want, health, stored = batch_view(store, "h")
        assert {i: stored[i].finding for i in want} == want and run.health == health
    finally:
        store.close()


def test_http_posts_of_running_means_end_where_one_shot_ends(store_url):
    """A loop posting its epoch's running mean 50 steps a post, each analysed at once: the
    means as logged raise an info spike (back at once); the post that brings step 600
    shows the epochs, and the run is analysed again from its start, worked back; the jump
    in the batches' loss at 1500 fires in the post that brings it and resolves once back."""
    from tests.service_helpers import service

    curve, _ = running_mean_curve(22, 300, spike_at=1500)
    loss = curve.tags["train/loss"]
    with service(store_url, analysis_interval=0.0) as client:
        changes = []
        for a in range(0, 3000, 50):
            body = {"points": [{"step": s, "tag": "train/loss", "value": float(loss[s])} for s in range(a, a + 50)]}
            out = client.post("/v1/runs/k/points", json=body).json()
            assert out["analysis"] == "done"
            changes += [(a, c["change"], c["alert"]["start_step"], c["alert"]["severity"]) for c in out["alerts"]]
    assert changes == [(300, "firing", 317, "info"), (300, "resolved", 317, "info"), (1500, "firing", 1500, "warning"),
                       (1750, "resolved", 1500, "warning")]
    store = open_store(store_url)
    try:
        run, want, health, stored = batch_view(store, "k")
        assert [(a["kind"], a["classification"], a["start_step"]) for a in want.values()] == [("loss_spike", "slow_recovering", 1500)]
        assert {i: stored[i].finding for i in want} == want and run.health == health
    finally:
        store.close()


def test_a_spike_told_at_its_onset_that_keeps_climbing_resolves_as_withdrawn(store):
    """A loss logged every 100 steps, posted a point at a time: a jump is told at once as a
    pending info spike; it then keeps climbing, a trend's, and resolves saying so."""
    from app.service.ingest import ingest_json
    from app.service.settings import Settings

    curve = clean_curve(4, points=300, interval=100, noise=0.01)
    loss = curve.tags["train/loss"].copy()
    loss[200] *= 1.15
    loss[202:] *= 1.12 + 0.04 * np.arange(98)
    settings = Settings(analysis_interval=0.0, background=False)
    changes = []
    for k, (s, v) in enumerate(zip(curve.steps, loss)):
        body = json.dumps({"points": [{"step": int(s), "tag": "train/loss", "value": float(v)}]}).encode()
        out = ingest_json(store, "climb", body, False, False, settings, float(k))
        changes += [(int(s), r.event.change.value, r.event.record.start_step, r.event.record.severity, r.event.reason)
                    for r in out.changes if r.event.record.kind == "loss_spike"]
    assert changes == [(20000, "firing", 20000, "info", ""), (20600, "resolved", 20000, "info", WITHDRAWN)]


def test_other_settings_start_the_analysis_again(store, tmp_path):
    (tmp_path / "r").mkdir()
    events = tmp_path / "r" / "events.out.tfevents.1"
    write_events(events, [])
    tags = run_tags(3000)
    append(events, 0, {t: v[:2000] for t, v in tags.items()})
    scan(store, [str(tmp_path)])
    append(events, 2000, {t: v[2000:] for t, v in tags.items()})
    strict = AnalysisConfig.from_mapping({"incident_steps": 0, "spikes": {"z": 12.0}})
    scan(store, [str(tmp_path)], config=strict)
    with store.read() as conn:
        [run] = stored_runs.find_runs(conn, "r")
        alerts, health = assess_writes(run.source, run.name, stored_runs.load_writes(conn, run.id), (), strict)
        stored = stored_alerts.load_alerts(conn, run.id)
    assert {a.id: stored[a.id].finding for a in alerts} == {a.id: a.to_dict() for a in alerts}
    assert run.health == health.to_dict()


def test_a_state_saved_by_an_older_release_starts_the_analysis_again(store, tmp_path, monkeypatch):
    (tmp_path / "r").mkdir()
    events = tmp_path / "r" / "events.out.tfevents.1"
    write_events(events, [])
    tags = run_tags(3000)
    append(events, 0, {t: v[:2000] for t, v in tags.items()})
    with monkeypatch.context() as m:  # saved by a release whose states had another shape
        m.setattr(runstream, "STATE_FORMAT", min(runstream.READ_FORMATS) - 1)
        scan(store, [str(tmp_path)])
    with store.read() as conn:
        [run] = stored_runs.find_runs(conn, "r")
        with pytest.raises(runstream.StateOutdated):
            runstream.loads(streams.load_state(conn, run.id).data)
    append(events, 2000, {t: v[2000:] for t, v in tags.items()})
    scan(store, [str(tmp_path)])
    run, want, health, stored = batch_view(store, "r")
    assert {i: r.finding for i, r in stored.items()} == want
    assert run.health == health
    with store.read() as conn:
        assert runstream.loads(streams.load_state(conn, run.id).data).points == 9000

"""One run's analysis failing never stops the others: the run that hid every point of a
tag behind a resume (the fault that did), and a detector raising on one run (injected),
through `analyze`, `scan`, the service's ingest and its deferred analysis."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import numpy as np
import sqlalchemy as sa
from click.testing import CliRunner

from app import analysis, incremental
from app.cli import main
from app.scan import scan
from app.store import streams
from app.store.db import open_store
from tests.eventfiles import file_version, scalar_event, write_events
from tests.service_helpers import server_process, service, wait_for


def tensorboardx_resume(run_dir) -> None:
    """The common resume that used to crash analysis: one writer logs train/loss for steps
    0-899 and eval/loss once at 800; a second writer in the same folder resumes at 500,
    so eval/loss has no point left in the current view."""
    run_dir.mkdir(parents=True)
    first = [file_version()] + [scalar_event(s, "train/loss", 3.0 - s / 600) for s in range(900)]
    first.insert(801, scalar_event(800, "eval/loss", 1.8))
    write_events(run_dir / "events.out.tfevents.1700000000.host", first)
    again = [file_version()] + [scalar_event(s, "train/loss", 3.0 - s / 600) for s in range(500, 700)]
    write_events(run_dir / "events.out.tfevents.1700009999.host", again)


def clean_run(run_dir) -> None:
    run_dir.mkdir(parents=True)
    write_events(run_dir / "events.out.tfevents.1", [scalar_event(s, "train/loss", 2.0 / (1 + s / 100)) for s in range(300)])


def test_a_resume_that_hides_a_whole_tag_is_analysed_in_a_real_process(tmp_path):
    tensorboardx_resume(tmp_path / "resumed")
    done = subprocess.run([sys.executable, "-m", "app.cli", "analyze", str(tmp_path), "--format", "json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    kinds = [a["kind"] for a in json.loads(done.stdout)["alerts"]]
    assert kinds == ["restart"]


def test_scan_stores_a_resumed_run_and_the_runs_after_it(tmp_path):
    tensorboardx_resume(tmp_path / "logs" / "a_resumed")
    clean_run(tmp_path / "logs" / "b_clean")
    db = f"sqlite:///{tmp_path / 'lw.db'}"
    done = subprocess.run([sys.executable, "-m", "app.cli", "scan", str(tmp_path / "logs"), "--db", db, "--format", "json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)["summary"]
    assert (summary["runs"], summary["changed"]) == (2, 2)


def _fail_for(monkeypatch, bad_run: str) -> None:
    """Make the detectors raise on one run only, as a detector bug met by its data would."""
    real = analysis.analyze_run

    def analyze_run(run_series, config):
        if any(s.tag == "bad/loss" for s in run_series.series.values()):
            raise ValueError(f"detector exploded on {bad_run}")
        return real(run_series, config)

    monkeypatch.setattr(analysis, "analyze_run", analyze_run)
    feed = incremental.feed_run  # the store's path (the streaming analysis of new writes) and `analyze`'s

    def feed_run(state, writes, *args, **kwargs):
        if "bad/loss" in writes or "bad/loss" in state.tags:
            raise ValueError(f"detector exploded on {bad_run}")
        return feed(state, writes, *args, **kwargs)

    monkeypatch.setattr(incremental, "feed_run", feed_run)
    monkeypatch.setattr(analysis, "feed_run", feed_run)  # `analyze`'s path: a source analysed as it is read


def test_analyze_reports_the_failed_run_and_analyses_the_others(tmp_path, monkeypatch):
    _fail_for(monkeypatch, "bad")
    (tmp_path / "bad").mkdir()
    write_events(tmp_path / "bad" / "events.out.tfevents.1", [scalar_event(s, "bad/loss", 1.0) for s in range(50)])
    run = tmp_path / "nan"
    run.mkdir()
    write_events(run / "events.out.tfevents.1", [scalar_event(s, "train/loss", float("nan") if s > 40 else 1.0) for s in range(50)])
    result = CliRunner().invoke(main, ["analyze", str(tmp_path), "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 2
    assert f"losswatch: run 'bad' ({tmp_path}): analysis failed: ValueError: detector exploded on bad" in result.stderr
    assert [a["run"] for a in json.loads(result.stdout)["alerts"]] == ["nan"]


def test_scan_records_the_failure_as_a_problem_and_goes_on(tmp_path, monkeypatch):
    _fail_for(monkeypatch, "bad")
    (tmp_path / "a_bad").mkdir()
    write_events(tmp_path / "a_bad" / "events.out.tfevents.1", [scalar_event(s, "bad/loss", 1.0) for s in range(50)])
    (tmp_path / "b_nan").mkdir()
    write_events(tmp_path / "b_nan" / "events.out.tfevents.1",
                 [scalar_event(s, "train/loss", float("nan") if s > 40 else 1.0) for s in range(50)])
    store = open_store(f"sqlite:///{tmp_path / 'lw.db'}")
    outcome = scan(store, [str(tmp_path)])
    assert [str(p) for p in outcome.problems] == [
        f"{tmp_path}: run a_bad: analysis failed: ValueError: detector exploded on bad"
    ]
    assert [(r.event.record.run, r.event.record.kind) for r in outcome.events] == [("b_nan", "nonfinite")]
    assert outcome.changed == 2
    store.close()


def test_ingest_stores_the_points_and_says_the_analysis_failed(store_url, monkeypatch):
    _fail_for(monkeypatch, "bad")
    with service(store_url, analysis_interval=0) as client:
        r = client.post("/v1/runs/bad/points", json=[{"step": s, "bad/loss": 1.0} for s in range(20)])
        assert r.status_code == 200
        out = r.json()
        assert (out["accepted"], out["analysis"], out["analysis_error"]) == (20, "failed", "ValueError: detector exploded on bad")
        assert client.get("/v1/runs/bad").json()["analysis_error"] == "ValueError: detector exploded on bad"
        page = client.get("/run", params={"name": "bad", "source": "http"}, headers={"Accept": "text/html"})
        assert "The last analysis of this run failed: <code>ValueError: detector exploded on bad</code>" in page.text
        good = client.post("/v1/runs/good/points", json=[{"step": s, "loss": "NaN" if s > 10 else 1.0} for s in range(20)])
        assert good.json()["analysis"] == "done"
        assert [a["alert"]["kind"] for a in good.json()["alerts"]] == ["nonfinite"]
        monkeypatch.undo()
        r = client.post("/v1/runs/bad/points", json=[{"step": 20, "bad/loss": 1.0}])
        assert r.json()["analysis"] == "done"
        assert client.get("/v1/runs/bad").json()["analysis_error"] is None


def test_a_database_lost_while_the_analysis_reads_is_a_503_not_an_analysis_failure(store_url, monkeypatch):
    """The chaos bench's one 500 (bench/chaos.py): the connection dropped while the analysis
    read the run's new writes; that error was taken for the detectors' ("analysis failed"),
    and the write after it met a dead transaction.  The trainer is told to retry, nothing of
    the batch is kept, and the run's next post is analysed as usual."""
    real = streams.new_writes

    def dropped(*args, **kwargs):
        raise sa.exc.OperationalError("SELECT ...", {}, Exception("server closed the connection unexpectedly"))

    with service(store_url, analysis_interval=0) as client:
        monkeypatch.setattr(streams, "new_writes", dropped)
        r = client.post("/v1/runs/a/points", json=[{"step": s, "loss": 1.0} for s in range(20)])
        assert (r.status_code, r.json(), r.headers.get("retry-after")) == (
            503, {"error": {"code": "store_unavailable", "message": "the database is unavailable: try again later"}}, "5"
        )
        monkeypatch.setattr(streams, "new_writes", real)
        r = client.post("/v1/runs/a/points", json=[{"step": s, "loss": "NaN" if s > 10 else 1.0} for s in range(20)])
        assert (r.status_code, r.json()["accepted"], r.json()["analysis"]) == (200, 20, "done")
        run = client.get("/v1/runs/a").json()
        assert (run["points"], run["analysis_error"]) == (20, None)


def test_deferred_analysis_goes_on_past_a_failing_run(store_url, monkeypatch):
    _fail_for(monkeypatch, "bad")
    with service(store_url, background=True, analysis_interval=2) as client:
        for run, tag in (("bad", "bad/loss"), ("good", "loss")):
            client.post(f"/v1/runs/{run}/points", json=[{"step": 0, tag: 1.0}])
            r = client.post(f"/v1/runs/{run}/points", json=[{"step": s, tag: "NaN" if s > 10 else 1.0} for s in range(1, 20)])
            assert r.json()["analysis"] == "deferred"

        def good_alerts():
            return client.get("/v1/runs/good/alerts").json()

        assert [a["kind"] for a in wait_for(good_alerts)] == ["nonfinite"]
        assert wait_for(lambda: client.get("/v1/runs/bad").json()["analysis_error"]) == "ValueError: detector exploded on bad"


def test_a_rollback_before_every_point_keeps_the_service_working(tmp_path):
    """Over real HTTP: every point of every tag hidden by a rollback to step 0, then more
    points: each answer is 2xx and the run is analysed."""
    with server_process(f"sqlite:///{tmp_path / 'lw.db'}", "--analysis-interval", "0") as (base, _):
        r = httpx.post(f"{base}/v1/runs/p/points", json=[{"step": 1, "loss": 2, "grad_norm": 1}, {"step": 2, "loss": 1.9, "grad_norm": 1}])
        assert r.status_code == 200
        r = httpx.post(f"{base}/v1/runs/p/points", json=[{"step": 1, "grad_norm": 1.5}])
        assert (r.status_code, r.json()["analysis"]) == (200, "done")
        r = httpx.post(f"{base}/v1/runs/p/rollback", json={"to_step": 0})
        assert (r.status_code, r.json()["analysis"]) == (200, "done")
        r = httpx.post(f"{base}/v1/runs/p/points", json=[{"step": s, "loss": 2.0 - s / 100} for s in range(5)])
        assert (r.status_code, r.json()["analysis"], r.json()["accepted"]) == (200, "done", 5)
        series = httpx.get(f"{base}/v1/runs/p/series", params={"tag": "loss"}).json()
        assert [s for s, _ in series["points"]] == [0, 1, 2, 3, 4]
        assert np.allclose([v for _, v in series["points"]], [2.0 - s / 100 for s in range(5)])

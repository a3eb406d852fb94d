"""`losswatch scan --jobs N`: the runs shared among processes store and report what one
process would, progress counts every run, a run whose analysis a stopped scan owes is
analysed by the next scan, and a child process that dies costs only its own runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from app import scan as scanner
from app import scan_jobs
from app.cli import main
from app.ingest.logdir import RunState
from app.ingest.points import Points
from app.scan import scan
from app.store import alerts as stored_alerts
from app.store import runs as stored_runs
from app.store.db import open_store
from app.updates import store_points
from tests.eventfiles import write_events
from tests.test_scan import append, changes, loss_curve, many_runs, stored_points

RUNS = 10


@pytest.fixture
def few_runs_in_parallel(monkeypatch):
    """Children for a handful of runs (the threshold is read in the parent only)."""
    monkeypatch.setattr(scanner, "PARALLEL_RUNS", 2)


def logdir_of_runs(root, steps: int, first: int = 0) -> None:
    """RUNS runs, every third with a spike that recovers and every fourth with NaNs."""
    for i in range(RUNS):
        events = root / f"run{i:02d}" / "events.out.tfevents.1"
        if not events.exists():
            events.parent.mkdir(parents=True)
            write_events(events, [])
        v = loss_curve(3000, seed=i)
        if i % 3 == 0:
            v[1000:1020] *= np.linspace(3, 1, 20)
        if i % 4 == 1:
            v[1500:1510] = np.nan
        append(events, v[first:steps], first)


def test_a_loss_log_beside_the_shared_runs_is_scanned_once(tmp_path, few_runs_in_parallel):
    """JSON/CSV logs stay in this process's share; the event-file runs are shared."""
    logs = tmp_path / "logs"
    logdir_of_runs(logs, 1200)
    (logs / "csvrun").mkdir()
    (logs / "csvrun" / "metrics.csv").write_text("step,train_loss\n" + "".join(f"{i},{2.5 - i / 1000}\n" for i in range(600)))
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = open_store(url)
    outcome = scan(store, [str(logs)], jobs=2)
    again = scan(store, [str(logs)], jobs=2)
    store.close()
    assert (outcome.runs, outcome.changed, outcome.points, outcome.problems) == (RUNS + 1, RUNS + 1, RUNS * 1200 + 600, [])
    assert (again.changed, again.points) == (0, 0)
    assert stored(url)["csvrun"][:2] == (600, 599)


def stored(url: str) -> dict[str, tuple]:
    """Per run: its points, last step and points analysed, and its alerts as (kind, tag,
    start, state, severity, class)."""
    store = open_store(url)
    out = {}
    with store.read() as conn:
        for run in stored_runs.list_runs(conn):
            alerts = sorted((a.kind, a.tag, a.start_step, a.state, a.severity, a.classification)
                            for a in stored_alerts.load_alerts(conn, run.id).values())
            out[run.name] = (run.points, run.last_step, run.analyzed_points, alerts)
    store.close()
    return out


def test_runs_shared_among_processes_are_stored_and_reported_as_by_one(tmp_path, few_runs_in_parallel):
    logs = tmp_path / "logs"
    urls = {jobs: f"sqlite:///{tmp_path / f'jobs{jobs}.db'}" for jobs in (1, 2)}
    reports: dict[int, list] = {1: [], 2: []}
    for steps, first in ((1200, 0), (3000, 1200)):
        logdir_of_runs(logs, steps, first)
        for jobs, url in urls.items():
            store = open_store(url)
            told: list[tuple[int, int]] = []
            outcome = scan(store, [str(logs)], jobs=jobs, progress=lambda done, total, told=told: told.append((done, total)))
            store.close()
            assert (outcome.changed, outcome.points, outcome.problems) == (RUNS, RUNS * (steps - first), [])
            assert told[-1] == (RUNS, RUNS) and [d for d, _ in told] == sorted(d for d, _ in told)
            reports[jobs].append(sorted(changes(outcome)))
    assert reports[2] == reports[1]
    assert ("firing", "run00", "loss_spike", 1000) in reports[1][0] and ("resolved", "run01", "nonfinite", 1500) in reports[1][1]
    assert stored(urls[2]) == stored(urls[1])


def test_a_shared_scan_on_postgresql_stores_what_one_process_does(tmp_path, pg_url, few_runs_in_parallel):
    logs = tmp_path / "logs"
    logdir_of_runs(logs, 2000)
    store = open_store(pg_url)
    outcome = scan(store, [str(logs)], jobs=3)
    store.close()
    alone = f"sqlite:///{tmp_path / 'alone.db'}"
    store = open_store(alone)
    scan(store, [str(logs)])
    store.close()
    assert (outcome.changed, outcome.problems) == (RUNS, [])
    assert stored(pg_url) == stored(alone)


def test_a_run_whose_analysis_is_owed_is_analysed_by_the_next_scan(store_url, tmp_path):
    """What a scan stopped between storing a batch and analysing it leaves: the points and
    offsets stored, the run waiting for its analysis."""
    (tmp_path / "r").mkdir()
    events = tmp_path / "r" / "events.out.tfevents.1"
    write_events(events, [])
    append(events, loss_curve(1000), 0)
    store = open_store(store_url)
    assert scan(store, [str(tmp_path)]).changed == 1
    with store.write() as conn:
        run = stored_runs.lock_run(conn, os.path.realpath(tmp_path), "r", 0.0)
        nan = Points(("train/loss",), np.zeros(5, np.int32), np.arange(1000, 1005), np.full(5, 1.7e9), np.full(5, np.nan))
        store_points(conn, run, nan, np.zeros(5, np.int32), (), RunState(run.state.segments), 0.0, dirty=True)
    owed = scan(store, [str(tmp_path)])
    assert (owed.changed, changes(owed)) == (0, [("firing", "r", "nonfinite", 1000)])
    assert changes(scan(store, [str(tmp_path)])) == []
    with store.read() as conn:
        assert stored_runs.owed_runs(conn, [os.path.realpath(tmp_path)]) == []
    store.close()


def _dies(store, share, options, progress):
    if share:  # a child's: this process's share is empty
        os._exit(3)
    return []


def _counts(store, share, options, progress):
    progress(len(share))
    return sorted(share)


def test_a_child_that_dies_costs_only_its_share(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    told = []
    outcomes = scan_jobs.scan_shares(store, _counts, [[3, 1, 2], [5, 4]], None, told.append, lambda i, e: ("stopped", i))
    assert outcomes == [[1, 2, 3], [4, 5]] and sum(told) == 5
    stopped = scan_jobs.scan_shares(store, _dies, [[], [1]], None, told.append, lambda i, e: ("stopped", i, type(e).__name__))
    store.close()
    assert stopped[1] == ("stopped", 1, "BrokenProcessPool")


def test_the_command_line_takes_jobs(tmp_path, few_runs_in_parallel):
    logdir_of_runs(tmp_path / "logs", 1200)
    db = f"sqlite:///{tmp_path / 'store.db'}"
    result = CliRunner().invoke(main, ["scan", str(tmp_path / "logs"), "--db", db, "--jobs", "2", "--fail-on", "never"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1].endswith(f"in {RUNS} runs ({RUNS} with new data, {RUNS * 1200} new points)")
    bad = CliRunner().invoke(main, ["scan", str(tmp_path / "logs"), "--db", db, "--jobs", "0"])
    assert bad.exit_code == 2 and "'--jobs': 0 is not in the range x>=1" in bad.output


def test_kill_9_of_a_shared_scan_loses_and_duplicates_nothing(tmp_path):
    """The parent killed once its child has stored a batch: the child dies with it, and the
    next scan (in one process) finishes the work, each NaN run firing exactly once."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    runs = 3 * scanner.PARALLEL_RUNS
    total = many_runs(logdir, runs=runs, steps=400)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    open_store(url).close()
    command = [sys.executable, "-m", "app.cli", "scan", str(logdir), "--db", url, "--format", "json", "--fail-on", "never"]
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    child = [f"run{r:02d}" for r in range(runs) if scanner.share_of(os.path.realpath(logdir), f"run{r:02d}", 2) == 1]
    process = subprocess.Popen([*command, "--jobs", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    while process.poll() is None and not stored_points(url, child):
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
    at_kill = stored_points(url)
    time.sleep(1.0)
    assert stored_points(url) == at_kill < total  # nothing went on behind the killed scan
    subprocess.run(command, capture_output=True, env=env, check=True)
    assert stored_points(url) == total
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        fired = conn.execute(sa.text("SELECT alert_id, count(*) FROM alert_events WHERE change = 'firing' GROUP BY alert_id")).all()
        owed = conn.execute(sa.text("SELECT count(*) FROM runs WHERE dirty_since IS NOT NULL")).scalar()
    engine.dispose()
    assert len(fired) == len(range(0, runs, 3)) and all(count == 1 for _, count in fired)
    assert owed == 0

"""`scan` against hostile and changing logdirs: a FIFO, a filesystem that stops answering,
symlinks out of the allowed roots, a file rewritten under its own name, nested PATHs, and
a scan killed before it printed what it committed."""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
import threading

import httpx
import numpy as np
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from analyzers.config import AnalysisConfig
from analyzers.liveness import StaleConfig
from app import scan as scanner
from app.cli import main
from app.ingest.problems import IngestError
from app.scan import REPORT_LEASE, Reporter, printed, scan
from app.store import runs as stored_runs
from app.store.db import open_store
from tests.eventfiles import record, scalar_event, write_events
from tests.service_helpers import server_process

ENV = {**os.environ, "PYTHONPATH": os.getcwd()}


def nan_run(directory, steps: int = 600, nan_from: int = 500, wall_time: float = 1.7e9):
    """A run whose loss turns NaN at `nan_from`: one critical alert."""
    directory.mkdir(parents=True, exist_ok=True)
    v = np.full(steps, 2.0)
    v[nan_from:] = np.nan
    write_events(directory / "events.out.tfevents.1",
                 [file_version_at(wall_time), *(scalar_event(i, "train/loss", float(x)) for i, x in enumerate(v))])


def file_version_at(wall_time: float) -> bytes:
    from tensorboard.compat.proto import event_pb2

    return event_pb2.Event(wall_time=wall_time, file_version="brain.Event:2").SerializeToString()


def stored_points(url: str) -> int:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        total = conn.execute(sa.text("SELECT coalesce(sum(count), 0) FROM chunks")).scalar()
    engine.dispose()
    return int(total)


def changes(outcome) -> list[tuple[str, str, str, int]]:
    return [(r.event.change.value, r.event.record.run, r.event.record.kind, r.event.record.start_step) for r in outcome.events]


def scan_command(logdir, url, *extra):
    return [sys.executable, "-m", "app.cli", "scan", str(logdir), "--db", url, "--format", "json", "--fail-on", "never", *extra]


# -- a FIFO, a hung filesystem ---------------------------------------------------------------


def logdir_with_fifo(logdir, runs: int):
    """`runs` runs that go NaN, and a run `stuck` whose event file is a FIFO: a read would block."""
    for r in range(runs):
        nan_run(logdir / f"run{r}")
    (logdir / "stuck").mkdir()
    fifo = logdir / "stuck" / "events.out.tfevents.1"
    os.mkfifo(fifo)
    return fifo


def test_a_fifo_in_a_logdir_hangs_neither_scan_nor_the_service_beside_it(tmp_path):
    logdir = tmp_path / "logs"
    fifo = logdir_with_fifo(logdir, 6)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    open_store(url).close()
    with server_process(url) as (base, _):
        scanning = subprocess.Popen(scan_command(logdir, url), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
        answers = []
        while not answers or scanning.poll() is None:  # POSTs on the same SQLite file while the scan runs
            body = [{"step": len(answers), "loss": 1.0}]
            answers.append(httpx.post(f"{base}/v1/runs/trainer/points", json=body, timeout=60).status_code)
        out, err = scanning.communicate(timeout=120)
    assert scanning.returncode == 0, err.decode()
    assert err.decode().splitlines() == [f"losswatch: {fifo}: not a regular file (a FIFO): skipped"]
    summary = json.loads(out)["summary"]
    assert (summary["runs"], summary["changed"], summary["points"]) == (7, 6, 6 * 600)
    assert set(answers) == {200}
    assert stored_points(url) == 6 * 600 + len(answers)


def test_a_hung_read_holds_no_write_lock_and_times_out(store, tmp_path, hung_filesystem):
    nan_run(tmp_path / "logs" / "fine")
    nan_run(tmp_path / "logs" / "slow")
    result = {}
    scanning = threading.Thread(target=lambda: result.setdefault("outcome", scan(store, [str(tmp_path / "logs")], timeout=2)))
    scanning.start()
    assert hung_filesystem["entered"].wait(60)
    with store.write() as conn:  # what a POST does, while the scan is stuck in a read
        stored_runs.lock_run(conn, "http", "trainer", 0.0)
    scanning.join(60)
    assert not scanning.is_alive()
    outcome = result["outcome"]
    slow = tmp_path / "logs" / "slow" / "events.out.tfevents.1"
    assert [str(p) for p in outcome.problems] == [
        f"{slow}: byte 0: read timed out after 2 s (a hung filesystem?): the rest is read on a later scan"
    ]
    assert changes(outcome) == [("firing", "fine", "nonfinite", 500)]
    hung_filesystem["release"].set()
    later = scan(store, [str(tmp_path / "logs")])  # the filesystem answers again: the file is read
    assert later.problems == [] and changes(later) == [("firing", "slow", "nonfinite", 500)]


# -- allowed roots, checked at every scan ------------------------------------------------------


def test_with_roots_a_symlinked_file_or_logdir_leading_outside_is_not_read(store, tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    nan_run(root / "logs" / "run")
    nan_run(outside / "secret")
    link = root / "logs" / "run" / "events.out.tfevents.2"
    link.symlink_to(outside / "secret" / "events.out.tfevents.1")
    outcome = scan(store, [str(root / "logs")], roots=[str(root)])
    assert [str(p) for p in outcome.problems] == [f"{link}: its real path is outside the allowed roots: skipped"]
    assert outcome.points == 600
    os.rename(root / "logs", root / "moved")
    (root / "logs").symlink_to(outside)  # the registered directory, swapped for a symlink
    with pytest.raises(IngestError) as e:
        scan(store, [str(root / "logs")], roots=[str(root)])
    assert str(e.value) == f"{root / 'logs'}: resolves outside the allowed roots (a symlink?): not scanned"


# -- a file rewritten under its own name ------------------------------------------------------


def test_a_file_rewritten_shorter_replaces_the_runs_points_once(store, store_url, tmp_path):
    nan_run(tmp_path / "r", steps=600, nan_from=500)
    assert changes(scan(store, [str(tmp_path)])) == [("firing", "r", "nonfinite", 500)]
    path = tmp_path / "r" / "events.out.tfevents.1"
    read_before = path.stat().st_size
    nan_run(tmp_path / "r", steps=400, nan_from=400, wall_time=1.8e9)  # a new writer, same name, shorter
    outcome = scan(store, [str(tmp_path)])
    assert [str(p) for p in outcome.problems] == [
        f"{path}: rewritten since it was last read (now {path.stat().st_size} bytes long, shorter than the "
        f"{read_before} bytes read before): the run is read again from the start"
    ]
    assert changes(outcome) == [("resolved", "r", "nonfinite", 500)]
    assert outcome.points == 400 == stored_points(store_url)  # the file's old points are gone, none twice
    with open(path, "ab") as f:
        f.write(b"".join(record(scalar_event(s, "train/loss", 2.0)) for s in range(400, 450)))
    assert scan(store, [str(tmp_path)]).points == 50 and stored_points(store_url) == 450


# -- nested PATHs ---------------------------------------------------------------------------------


def test_nested_paths_scan_each_run_once_under_the_outermost(tmp_path):
    nan_run(tmp_path / "x" / "run")
    nan_run(tmp_path / "x" / "other")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    inner, outer = str(tmp_path / "x" / "run"), str(tmp_path / "x")
    result = CliRunner().invoke(main, ["scan", inner, outer, f"{outer}/", "--db", url, "--format", "json"])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"losswatch: {inner}: inside {outer}, also given: its runs are scanned once, under {outer}",
        f"losswatch: {outer}/: the same directory as {outer}, also given: its runs are scanned once, under {outer}",
    ]
    body = json.loads(result.stdout)
    assert body["summary"]["runs"] == 2 and body["summary"]["points"] == 1200
    assert sorted(c["alert"]["run"] for c in body["changes"]) == ["other", "run"]
    assert stored_points(url) == 1200


# -- changes a killed scan committed but never printed ------------------------------------------


def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    return int(done.stdout)


def test_changes_a_dead_scan_never_printed_are_printed_first_by_the_next(store, tmp_path):
    nan_run(tmp_path / "a")
    host = socket.gethostname()
    killed = scan(store, [str(tmp_path)], reporter=Reporter(f"{host}/{dead_pid()}/0"))  # committed, never printed
    assert changes(killed) == [("firing", "a", "nonfinite", 500)]
    nan_run(tmp_path / "b")
    reporter = Reporter.new()
    following = scan(store, [str(tmp_path)], reporter=reporter)
    assert following.earlier == 1
    assert changes(following) == [("firing", "a", "nonfinite", 500), ("firing", "b", "nonfinite", 500)]
    printed(store, reporter)
    assert changes(scan(store, [str(tmp_path)], reporter=Reporter.new())) == []


def test_changes_held_by_a_live_scan_are_left_to_it_and_a_lease_runs_out_on_other_hosts(store, tmp_path):
    # The clock jumps by hours and years here: the runs are never judged stale, so the only
    # changes are the ones held and taken over.
    scan = functools.partial(scanner.scan, config=AnalysisConfig(stale=StaleConfig(min_minutes=1e12)))
    nan_run(tmp_path / "a")
    alive = Reporter(f"{socket.gethostname()}/{os.getpid()}/0")  # this process: alive
    assert changes(scan(store, [str(tmp_path)], reporter=alive, clock=lambda: 1000.0)) == [("firing", "a", "nonfinite", 500)]
    assert scan(store, [str(tmp_path)], reporter=Reporter.new(), clock=lambda: 1e9).earlier == 0
    nan_run(tmp_path / "b")
    elsewhere = Reporter("other-host/1/0")
    scan(store, [str(tmp_path)], reporter=elsewhere, clock=lambda: 1000.0)
    assert scan(store, [str(tmp_path)], reporter=Reporter.new(), clock=lambda: 1000.0 + REPORT_LEASE - 1).earlier == 0
    late = scan(store, [str(tmp_path)], reporter=Reporter.new(), clock=lambda: 1000.0 + REPORT_LEASE + 1)
    assert changes(late) == [("firing", "b", "nonfinite", 500)] and late.earlier == 1

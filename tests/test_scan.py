"""`losswatch scan` as a cron job meets it: only new data is read, each alert and each
resolution is reported once, webhooks are delivered or retried, and neither a second scan
at the same time nor a kill -9 mid-scan loses, duplicates or re-reports anything."""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import httpx
import numpy as np
import sqlalchemy as sa
from click.testing import CliRunner

from analyzers.config import AnalysisConfig
from analyzers.liveness import StaleConfig
from app import scan as scanner
from app.cli import main
from app.scan import Reporter, printed, scan
from app.store import schema
from app.store.db import open_store
from tests.eventfiles import record, scalar_event, write_events

REPO = Path(__file__).resolve().parent.parent


def loss_curve(n: int, seed: int = 0) -> np.ndarray:
    """A run still making progress: fast decay, then a steady slow decline."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return (2 + 3 * np.exp(-t / 300)) * (1 - 0.15 * t / 3000) * (1 + 0.01 * rng.standard_normal(n))


def append(path, values: np.ndarray, first_step: int, tag: str = "train/loss") -> None:
    with open(path, "ab") as f:
        for i, v in enumerate(values):
            f.write(record(scalar_event(first_step + i, tag, float(v))))


def changes(outcome) -> list[tuple[str, str, str, int]]:
    return [(r.event.change.value, r.event.record.run, r.event.record.kind, r.event.record.start_step) for r in outcome.events]


def test_scans_read_only_what_is_new_and_report_each_change_once(store, tmp_path):
    (tmp_path / "r").mkdir()
    events = tmp_path / "r" / "events.out.tfevents.1"
    v = loss_curve(3000)
    v[1000:1020] *= np.linspace(3, 1, 20)
    write_events(events, [])
    append(events, v[:1500], 0)
    first = scan(store, [str(tmp_path)])
    assert first.points == 1500
    assert changes(first) == [("firing", "r", "loss_spike", 1000), ("resolved", "r", "loss_spike", 1000)]
    assert changes(scan(store, [str(tmp_path)])) == []
    append(events, v[1500:], 1500)
    later = scan(store, [str(tmp_path)])
    assert later.points == 1500 and changes(later) == []


def test_a_spike_still_up_fires_at_once_as_pending_and_resolves_with_its_class(store, tmp_path):
    (tmp_path / "r").mkdir()
    events = tmp_path / "r" / "events.out.tfevents.1"
    v = loss_curve(3000)
    v[2000:2300] *= np.linspace(2.5, 1, 300)
    write_events(events, [])
    append(events, v[:2100], 0)
    [fired] = [r.event for r in scan(store, [str(tmp_path)]).events]
    assert (fired.change.value, fired.step, fired.record.severity, fired.record.classification) == ("firing", 2099, "critical", "pending")
    assert fired.record.finding["message"] == "train/loss spiked at step 2000: 1.811 -> 4.527 (2.5x baseline); not back yet (pending)"
    assert changes(scan(store, [str(tmp_path)])) == []
    append(events, v[2100:], 2100)
    [resolved] = [r.event for r in scan(store, [str(tmp_path)]).events]
    assert (resolved.change.value, resolved.step, resolved.record.severity, resolved.record.classification) == (
        "resolved", 2283, "warning", "slow_recovering")
    assert resolved.record.finding["message"] == (
        "train/loss spiked at step 2000: 1.811 -> 4.527 (2.5x baseline), back only after 283 steps (slow-recovering)")


def test_nan_fires_once_and_resolves_once_when_finite_values_come_back(store, tmp_path):
    (tmp_path / "r").mkdir()
    events = tmp_path / "r" / "events.out.tfevents.1"
    v = loss_curve(2000)
    write_events(events, [])
    append(events, v[:1000], 0)
    append(events, [float("nan")] * 10, 1000)
    assert changes(scan(store, [str(tmp_path)])) == [("firing", "r", "nonfinite", 1000)]
    append(events, [float("nan")] * 5, 1010)
    assert changes(scan(store, [str(tmp_path)])) == []
    append(events, v[1015:], 1015)
    assert changes(scan(store, [str(tmp_path)])) == [("resolved", "r", "nonfinite", 1000)]


def test_a_rollback_that_rewrites_a_spike_resolves_it(store, tmp_path):
    (tmp_path / "r").mkdir()
    v = loss_curve(2000)
    v[1500:] *= 1.8  # a divergent step up
    write_events(tmp_path / "r" / "events.out.tfevents.1", [])
    append(tmp_path / "r" / "events.out.tfevents.1", v[:1900], 0)
    fired = changes(scan(store, [str(tmp_path)]))
    assert ("firing", "r", "loss_spike", 1500) in fired
    write_events(tmp_path / "r" / "events.out.tfevents.2", [])
    append(tmp_path / "r" / "events.out.tfevents.2", loss_curve(700, seed=1)[200:], 1300)  # resumed from 1300
    after = scan(store, [str(tmp_path)])
    assert ("resolved", "r", "loss_spike", 1500) in changes(after)
    [gone] = [r.event for r in after.events if r.event.record.kind == "loss_spike" and r.event.record.start_step == 1500]
    assert gone.reason == "no longer seen: those steps were rewritten"
    assert ("firing", "r", "restart", 1300) in changes(after)


# -- webhooks -------------------------------------------------------------------------------


def nan_logdir(tmp_path):
    (tmp_path / "r").mkdir(parents=True, exist_ok=True)
    v = loss_curve(600)
    v[500:] = np.nan
    write_events(tmp_path / "r" / "events.out.tfevents.1", [scalar_event(i, "train/loss", float(x)) for i, x in enumerate(v)])
    return tmp_path


def scripted(statuses: list[int | Exception], seen: list) -> httpx.Client:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append((str(request.url), json.loads(request.content)))
        status = statuses.pop(0) if statuses else 200
        if isinstance(status, Exception):
            raise status
        return httpx.Response(status)

    return httpx.Client(transport=httpx.MockTransport(handle))


def test_webhook_gets_the_generic_payload(store, tmp_path):
    seen = []
    outcome = scan(store, [str(nan_logdir(tmp_path))], webhooks=["https://hooks.example/lw"], client=scripted([], seen))
    assert outcome.deliveries.delivered == 1
    [(url, body)] = seen
    assert url == "https://hooks.example/lw"
    assert body["schema"] == "losswatch.alert.v1" and body["change"] == "firing" and body["severity"] == "critical"
    assert body["alert"]["kind"] == "nonfinite" and body["alert"]["run"] == "r" and body["step"] == 500


def test_slack_urls_get_the_slack_payload(store, tmp_path):
    seen = []
    scan(store, [str(nan_logdir(tmp_path))], webhooks=["slack+https://chat.example/hook"], client=scripted([], seen))
    [(url, body)] = seen
    assert url == "https://chat.example/hook"
    assert list(body) == ["text"]
    assert body["text"].startswith(":rotating_light: *CRITICAL* firing: `r` train/loss\ntrain/loss is NaN at 100 points")


def test_a_failed_delivery_is_retried_on_a_later_scan_and_holds_nothing_up(store, tmp_path):
    seen = []
    clock = iter(range(0, 10**6, 1000)).__next__
    scan = functools.partial(scanner.scan, config=AnalysisConfig(stale=StaleConfig(min_minutes=1e12)))  # 1000 s a tick
    failing = scripted([503, httpx.ConnectError("refused"), 503], seen)
    first = scan(store, [str(nan_logdir(tmp_path))], webhooks=["https://hooks.example/lw"], client=failing, clock=clock)
    assert first.deliveries.delivered == 0
    assert first.deliveries.failed == ["https://hooks.example/lw: HTTP 503"]
    assert changes(first) == [("firing", "r", "nonfinite", 500)]  # the scan still reports
    assert len(seen) == 3  # three attempts with backoff
    second = scan(store, [str(tmp_path)], client=scripted([], seen), clock=clock)
    assert second.deliveries.delivered == 1 and changes(second) == []
    assert scan(store, [str(tmp_path)], client=scripted([], seen), clock=clock).deliveries.delivered == 0


def test_a_refused_delivery_is_not_hammered(store, tmp_path):
    seen = []
    outcome = scan(store, [str(nan_logdir(tmp_path))], webhooks=["https://hooks.example/lw"], client=scripted([404], seen))
    assert outcome.deliveries.failed == ["https://hooks.example/lw: HTTP 404"] and len(seen) == 1


def test_a_real_receiver_over_a_socket(store, tmp_path):
    received = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        with httpx.Client() as client:
            outcome = scan(store, [str(nan_logdir(tmp_path))], webhooks=[url], client=client)
    finally:
        server.shutdown()
    assert outcome.deliveries.delivered == 1
    assert received[0]["alert"]["kind"] == "nonfinite"


# -- concurrency and crashes ----------------------------------------------------------------


def many_runs(tmp_path, runs: int = 12, steps: int = 1500):
    for r in range(runs):
        (tmp_path / f"run{r:02d}").mkdir()
        v = loss_curve(steps, seed=r)
        if r % 3 == 0:
            v[steps // 2 :] = np.nan
        write_events(tmp_path / f"run{r:02d}" / "events.out.tfevents.1",
                     [scalar_event(i, "train/loss", float(x)) for i, x in enumerate(v)])
    return runs * steps


def stored_points(url: str, runs: list[str] | None = None) -> int:
    """Points stored (of these runs only, when given)."""
    query = sa.select(sa.func.coalesce(sa.func.sum(schema.chunks.c.count), 0)).select_from(
        schema.chunks.join(schema.tags).join(schema.runs))
    if runs is not None:
        query = query.where(schema.runs.c.name.in_(runs))
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        total = conn.execute(query).scalar()
    engine.dispose()
    return int(total)


def test_two_scans_at_once_never_double_report(store_url, tmp_path):
    total = many_runs(tmp_path)
    open_store(store_url).close()
    results = []

    def one_scan():
        s = open_store(store_url)
        reporter = Reporter.new()
        results.append(scan(s, [str(tmp_path)], reporter=reporter))  # neither takes over what the other holds
        printed(s, reporter)
        s.close()

    threads = [threading.Thread(target=one_scan) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reported = [c for outcome in results for c in changes(outcome)]
    assert len(reported) == len(set(reported)) == 4  # the four NaN runs, once each
    assert sum(o.points for o in results) == total == stored_points(store_url)


def test_kill_9_mid_scan_loses_and_duplicates_nothing(tmp_path):
    logdir = tmp_path / "logs"
    logdir.mkdir()
    total = many_runs(logdir, runs=40, steps=3000)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    open_store(url).close()
    command = [sys.executable, "-m", "app.cli", "scan", str(logdir), "--db", url, "--format", "json", "--fail-on", "never"]
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    killed_between = []
    for _ in range(3):
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        before = stored_points(url)
        while process.poll() is None and stored_points(url) == before:
            time.sleep(0.005)  # kill it right after it committed some runs, in the middle of others
        process.send_signal(signal.SIGKILL)
        process.wait()
        killed_between.append((before, stored_points(url)))
    assert any(0 < after < total for _, after in killed_between), killed_between  # it really was cut short
    finished = subprocess.run(command, capture_output=True, env=env, check=True)
    assert stored_points(url) == total
    again = subprocess.run(command, capture_output=True, env=env, check=True)
    assert json.loads(again.stdout)["changes"] == []
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        fired = conn.execute(sa.text("SELECT alert_id, count(*) FROM alert_events WHERE change = 'firing' GROUP BY alert_id")).all()
    engine.dispose()
    assert len(fired) == 14 and all(count == 1 for _, count in fired)  # each NaN run fired exactly once
    assert json.loads(finished.stdout)["summary"]["points"] == total - killed_between[-1][1]
    # the killed scans printed nothing: the one that finished printed their changes too, first
    printed = [(c["change"], c["alert"]["run"]) for c in json.loads(finished.stdout)["changes"]]
    assert sorted(printed) == [("firing", f"run{r:02d}") for r in range(0, 40, 3)]
    assert "changes committed by an earlier scan that stopped before printing them come first" in finished.stderr.decode()


# -- the command ------------------------------------------------------------------------------


def test_scan_command_exit_codes_and_formats(tmp_path):
    nan_logdir(tmp_path / "logs")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    runner = CliRunner()
    first = runner.invoke(main, ["scan", str(tmp_path / "logs"), "--db", url])
    assert first.exit_code == 1
    assert first.stdout.splitlines()[:2] == [
        "change  severity  run  kind       onset step  message",
        "FIRING  CRIT      r    nonfinite  500         train/loss is NaN at 100 points from step 500 and never finite again",
    ]
    assert first.stdout.splitlines()[-1] == "1 change in 1 run (1 with new data, 600 new points)"
    again = runner.invoke(main, ["scan", str(tmp_path / "logs"), "--db", url, "--format", "json"])
    assert again.exit_code == 0 and json.loads(again.stdout)["changes"] == []
    everything = runner.invoke(main, ["scan", str(tmp_path / "logs"), "--db", url, "--all", "--format", "json"])
    assert everything.exit_code == 1
    assert [a["alert"]["kind"] for a in json.loads(everything.stdout)["alerts"]] == ["nonfinite"]
    markdown = runner.invoke(main, ["scan", str(tmp_path / "logs"), "--db", url, "--format", "markdown", "--all"])
    assert markdown.stdout.splitlines() == [  # all of it markdown: the open alerts too
        "0 changes in 1 run (0 with new data, 0 new points)",
        "",
        "### Open alerts",
        "",
        "| state | severity | run | kind | onset step | message |",
        "|---|---|---|---|---|---|",
        "| firing | critical | `r` | nonfinite | 500 | train/loss is NaN at 100 points from step 500 and never finite again |",
    ]
    table = runner.invoke(main, ["scan", str(tmp_path / "logs"), "--db", url, "--all"])
    assert table.stdout.splitlines()[2:] == [
        "open alerts:",
        "state   severity  run  kind       onset step  message",
        "FIRING  CRIT      r    nonfinite  500         train/loss is NaN at 100 points from step 500 and never finite again",
    ]


def test_the_scan_count_is_of_the_rows_printed(tmp_path):
    """lr_burst's spike fires and resolves in one scan: one row, FIRING+RESOLVED, so 1 change."""
    lr_burst = str(REPO / "sample_runs" / "lr_burst")
    table = CliRunner().invoke(main, ["scan", lr_burst, "--db", f"sqlite:///{tmp_path / 'a.db'}", "--fail-on", "never"])
    header, row, count = table.stdout.splitlines()
    assert header.startswith("change  ") and row.startswith("FIRING+RESOLVED  WARN  ")
    assert re.fullmatch(r"1 change in 1 run \(1 with new data, \d+ new points\)", count), count
    markdown = CliRunner().invoke(main, ["scan", lr_burst, "--db", f"sqlite:///{tmp_path / 'b.db'}", "--format", "markdown"])
    header, rule, row, blank, markdown_count = markdown.stdout.splitlines()
    assert row.startswith("| firing+resolved | warning | `lr_burst` | loss_spike (slow_recovering) | 1201 | ")
    assert markdown_count == count


def test_scan_with_a_bad_store_url_is_exit_2(tmp_path):
    result = CliRunner().invoke(main, ["scan", str(tmp_path), "--db", "nosuch://x"])
    assert result.exit_code == 2
    assert result.stderr.startswith("losswatch: nosuch://x: not a database URL losswatch can use")


def test_a_plateau_seen_growing_scan_after_scan_fires_once(store, tmp_path):
    (tmp_path / "r").mkdir()
    events = tmp_path / "r" / "events.out.tfevents.1"
    write_events(events, [])
    flat = 2.0 * (1 + 0.02 * np.random.default_rng(5).standard_normal(6000))
    reported = []
    for first in range(0, 6000, 250):  # a cron scan after every 250 steps
        append(events, flat[first : first + 250], first)
        reported += changes(scan(store, [str(tmp_path)]))
    assert [c for c in reported if c[2] == "plateau"] == [("firing", "r", "plateau", reported[0][3])]


def test_runs_stored_in_batches_are_each_stored_and_reported_once(store, tmp_path, monkeypatch):
    monkeypatch.setattr(scanner, "BATCH_RUNS", 5)  # 12 runs: batches of 5, 5 and 2
    total = many_runs(tmp_path)
    first = scan(store, [str(tmp_path)])
    assert (first.changed, first.points) == (12, total)
    assert sorted(changes(first)) == [("firing", f"run{r:02d}", "nonfinite", 750) for r in range(0, 12, 3)]
    again = scan(store, [str(tmp_path)])
    assert (again.changed, again.points, changes(again)) == (0, 0, [])


def test_two_folders_of_one_run_name_are_both_stored(store, tmp_path):
    """The logdir's own folder and a subfolder named like it are one run: its two files,
    in one batch, are each read once from where the other left the run."""
    logdir = tmp_path / "logs"
    (logdir / "logs").mkdir(parents=True)
    v = loss_curve(600)
    write_events(logdir / "events.out.tfevents.1", [scalar_event(i, "train/loss", float(x)) for i, x in enumerate(v[:300])])
    write_events(logdir / "logs" / "events.out.tfevents.2",
                 [scalar_event(300 + i, "train/loss", float(x)) for i, x in enumerate(v[300:])])
    first = scan(store, [str(logdir)])
    assert first.points == 600
    assert scan(store, [str(logdir)]).points == 0
    with store.read() as conn:
        [run] = scanner.stored_runs.find_runs(conn, "logs")
    assert run.points == 600

"""Chaos: `kill -9` and database outages against real processes for N minutes, then a count
of what was lost or doubled.

    .venv/bin/python bench/chaos.py [MINUTES]     # default 1; table on stdout, progress on stderr

Two `losswatch serve` processes share one PostgreSQL schema (the local server at
127.0.0.1:5432, database `test`, a fresh schema dropped at the end), reached through a TCP
proxy the bench can cut.  Trainer threads post points to both services, retrying each batch
until it is accepted, as a trainer should; a writer appends TensorBoard event files that
`losswatch scan` processes read; a webhook receiver counts deliveries by key.  The faults,
in turn: `kill -9` of a service (restarted), `kill -9` of a scan mid-run, the database
refusing connections, a network partition.  Then the faults stop, everything settles, a
last scan runs, and the bench counts:

* points lost: accepted by a service (or written to an event file) and not stored;
* points duplicated: stored more than once with the same tag, step and value;
* alerts duplicated: one alert change (alert, change, step) recorded twice;
* deliveries duplicated: a change received again under its key (a resend after a kill,
  which receivers drop by the key) and under a second key (which they could not);
* 5xx: answers of 500 and above the trainers got (503 while the database is out is the
  intended answer; any other is a defect).
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from app.store import runs as stored_runs  # noqa: E402
from app.store.db import open_store  # noqa: E402
from app.store.schema import alert_events, deliveries, runs  # noqa: E402
from tests.eventfiles import record, scalar_event  # noqa: E402
from tests.receiver import Receiver, running  # noqa: E402
from tests.service_helpers import free_port  # noqa: E402
from tests.tcp_proxy import TcpProxy  # noqa: E402

PG = ("127.0.0.1", 5432)
PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
SERVE_ARGS = ("--db-connect-timeout", "2", "--db-statement-timeout", "5", "--webhook-timeout", "1",
              "--delivery-lease", "12", "--analysis-interval", "1")
TRAINERS = 3
LOGDIR_RUNS = 2
STEPS = 20  # steps per batch (x2 tags)
RUN_STEPS = 600  # a trainer starts a new run this often (each sees a NaN burst: an alert)
OUTAGE_S = 4.0
CALM_S = 3.0
SETTLE_S = 90.0  # at most this long for deliveries to drain at the end


def progress(message: str) -> None:
    print(f"[chaos] {message}", file=sys.stderr, flush=True)


def value(seed: int, tag: str, step: int) -> float:
    """The value of a point, the same on every retry; the loss is NaN for 5 steps in 400,
    so alerts fire and resolve all along."""
    if tag == "train/loss" and step % 400 in range(200, 205):
        return math.nan
    base = 3.0 * math.exp(-step / 5000) if tag == "train/loss" else 1.0
    return base * (1 + 0.01 * math.sin(step * 0.7 + seed))


def as_json(v: float) -> float | str:
    return "NaN" if math.isnan(v) else v


# --- the processes -------------------------------------------------------------------------


class Service:
    """One `losswatch serve`, on a port that survives restarts."""

    def __init__(self, url: str, webhook: str, log: Path) -> None:
        self.url, self.webhook, self.log = url, webhook, log
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        while True:
            with open(self.log, "ab") as log:
                self.process = subprocess.Popen(
                    [sys.executable, "-m", "app.cli", "serve", "--port", str(self.port), "--db", self.url,
                     "--webhook", self.webhook, *SERVE_ARGS],
                    stderr=log, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO,
                )
            deadline = time.time() + 120
            while time.time() < deadline and self.process.poll() is None:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{self.base}/healthz", timeout=5).status_code == 200:
                        return
                time.sleep(0.2)
            self.kill9()  # could not start (the database was out): try again
            time.sleep(1)

    def kill9(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.kill9()


@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    accepted: dict[tuple[str, str, int], float] = field(default_factory=dict)  # (run, tag, step) -> value
    written: dict[tuple[str, str, int], float] = field(default_factory=dict)  # event files
    statuses: collections.Counter = field(default_factory=collections.Counter)
    connection_errors: int = 0
    faults: collections.Counter = field(default_factory=collections.Counter)
    scans: collections.Counter = field(default_factory=collections.Counter)  # by exit code


def trainer(seed: int, services: list[Service], stop: threading.Event, tally: Tally) -> None:
    """Post batches of points, each retried (on the other service) until accepted; a new
    run every `RUN_STEPS` steps, so alerts keep firing and deliveries keep flowing."""
    step, turn = 0, seed
    with httpx.Client(timeout=60) as http:
        while not stop.is_set():
            run = f"trainer{seed}-{step // RUN_STEPS}"
            batch = [(tag, s, value(seed, tag, s)) for s in range(step, step + STEPS) for tag in ("train/loss", "grad_norm")]
            body = {"points": [{"step": s, "tag": tag, "value": as_json(v)} for tag, s, v in batch]}
            while True:  # a batch is never given up: an accepted point must be stored
                turn += 1
                try:
                    answer = http.post(f"{services[turn % 2].base}/v1/runs/{run}/points", json=body)
                except httpx.HTTPError:
                    with tally.lock:
                        tally.connection_errors += 1
                    time.sleep(0.2)
                    continue
                with tally.lock:
                    tally.statuses[answer.status_code] += 1
                if answer.status_code == 200 or 400 <= answer.status_code < 500:
                    break
                time.sleep(0.2)
            if answer.status_code == 200:
                with tally.lock:
                    tally.accepted.update({(run, tag, s): v for tag, s, v in batch})
            step += STEPS
            time.sleep(0.05)


def writer(logdir: Path, stop: threading.Event, tally: Tally) -> None:
    """Append whole records to one event file per run, as a training job does."""
    step = 0
    while not stop.is_set():
        for i in range(LOGDIR_RUNS):
            path = logdir / f"run{i}" / "events.out.tfevents.1"
            batch = [(s, value(100 + i, "train/loss", s)) for s in range(step, step + STEPS)]
            with open(path, "ab") as f:
                f.write(b"".join(record(scalar_event(s, "train/loss", v)) for s, v in batch))
            with tally.lock:  # an event file holds float32 values
                tally.written.update({(f"run{i}", "train/loss", s): float(np.float32(v)) for s, v in batch})
        step += STEPS
        time.sleep(0.1)


def scan_once(logdir: Path, url: str, webhook: str, tally: Tally, kill_after: float | None = None) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "scan", str(logdir), "--db", url, "--webhook", webhook, "--fail-on", "never"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO,
    )
    try:
        process.wait(timeout=kill_after if kill_after is not None else 300)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        process.wait()
    with tally.lock:
        tally.scans["killed" if process.returncode == -signal.SIGKILL else process.returncode] += 1


def scanner(logdir: Path, url: str, webhook: str, stop: threading.Event, kill: threading.Event, tally: Tally) -> None:
    """A scan every second or so; when asked, one killed at a random moment."""
    while not stop.is_set():
        if kill.is_set():
            scan_once(logdir, url, webhook, tally, kill_after=random.uniform(0.5, 4.0))
            kill.clear()
        else:
            scan_once(logdir, url, webhook, tally)
        time.sleep(1.0)


# --- the faults ----------------------------------------------------------------------------


def inflict(faults: list[str], deadline: float, services: list[Service], proxy: TcpProxy, kill_scan: threading.Event,
            tally: Tally) -> None:
    for n, fault in enumerate(faults * 10_000):
        if time.time() >= deadline:
            return
        progress(f"fault {n + 1}: {fault}")
        if fault == "kill -9 serve":
            victim = services[n % 2]
            victim.kill9()
            time.sleep(1.0)
            victim.start()
        elif fault == "kill -9 scan":
            kill_scan.set()
            while kill_scan.is_set() and time.time() < deadline + 60:
                time.sleep(0.1)
        elif fault == "database refused":
            proxy.refuse()
            time.sleep(OUTAGE_S)
            proxy.restore()
        elif fault == "partition":
            proxy.blackhole()
            time.sleep(OUTAGE_S)
            proxy.restore()
        tally.faults[fault] += 1
        time.sleep(CALM_S)


# --- the count -----------------------------------------------------------------------------


def lost_and_duplicated(expected: dict[tuple[str, str, int], float], stored: dict[tuple[str, str], object]) -> tuple[int, int]:
    """Points expected and not stored, and points stored more than once (same value)."""
    copies: collections.Counter = collections.Counter()
    for (run, tag), writes in stored.items():
        for s, v in zip(writes.step.tolist(), writes.value.tolist()):
            copies[(run, tag, s, "NaN" if math.isnan(v) else v)] += 1
    lost = sum(1 for (run, tag, s), v in expected.items() if copies[(run, tag, s, "NaN" if math.isnan(v) else v)] == 0)
    duplicated = sum(n - 1 for n in copies.values() if n > 1)
    return lost, duplicated


def stored_points(url: str, source_is_http: bool) -> dict[tuple[str, str], object]:
    store = open_store(url)
    try:
        with store.read() as conn:
            rows = conn.execute(sa.select(runs.c.id, runs.c.name, runs.c.source)).all()
            out = {}
            for row in rows:
                if (row.source == "http") == source_is_http:
                    for tag, writes in stored_runs.load_writes(conn, row.id).items():
                        out[(row.name, tag)] = writes
            return out
    finally:
        store.close()


def undelivered(url: str) -> int:
    store = open_store(url)
    try:
        with store.read() as conn:
            return conn.execute(sa.select(sa.func.count()).where(deliveries.c.status != "delivered")).scalar()
    finally:
        store.close()


def duplicated_alert_changes(url: str) -> int:
    store = open_store(url)
    try:
        with store.read() as conn:
            groups = (
                sa.select(sa.func.count().label("n"))
                .select_from(alert_events)
                .group_by(alert_events.c.alert_id, alert_events.c.change, alert_events.c.step)
                .subquery()
            )
            return conn.execute(sa.select(sa.func.coalesce(sa.func.sum(groups.c.n - 1), 0)).where(groups.c.n > 1)).scalar()
    finally:
        store.close()


def duplicated_deliveries(receiver: Receiver) -> tuple[int, int, int]:
    """(changes received, resends under the same key, changes received under a second key)."""
    keys = receiver.keys()
    by_change: dict[tuple, set[str]] = collections.defaultdict(set)
    for key, body in receiver.received:
        by_change[(body["alert"]["id"], body["change"], body["step"])].add(key)
    return len(by_change), sum(n - 1 for n in keys.values()), sum(len(k) - 1 for k in by_change.values())


# --- the run -------------------------------------------------------------------------------


def main() -> None:
    minutes = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    schema = f"chaos_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(PG_URL)
    try:
        with admin.begin() as conn:
            conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    except sa.exc.OperationalError as e:  # skipped, saying why (as bench/api.py skips its PostgreSQL rows)
        progress(f"skipped: the chaos run needs the local PostgreSQL at 127.0.0.1:5432 (database test): {e.orig}")
        return
    direct = f"{PG_URL}?options=-csearch_path%3D{schema}"
    proxy = TcpProxy(PG)
    proxied = direct.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    work = Path(tempfile.mkdtemp(prefix="losswatch-chaos-"))
    logdir = work / "logs"
    for i in range(LOGDIR_RUNS):
        (logdir / f"run{i}").mkdir(parents=True)
    open_store(direct).close()  # the schema, made once
    tally = Tally()
    try:
        with running(Receiver(delay=0.01)) as receiver:
            services = [Service(proxied, receiver.url, work / f"serve{i}.log") for i in range(2)]
            for service in services:
                service.start()
            progress(f"services up on {services[0].base} and {services[1].base}; chaos for {minutes:g} min")
            stop, kill_scan = threading.Event(), threading.Event()
            threads = [threading.Thread(target=trainer, args=(i, services, stop, tally)) for i in range(TRAINERS)]
            threads += [threading.Thread(target=writer, args=(logdir, stop, tally)),
                        threading.Thread(target=scanner, args=(logdir, proxied, receiver.url, stop, kill_scan, tally))]
            for t in threads:
                t.start()
            faults = ["kill -9 serve", "database refused", "kill -9 scan", "partition"]
            inflict(faults, time.time() + minutes * 60, services, proxy, kill_scan, tally)
            progress("faults over: letting the trainers finish their batches")
            stop.set()
            for t in threads:
                t.join()
            progress("a last scan, then waiting for the deliveries to drain")
            scan_once(logdir, direct, receiver.url, tally)
            deadline = time.time() + SETTLE_S
            while undelivered(direct) and time.time() < deadline:
                time.sleep(1)
            for service in services:
                service.stop()
            report(minutes, tally, direct, receiver)
    finally:
        proxy.close()
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def report(minutes: float, tally: Tally, url: str, receiver: Receiver) -> None:
    http_lost, http_doubled = lost_and_duplicated(tally.accepted, stored_points(url, source_is_http=True))
    file_lost, file_doubled = lost_and_duplicated(tally.written, stored_points(url, source_is_http=False))
    changes, same_key, other_key = duplicated_deliveries(receiver)
    server_errors = sum(n for status, n in tally.statuses.items() if status >= 500)
    other_5xx = server_errors - tally.statuses[503]
    faults = ", ".join(f"{fault} x{n}" for fault, n in tally.faults.items())
    scans = ", ".join(f"{outcome}: {n}" for outcome, n in sorted(tally.scans.items(), key=str))
    print(f"## Chaos: {minutes:g} min; faults: {faults}; scans by exit: {scans}\n")
    print("| what | count |")
    print("|---|---:|")
    rows = [
        ("points accepted over HTTP", len(tally.accepted)),
        ("points written to event files", len(tally.written)),
        ("points lost (HTTP / event files)", f"{http_lost} / {file_lost}"),
        ("points duplicated (HTTP / event files)", f"{http_doubled} / {file_doubled}"),
        ("alerts duplicated (a change recorded twice)", duplicated_alert_changes(url)),
        ("alert changes delivered", changes),
        ("deliveries duplicated: same key (dropped by the key) / second key", f"{same_key} / {other_key}"),
        ("deliveries not delivered at the end", undelivered(url)),
        ("5xx answers: 503 during outages / other", f"{tally.statuses[503]} / {other_5xx}"),
        ("requests cut off (a service killed)", tally.connection_errors),
        ("batches refused with 4xx", sum(n for status, n in tally.statuses.items() if 400 <= status < 500)),
    ]
    for what, n in rows:
        print(f"| {what} | {n} |")


if __name__ == "__main__":
    main()

"""`losswatch serve --workers N`: N processes on one port and one PostgreSQL, coordinated by
the database alone: appends to one run from many clients at once all land (the run's row
lock orders them across processes), and every alert change, found inline or by a worker's
background analysis, is delivered once."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
from pathlib import Path

import httpx
from click.testing import CliRunner

from app.cli import main
from tests.receiver import Receiver, running
from tests.service_helpers import server_process, wait_for
from tests.test_delivery import assert_one_key_per_change, stored_deliveries

WORKERS_STARTUP = 120  # seconds: each worker is a fresh interpreter importing everything, on 2 busy cores


def test_more_than_one_worker_on_sqlite_is_refused(tmp_path):
    result = CliRunner().invoke(main, ["serve", "--workers", "2", "--db", f"sqlite:///{tmp_path / 's.db'}"])
    assert result.exit_code == 2
    assert result.stderr == (
        "losswatch: --workers 2 needs a PostgreSQL store (--db postgresql://...): SQLite takes one writer at a time, "
        "so more processes would only queue for it\n"
    )


def worker_pids(process) -> set[str]:
    """The worker processes that started, from the server's log."""
    return set(re.findall(rb"Started server process \[(\d+)\]", process.stderr.read()))


def test_two_workers_store_every_point_of_concurrent_appends_to_one_run(pg_url):
    clients, requests, steps = 6, 20, 5
    with server_process(pg_url, "--workers", "2", startup=WORKERS_STARTUP) as (base, process):
        def post(client: int) -> None:
            with httpx.Client(base_url=base, timeout=60) as http:
                for r in range(requests):
                    first = (client * requests + r) * steps
                    points = [{"step": s, "tag": t, "value": 1.0 + s % 3} for s in range(first, first + steps)
                              for t in ("loss", "grad_norm")]
                    answer = http.post("/v1/runs/shared/points", json={"points": points}, headers={"Connection": "close"})
                    assert answer.status_code == 200, answer.text

        threads = [threading.Thread(target=post, args=(c,)) for c in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        run = httpx.get(f"{base}/v1/runs/shared", timeout=30).json()
        series = httpx.get(f"{base}/v1/runs/shared/series", params={"tag": "loss", "max_points": 100_000}, timeout=30).json()
        assert len(worker_pids(process)) == 2
    total = clients * requests * steps
    assert run["points"] == 2 * total
    assert [step for step, _ in series["points"]] == list(range(total))


def nan_half(first: int, n: int = 150, nan_from: int = 250) -> dict:
    """Half of a loss curve that turns NaN in its second half."""
    return {"points": [{"step": i, "tag": "train/loss", "value": "NaN" if i >= nan_from else 3.0 - i / 300}
                       for i in range(first, first + n)]}


def test_two_workers_deliver_each_change_once_including_those_of_deferred_analysis(pg_url):
    changes = 12
    with running(Receiver(delay=0.1)) as receiver:
        # a run's second post is within the analysis interval of its first: a worker's
        # background loop analyses it once the interval has passed, and finds the NaN
        args = ("--workers", "2", "--webhook", receiver.url, "--analysis-interval", "5")
        with server_process(pg_url, *args, startup=WORKERS_STARTUP) as (base, process):
            for i in range(changes):
                for first in (0, 150):
                    answer = httpx.post(f"{base}/v1/runs/r{i}/points", json=nan_half(first), timeout=30,
                                        headers={"Connection": "close"})
                    assert answer.status_code == 200, answer.text
                assert answer.json()["analysis"] == "deferred"
            wait_for(lambda: len(stored_deliveries(pg_url)) == changes
                     and {r.status for r in stored_deliveries(pg_url)} == {"delivered"}, timeout=120)
            assert len(worker_pids(process)) == 2
    rows = stored_deliveries(pg_url)
    assert sorted(receiver.keys().values()) == [1] * changes
    assert_one_key_per_change(receiver, rows)


def sockets_by_pid(pids: set[str], port: int, state: str) -> dict[str, set[str]]:
    """The TCP sockets (inodes) in `state` (/proc/net/tcp's hex code: 0A listening, 01
    established) on local `port` that each process holds."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port and fields[3] == state:
            inodes.add(fields[9])
    held: dict[str, set[str]] = {pid: set() for pid in pids}
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    held[pid].add(target[8:-1])
    return held


def test_each_worker_listens_on_its_own_socket_so_kept_alive_connections_spread(pg_url):
    """With one socket shared by the workers, a burst of new connections could all go to
    the worker that woke first (32 of 32 in one start of three, bench/append.py)."""
    with server_process(pg_url, "--workers", "2", startup=WORKERS_STARTUP) as (base, process):
        def started() -> set[str]:
            process.stderr.seek(0)
            return {pid.decode() for pid in worker_pids(process)}

        port = int(base.rsplit(":", 1)[1])
        wait_for(lambda: len(started()) == 2 and all(sockets_by_pid(started(), port, "0A").values()), timeout=WORKERS_STARTUP)
        pids = started()
        listening = sockets_by_pid(pids, port, "0A")
        assert [len(s) for s in listening.values()] == [1, 1] and len(set.union(*listening.values())) == 2, listening
        connections = [socket.create_connection(("127.0.0.1", port)) for _ in range(32)]
        try:
            for c in connections:  # a request each, so every connection has been accepted
                c.sendall(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
                assert c.recv(65536).startswith(b"HTTP/1.1 200")
            spread = {pid: len(s) for pid, s in sockets_by_pid(pids, port, "01").items()}
        finally:
            for c in connections:
                c.close()
    assert sum(spread.values()) == 32
    assert min(spread.values()) >= 6, spread  # binomial(32, 1/2): fewer than 6 once in 10,000 starts

"""Peak memory of a real `losswatch serve` process under concurrent heavy requests (issue 9:
12 concurrent series reads of a 5M-point run reached 5.7 GB; 4 concurrent 900k-point posts
peaked at 1.9 GB):

* series: a run of 5,000,000 points of one tag (written straight into a SQLite store, with a
  rollback halfway so the current view has work to do), then 12 clients GET its whole series
  at once (max_points 2000);
* posts: 4 clients POST 900,000 points each (canonical JSON, ~40 MB) at once, each to its
  own run.

Peak RSS is the server's VmHWM from /proc, reset before each case (clear_refs); the statuses
show how many requests were served and how many were turned away with 503 (the heavy-request
slots, `--max-heavy-requests`).

    .venv/bin/python bench/memory.py                                   # this checkout, default slots
    .venv/bin/python bench/memory.py --serve-args="--max-heavy-requests 12"  # streaming alone
    .venv/bin/python bench/memory.py --code /path/to/other/checkout    # e.g. before the change

Markdown rows on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.ingest.points import Points  # noqa: E402
from app.ingest.restarts import Rollback  # noqa: E402
from app.store import runs as stored_runs  # noqa: E402
from app.store.db import open_store  # noqa: E402
from bench.api import Server, free_port, losswatch_command, progress, stop, wait_healthy  # noqa: E402

SERIES_POINTS = 5_000_000
SERIES_CLIENTS = 12
POST_POINTS = 900_000
POST_CLIENTS = 4


def build_long_run(url: str, n: int) -> None:
    """One tag of `n` points, resumed at n/2 after reaching 0.6 n, written with the store's
    own code (posting it would take minutes of the bench)."""
    store = open_store(url)
    first, resume = int(n * 0.6), n // 2
    rng = np.random.default_rng(0)
    with store.write() as conn:
        run = stored_runs.lock_run(conn, "http", "long", 0.0)
        for lo, hi, segment in ((0, first, 0), (resume, n - (first - resume), 1)):
            for start in range(lo, hi, 1_000_000):
                steps = np.arange(start, min(start + 1_000_000, hi), dtype=np.int64)
                value = 2.0 + 0.01 * rng.standard_normal(len(steps))
                points = Points(("train/loss",), np.zeros(len(steps), np.int32), steps, np.full(len(steps), np.nan), value)
                stored_runs.append_points(conn, run.id, points, np.full(len(steps), segment, np.int32))
        stored_runs.add_rollbacks(conn, run.id, (Rollback(first - 1, resume, "bench", None, 1, False),))
    store.close()


@contextlib.contextmanager
def server(url: str, workdir: Path, code: Path | None, serve_args: list[str]) -> Iterator[Server]:
    port = free_port()
    log = workdir / f"serve-{port}.log"
    env = {**os.environ, **({"PYTHONPATH": str(code)} if code else {})}
    with open(log, "wb") as sink:
        process = subprocess.Popen(
            [losswatch_command(), "serve", "--port", str(port), "--db", url, "--analysis-interval", "3600", *serve_args],
            stdout=sink, stderr=sink, cwd=workdir, env=env,
        )
    running = Server(f"http://127.0.0.1:{port}", process, log)
    try:
        wait_healthy(running)
        yield running
    finally:
        stop(process)


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def memory_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def at_once(count: int, request) -> tuple[Counter, float]:
    """Run `request` from `count` threads released together; their statuses and the wall time."""
    statuses: Counter = Counter()
    gate = threading.Barrier(count)

    def one() -> None:
        gate.wait()
        try:
            statuses[request().status_code] += 1
        except httpx.HTTPError as e:
            statuses[type(e).__name__] += 1

    threads = [threading.Thread(target=one) for _ in range(count)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return statuses, time.perf_counter() - started


def case(name: str, srv: Server, count: int, request) -> str:
    pid = srv.process.pid
    reset_peak(pid)
    before = memory_mb(pid, "VmRSS")
    statuses, wall = at_once(count, request)
    peak = memory_mb(pid, "VmHWM")
    shown = ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items(), key=str))
    progress(f"{name}: peak {peak:.0f} MB ({shown}) in {wall:.1f} s")
    return f"| {name} | {before:.0f} MB | {peak:.0f} MB | {shown} | {wall:.1f} s |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--code", type=Path, help="run the server from this checkout (PYTHONPATH)")
    parser.add_argument("--serve-args", default="", help="extra `losswatch serve` arguments")
    parser.add_argument("--series-points", type=int, default=SERIES_POINTS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lw-memory-") as tmp:
        workdir = Path(tmp)
        url = f"sqlite:///{workdir / 'bench.db'}"
        progress(f"writing a {args.series_points:,}-point run")
        build_long_run(url, args.series_points)
        body = json.dumps({"points": [{"step": s, "tag": "train/loss", "value": 2.0 + (s % 7) / 10} for s in range(POST_POINTS)]}).encode()
        label = f"{args.code or 'this checkout'} {args.serve_args}".strip()
        rows = [f"**{label}**", "", "| case | RSS before | peak RSS | answers | wall |", "|---|---|---|---|---|"]
        with server(url, workdir, args.code, shlex.split(args.serve_args)) as srv:
            httpx.get(f"{srv.base}/v1/runs/long/series", params={"tag": "train/loss", "start": 0, "end": 10}, timeout=60)
            rows.append(case(
                f"{SERIES_CLIENTS} x GET series ({args.series_points:,} points)", srv, SERIES_CLIENTS,
                lambda: httpx.get(f"{srv.base}/v1/runs/long/series", params={"tag": "train/loss"}, timeout=600),
            ))
            names = iter(range(POST_CLIENTS))
            lock = threading.Lock()

            def post() -> httpx.Response:
                with lock:
                    n = next(names)
                return httpx.post(f"{srv.base}/v1/runs/posted-{n}/points", content=body,
                                  headers={"Content-Type": "application/json"}, timeout=600)

            rows.append(case(f"{POST_CLIENTS} x POST {POST_POINTS:,} points ({len(body) >> 20} MB)", srv, POST_CLIENTS, post))
        print("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()

"""What run liveness and per-run metrics cost, on a SQLite store in a temp dir, against the
alternative in the same run:

* the stale check a service does every 5 s over N quiet runs (all already judged: nothing
  changes), as built (one query that leaves out the runs whose open stale alert is about
  their last step, then a lock only for a run whose stale alert changes) and the naive way
  (lock and judge every run not seen for 10 minutes);
* one /metrics scrape over N runs, with the run cap at its default (1,000) and uncapped:
  milliseconds and exposition size;
* keeping a run's pace on ingest (`app.liveness.observe`) beside appending the same points
  (`app.store.runs.append_points`) for one bulk batch.

    .venv/bin/python bench/liveness.py [--runs N]    # markdown on stdout
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import sqlalchemy as sa
from prometheus_client import generate_latest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzers.config import AnalysisConfig  # noqa: E402
from app.ingest.logdir import RunState  # noqa: E402
from app.ingest.points import Points  # noqa: E402
from app.liveness import observe  # noqa: E402
from app.service.metrics import Metrics  # noqa: E402
from app.store import runs as stored_runs  # noqa: E402
from app.store.db import open_store  # noqa: E402
from app.store.schema import runs  # noqa: E402
from app.updates import check_liveness, refresh_liveness, store_points  # noqa: E402

T0 = 1.7e9
TAGS = ["train/loss", "val/loss", "learning_rate", "grad_norm"]


def points(n: int, tags: list[str], t0: float) -> Points:
    tag = np.tile(np.arange(len(tags), dtype=np.int32), n // len(tags))
    step = np.repeat(np.arange(n // len(tags), dtype=np.int64), len(tags))
    return Points(list(tags), tag, step, t0 + step * 10.0, np.linspace(3, 1, len(step)))


def fill(store, runs: int) -> None:
    for i in range(runs):
        batch = points(400, TAGS, T0 + i)
        with store.write() as conn:
            run = stored_runs.lock_run(conn, "http", f"run-{i:05d}", T0)
            store_points(conn, run, batch, np.zeros(len(batch), np.int32), (), RunState(), T0 + i + 1000)


def timed(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5000)
    n = parser.parse_args().runs
    config = AnalysisConfig()
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"sqlite:///{tmp}/bench.db")
        started = time.perf_counter()
        fill(store, n)
        print(f"filled {n} runs in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        now = T0 + 10 * 86400
        fired = check_liveness(store, config, [], now)  # every run goes stale once
        print(f"first check fired {len(fired)} stale alerts", file=sys.stderr)

        def naive() -> None:
            with store.read() as conn:
                quiet = conn.execute(sa.select(runs.c.source, runs.c.name).where(
                    runs.c.finished_at.is_(None), runs.c.last_seen_at < now - 600)).all()
            for candidate in quiet:
                with store.write() as conn:
                    refresh_liveness(conn, stored_runs.lock_run(conn, candidate.source, candidate.name, now), config, [], now)

        print(f"\n### Stale check over {n:,} quiet runs (nothing changes)\n")
        print("| way | ms per round |\n|---|---|")
        print(f"| skip the judged, lock only a change (built) | {1000 * timed(lambda: check_liveness(store, config, [], now)):.0f} |")
        print(f"| lock and judge every quiet run | {1000 * timed(naive, 1):.0f} |")

        print(f"\n### One /metrics scrape over {n:,} runs\n")
        print("| run cap | ms | bytes | per-run series |\n|---|---|---|---|")
        for cap in (1000, n):
            registry = Metrics(store, cap, config).registry
            text = generate_latest(registry)
            series = sum(1 for line in text.decode().splitlines() if line.startswith("losswatch_run_"))
            print(f"| {cap:,}{' (default)' if cap == 1000 else ' (uncapped)'} | "
                  f"{1000 * timed(lambda r=registry: generate_latest(r)):.0f} | {len(text):,} | {series:,} |")
        store.close()

    print("\n### Keeping a run's pace on ingest, one bulk batch\n")
    print("| points | tags | observe ms | append_points ms (SQLite) |\n|---|---|---|---|")
    for count, tags in ((100_000, 4), (1_000_000, 4), (1_000_000, 200)):
        names = [f"tag/{i}" for i in range(tags)]
        batch = points(count, names, T0)
        run = stored_runs.StoredRun(1, "http", "r", RunState(), None, 0)
        with tempfile.TemporaryDirectory() as tmp:
            store = open_store(f"sqlite:///{tmp}/append.db")
            with store.write() as conn:
                stored = stored_runs.lock_run(conn, "http", "r", T0)
                started = time.perf_counter()
                stored_runs.append_points(conn, stored.id, batch, np.zeros(len(batch), np.int32))
                append = time.perf_counter() - started
            store.close()
        print(f"| {count:,} | {tags} | {1000 * timed(lambda r=run, b=batch: observe(r, b, T0 + 1e7)):.0f} | {1000 * append:.0f} |")


if __name__ == "__main__":
    main()

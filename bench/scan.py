"""What `losswatch scan` costs as a cron job: a scan of an unchanged logdir of 1,000 runs, a
scan after 1,000 new steps in one run of a 1M-scalar logdir, and the bytes a stored point
takes in SQLite; beside what a cron script without saved offsets does instead (re-read
everything with tensorboard's EventAccumulator).

    .venv/bin/python bench/scan.py
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.scan import scan  # noqa: E402
from app.store.db import open_store  # noqa: E402
from tests.eventfiles import record, scalar_event  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "scan"
TAGS = ("train/loss", "train/grad_norm", "train/lr", "eval/loss")


def write_run(path: Path, steps: range, seed: int) -> None:
    """A realistic run: a decaying, noisy loss and its companions, framed as TFRecords."""
    rng = np.random.default_rng(seed)
    with open(path, "ab") as f:
        for step in steps:
            loss = (2 + 3 * np.exp(-step / 3000)) * (1 + 0.02 * rng.standard_normal())
            values = (loss, 0.5 * np.exp(0.1 * rng.standard_normal()), 3e-4, loss * 1.05)
            f.write(b"".join(record(scalar_event(step, tag, float(v), 1.7e9 + step * 0.31)) for tag, v in zip(TAGS, values)))


def dataset(name: str, runs: int, steps: int) -> Path:
    root = DATA / name
    if root.exists():
        return root
    print(f"writing {name}: {runs} runs x {len(TAGS)} tags x {steps} steps ...", file=sys.stderr)
    partial = DATA / f"{name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    for r in range(runs):
        (partial / f"run{r:04d}").mkdir(parents=True)
        write_run(partial / f"run{r:04d}" / "events.out.tfevents.1", range(steps), r)
    partial.rename(root)
    return root


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def event_accumulator_reread(logdir: Path) -> float:
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    def reread() -> None:
        mux = EventMultiplexer(size_guidance={"scalars": 0})
        mux.AddRunsFromDirectory(str(logdir))
        mux.Reload()

    return timed(reread)


def main() -> None:
    many = dataset("1000runs", 1000, 250)
    big = dataset("1m", 1, 250_000)
    work = Path(tempfile.mkdtemp(prefix="lw-scan-bench-"))
    rows = []
    try:
        url = f"sqlite:///{work / 'store.db'}"
        store = open_store(url)
        cold = timed(lambda: scan(store, [str(many)]))
        unchanged = [timed(lambda: scan(store, [str(many)])) for _ in range(5)]
        rows.append(("1,000 runs, 1M scalars", "first scan (everything new)", cold))
        rows.append(("1,000 runs, 1M scalars", "scan, nothing changed (median of 5)", statistics.median(unchanged)))
        print("re-reading 1,000 runs with EventAccumulator ...", file=sys.stderr)
        rows.append(("1,000 runs, 1M scalars", "EventAccumulator re-read of everything", event_accumulator_reread(many)))

        logdir = work / "big"
        shutil.copytree(big, logdir)
        big_store = open_store(f"sqlite:///{work / 'big.db'}")
        rows.append(("1 run, 1M scalars", "first scan (everything new)", timed(lambda: scan(big_store, [str(logdir)]))))
        events = logdir / "run0000" / "events.out.tfevents.1"
        appended = []
        for i in range(5):
            first = 250_000 + i * 1000
            write_run(events, range(first, first + 1000), 10_000 + i)
            appended.append(timed(lambda: scan(big_store, [str(logdir)])))
        rows.append(("1 run, 1M scalars", "scan after 1,000 new steps x 4 tags (median of 5)", statistics.median(appended)))
        print("re-reading the 1M-scalar run with EventAccumulator ...", file=sys.stderr)
        rows.append(("1 run, 1M scalars", "EventAccumulator re-read of everything", event_accumulator_reread(logdir)))
        size_rows = stored_size(store, url), stored_size(big_store, f"sqlite:///{work / 'big.db'}")
        store.close()
        big_store.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("| logdir | scan | seconds |")
    print("|---|---|---|")
    for data, what, seconds in rows:
        print(f"| {data} | {what} | {seconds:.3f} |")
    print("\n| store | points | database bytes | bytes/point (file) | bytes/point (chunk data) |")
    print("|---|---|---|---|---|")
    for name, (points, file_bytes, data_bytes) in zip(("1,000 runs", "1 run"), size_rows):
        print(f"| {name} | {points:,} | {file_bytes:,} | {file_bytes / points:.1f} | {data_bytes / points:.1f} |")
    print(f"\n{os.cpu_count()} cores; SQLite {sqlite3.sqlite_version}; SQLAlchemy {sa.__version__}")


def stored_size(store, url: str) -> tuple[int, int, int]:
    """Points, the database file's size once the WAL is folded in, and the chunk bytes."""
    with store.read() as conn:
        points = conn.execute(sa.text("SELECT sum(count) FROM chunks")).scalar()
        data = conn.execute(sa.text("SELECT sum(length(data)) FROM chunks")).scalar()
    raw = store.engine.raw_connection()  # outside any transaction, or SQLite refuses
    raw.cursor().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw.close()
    path = sa.engine.make_url(url).database
    return int(points), os.path.getsize(path), int(data)


if __name__ == "__main__":
    main()

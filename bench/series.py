"""What a downsampled series read costs (issue 11, item 2): one tag of 10M steps on SQLite,
read at ~2,000 points zoomed out and through narrower windows, the old way (every chunk of
the window decompressed into `MinMaxSketch`) beside the new one (`app.store.envelope`:
whole current chunks answered from their per-block summaries), in the same run.

    .venv/bin/python bench/series.py                    # 10M steps (about 2 minutes to build)
    .venv/bin/python bench/series.py --steps 1000000    # quicker

Each read runs in a fresh process (spawned), so its peak RSS (VmHWM) is its own; "baseline"
is such a process that only imports and opens the store.  Wall and CPU ms are of the first
read in that process (cold) and the best of three; CPU is the process's user + system time.
A second table gives what the summaries cost when chunks are written: packing a 16,384-point
chunk with and without them.  Markdown on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzers.series import resume_steps  # noqa: E402
from app.downsample import MinMaxSketch  # noqa: E402
from app.store import chunks  # noqa: E402
from app.store import runs as stored_runs  # noqa: E402
from app.store.db import open_store  # noqa: E402
from app.store.envelope import downsampled_series  # noqa: E402
from app.store.summaries import summary_columns  # noqa: E402
from bench.scale import peak_rss_mb, points  # noqa: E402

TAG = "train/loss"
MAX_POINTS = 2000
BUILD_BATCH = 1_000_000


def build(url: str, steps: int) -> None:
    store = open_store(url)
    for first in range(0, steps, BUILD_BATCH):
        p = points(first, min(BUILD_BATCH, steps - first), (TAG,), 0)
        with store.write() as conn:
            run = stored_runs.lock_run(conn, "bench", "long", time.time())
            stored_runs.append_points(conn, run.id, p, np.zeros(len(p), np.int32))
        print(f"  built {first + len(p):,} steps", file=sys.stderr, flush=True)
    store.close()


def read(conn, how: str, start: int | None, end: int | None) -> tuple[int, int]:
    """(points kept, chunks decompressed) of one series read."""
    [run] = stored_runs.find_runs(conn, "long", "bench")
    spans = stored_runs.tag_chunks(conn, run.id, TAG, start, end)
    resume_to = resume_steps(stored_runs.load_resumes(conn, run.id), TAG)
    if how == "new":
        got = downsampled_series(conn, spans, start, end, resume_to, MAX_POINTS)
        return len(got.sketch.result()[0]), got.decompressed
    first, last = min(s.first_step for s in spans), max(s.last_step for s in spans)
    sketch = MinMaxSketch(first if start is None else max(first, start), last if end is None else min(last, end), MAX_POINTS)
    for step, value, wall in stored_runs.current_points(conn, spans, start, end, resume_to, wall_time=True):
        sketch.add(step, step, value, wall)
    return len(sketch.result()[0]), len(spans)


def _measure(url: str, how: str, start: int | None, end: int | None, out) -> None:
    store = open_store(url)
    times = []
    kept = decompressed = 0
    for _ in range(3 if how != "none" else 1):
        wall, cpu = time.perf_counter(), time.process_time()
        with store.read() as conn:
            if how != "none":
                kept, decompressed = read(conn, how, start, end)
        times.append(((time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000))
    out.put((times[0], min(times), kept, decompressed, peak_rss_mb()))


def measured(url: str, how: str, start: int | None, end: int | None) -> tuple:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_measure, args=(url, how, start, end, out))
    p.start()
    result = out.get()
    p.join()
    return result


def read_table(url: str, steps: int) -> None:
    base = measured(url, "none", None, None)[4]
    print(f"\nSeries read of one tag of {steps:,} steps at {MAX_POINTS:,} points, SQLite; each in a fresh process"
          f" (baseline RSS {base:.0f} MB)\n")
    print("| window | read | wall ms cold | CPU ms cold | wall ms warm | CPU ms warm | chunks decompressed | points |"
          " peak RSS MB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    windows = [("all", None, None), ("10% (middle)", int(steps * 0.45), int(steps * 0.55) - 1),
               ("1% (middle)", int(steps * 0.495), int(steps * 0.505) - 1)]
    for label, start, end in windows:
        for how in ("old", "new"):
            print(f"  {label} {how}", file=sys.stderr, flush=True)
            (cold_wall, cold_cpu), (warm_wall, warm_cpu), kept, decompressed, rss = measured(url, how, start, end)
            print(f"| {label} | {how} | {cold_wall:.0f} | {cold_cpu:.0f} | {warm_wall:.0f} | {warm_cpu:.0f} |"
                  f" {decompressed} | {kept} | {rss:.0f} |")


def write_table() -> None:
    p = points(0, stored_runs.CHUNK_POINTS, (TAG,), 0)
    segment = np.zeros(len(p), np.int32)

    def best_ms(fn) -> float:
        best = float("inf")
        for _ in range(20):
            cpu = time.process_time()
            fn()
            best = min(best, (time.process_time() - cpu) * 1000)
        return best

    packed = best_ms(lambda: chunks.pack(p.step, segment, p.wall_time, p.value))
    summary = best_ms(lambda: summary_columns(p.step, segment, p.wall_time, p.value))
    size = len(chunks.pack(p.step, segment, p.wall_time, p.value))
    blocks = len(summary_columns(p.step, segment, p.wall_time, p.value)["blocks"])
    print(f"\nWriting a chunk of {stored_runs.CHUNK_POINTS:,} points (best of 20, CPU)\n")
    print("| | CPU ms | bytes |")
    print("|---|---:|---:|")
    print(f"| pack (before) | {packed:.2f} | {size:,} |")
    print(f"| summary (added) | {summary:.2f} | {blocks:,} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10_000_000, help="steps of the tag (one point each)")
    args = parser.parse_args()
    if args.steps < 100_000:
        parser.error("--steps must be at least 100000 (the narrowest window is 1% of them)")
    with tempfile.TemporaryDirectory(prefix="lw-series-") as work:
        url = f"sqlite:///{work}/series.db"
        print(f"building {args.steps:,} steps", file=sys.stderr, flush=True)
        build(url, args.steps)
        read_table(url, args.steps)
    write_table()


if __name__ == "__main__":
    main()

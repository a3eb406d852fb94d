"""What an analysis costs as runs grow (issue 11): the first analysis of a stored run (the
old one-shot path beside the streaming state built from zero), the rescan of a stored run
after +1,000 steps and its peak RSS against the run's length T (8 tags), and a cron tick over many runs
(+100 steps each); the old path (every stored point decompressed and the whole run
re-analysed: `load_writes` + `assess_writes`) beside the streaming one (`app.incremental`:
the saved state and the new writes only), in the same run, on SQLite.  The streaming
tick is a real `app.scan.scan` of a logdir holding each run's new steps as an event file,
in one process and in `--jobs` processes (`losswatch scan --jobs`).

    .venv/bin/python bench/scale.py                 # T = 10k, 100k, 300k; 1,000 runs
    .venv/bin/python bench/scale.py --big           # T up to 10M (several minutes per size)
    .venv/bin/python bench/scale.py --runs 200 --sizes 10000,100000
    .venv/bin/python bench/scale.py --sizes '' --runs 10000 --steps 1000   # the 10,000-run tick

Each rescan is measured in a fresh process, so its peak RSS is its own; "baseline" is such
a process that only imports and opens the store.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzers.config import AnalysisConfig  # noqa: E402
from app import incremental  # noqa: E402
from app.analysis import assess_writes  # noqa: E402
from app.ingest.logdir import RunState  # noqa: E402
from app.ingest.points import Points  # noqa: E402
from app.scan import scan  # noqa: E402
from app.store import runs as stored_runs  # noqa: E402
from app.store.db import open_store  # noqa: E402
from app.updates import Assessment, apply, reassess, store_points  # noqa: E402
from tests.eventfiles import file_version, record, scalar_event  # noqa: E402

TAGS8 = ("train/loss", "train/grad_norm", "train/lr", "eval/loss", "loss_scale", "train/accuracy", "throughput", "tokens")
TAGS4 = TAGS8[:4]
BATCH_STEPS = 250_000  # steps stored per transaction while building a run
BUILD_RUNS = 100  # runs stored and analysed per transaction while building the cron tick's store


def points(first: int, n: int, tags: tuple[str, ...], seed: int, wall: float = 1.7e9) -> Points:
    """n steps of a healthy run from step `first`: every tag at every step, 0.3 s apart
    from `wall` at step 0, each value as an event file holds it (float32)."""
    rng = np.random.default_rng(seed * 7919 + first)
    step = np.arange(first, first + n, dtype=np.int64)
    loss = (2 + 3 * np.exp(-step / 3000.0)) * (1 + 0.02 * rng.standard_normal(n))
    columns = {
        "train/loss": loss, "train/grad_norm": 0.5 * np.exp(0.1 * rng.standard_normal(n)), "train/lr": np.full(n, 3e-4),
        "eval/loss": loss * 1.05, "loss_scale": np.full(n, 65536.0), "train/accuracy": 1 - loss / 6,
        "throughput": 1000 + rng.standard_normal(n), "tokens": step * 4096.0,
    }
    k = len(tags)
    return Points(
        tags=tags,
        tag=np.tile(np.arange(k, dtype=np.int32), n),
        step=np.repeat(step, k),
        wall_time=np.repeat(wall + step * 0.3, k),
        value=np.stack([columns[t] for t in tags], axis=1).ravel().astype(np.float32).astype(np.float64),
    )


def grow(store, name: str, first: int, n: int, tags: tuple[str, ...], seed: int = 0) -> None:
    for a in range(first, first + n, BATCH_STEPS):
        p = points(a, min(BATCH_STEPS, first + n - a), tags, seed)
        with store.write() as conn:
            run = stored_runs.lock_run(conn, "bench", name, time.time())
            store_points(conn, run, p, np.zeros(len(p), np.int32), (), RunState(), time.time())


def analyse(store, name: str) -> float:
    """The analysis a scan runs after storing points (state saved): CPU seconds."""
    start = time.process_time()
    with store.write() as conn:
        run = stored_runs.lock_run(conn, "bench", name, time.time())
        reassess(conn, run, AnalysisConfig(), (), time.time())
    return time.process_time() - start


def one_shot(store, name: str) -> float:
    """The old path's analysis of the whole run (every point read, analysed at once, and
    its alerts applied, rolled back after): CPU seconds."""
    start = time.process_time()
    with store.write() as conn:
        run = stored_runs.lock_run(conn, "bench", name, time.time())
        alerts, health = assess_writes(run.source, run.name, stored_runs.load_writes(conn, run.id),
                                       stored_runs.load_resumes(conn, run.id))
        apply(conn, run, Assessment(run.points, run.last_step, alerts, health=health.to_dict()), (), time.time())
        seconds = time.process_time() - start
        conn.rollback()
    return seconds


def _measure(url: str, name: str, how: str, out) -> None:
    store = open_store(url)
    seconds = []
    for _ in range(3 if how != "none" else 1):  # the first in a fresh process (a cron scan), then warm (the service)
        start = time.perf_counter()
        with store.read() as conn:
            [run] = stored_runs.find_runs(conn, name, "bench")
            if how == "old":
                assess_writes(run.source, run.name, stored_runs.load_writes(conn, run.id), stored_runs.load_resumes(conn, run.id))
            elif how == "new":
                incremental.advance(conn, run, AnalysisConfig())
        seconds.append(time.perf_counter() - start)
    out.put((seconds[0], min(seconds), peak_rss_mb()))


def peak_rss_mb() -> float:
    """This process's peak RSS.  VmHWM, not getrusage's ru_maxrss: a spawned child's
    ru_maxrss starts from the forked parent's (Linux keeps it across exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measured(url: str, name: str, how: str) -> tuple[float, float, float]:
    """(seconds cold, seconds warm, peak RSS MB) of a rescan in a fresh process: its first,
    and the best of three."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_measure, args=(url, name, how, out))
    p.start()
    result = out.get()
    p.join()
    return result


def rescan_table(sizes: list[int], work: Path) -> None:
    print("\nFirst analysis of a stored run (8 tags), SQLite, in-process CPU s: the old one-shot path (read"
          " every point, analyse at once, apply) and the streaming one building its state from zero (a first scan)")
    print(f"{'T steps':>10} {'points':>11} {'one-shot CPU s':>15} {'first scan CPU s':>17} {'M points/CPU s':>15}")
    firsts = []
    for t in sizes:
        url = f"sqlite:///{work}/scale-{t}.db"
        store = open_store(url)
        print(f"storing {t:,} steps", file=sys.stderr, flush=True)
        grow(store, "r", 0, t, TAGS8)
        old = one_shot(store, "r")
        first = analyse(store, "r")  # builds the streaming state (a first scan)
        print(f"{t:>10,} {8 * t:>11,} {old:>15.2f} {first:>17.2f} {8 * t / first / 1e6:>15.1f}", flush=True)
        grow(store, "r", t, 1000, TAGS8, seed=1)
        store.close()
        firsts.append(url)
    print("\nRescan after +1,000 steps (8 tags), SQLite; each in a fresh process: its first call (a cron scan)"
          " and the best of three (warm)")
    print(f"{'T steps':>10} {'points':>11} {'old s':>8} {'new ms':>8} {'new warm ms':>12} {'old RSS MB':>11} {'new RSS MB':>11}")
    base = None
    rows = []
    for t, url in zip(sizes, firsts):
        if base is None:
            base = measured(url, "r", "none")[2]
        old_s, _, old_rss = measured(url, "r", "old")
        new_s, new_warm, new_rss = measured(url, "r", "new")
        rows.append((t, new_warm))
        print(f"{t:>10,} {8 * (t + 1000):>11,} {old_s:>8.3f} {1000 * new_s:>8.1f} {1000 * new_warm:>12.1f}"
              f" {old_rss:>11.0f} {new_rss:>11.0f}", flush=True)
        Path(url.removeprefix("sqlite:///")).unlink()
    print(f"baseline process (imports, store open): {base:.0f} MB")
    if len(rows) > 1:
        (t0, s0), (t1, s1) = rows[0], rows[-1]
        print(f"new path (warm) growth exponent {t0:,} -> {t1:,} steps: {math.log(s1 / s0) / math.log(t1 / t0):.2f}")


def old_tick(store, source: str, name: str, new: Points) -> None:
    """One run's share of a cron tick on the old path: the new points stored and the whole
    run read back and re-analysed, in one transaction."""
    with store.write() as conn:
        run = stored_runs.lock_run(conn, source, name, time.time())
        run = store_points(conn, run, new, np.zeros(len(new), np.int32), (), RunState(), time.time())
        alerts, health = assess_writes(run.source, run.name, stored_runs.load_writes(conn, run.id),
                                       stored_runs.load_resumes(conn, run.id))
        apply(conn, run, Assessment(run.points, run.last_step, alerts, health=health.to_dict()), (), time.time())


def build_runs(store, source: str, names: list[str], steps: int, wall: float) -> None:
    """The stored runs a tick starts from, each analysed (its streaming state saved):
    BUILD_RUNS runs per transaction, through the store's own calls."""
    for first in range(0, len(names), BUILD_RUNS):
        print(f"storing runs {first:,}-{min(first + BUILD_RUNS, len(names)) - 1:,}", file=sys.stderr, flush=True)
        with store.write() as conn:
            for i in range(first, min(first + BUILD_RUNS, len(names))):
                run = stored_runs.lock_run(conn, source, names[i], time.time())
                p = points(0, steps, TAGS4, i, wall)
                run = store_points(conn, run, p, np.zeros(len(p), np.int32), (), RunState(), time.time())
                reassess(conn, run, AnalysisConfig(), (), time.time())


def start_files(logdir: Path, names: list[str]) -> None:
    """Each run's event file as a writer opens it (its first record, no scalar yet)."""
    for name in names:
        (logdir / name).mkdir(parents=True)
        (logdir / name / "events.out.tfevents.1").write_bytes(record(file_version()))


def write_new_steps(logdir: Path, names: list[str], new: list[Points]) -> None:
    """Each run's new steps appended to its event file (what the tick's scan reads)."""
    for name, p in zip(names, new):
        records = [record(scalar_event(int(s), p.tags[t], float(v), float(w)))
                   for s, t, v, w in zip(p.step, p.tag, p.value, p.wall_time)]
        with open(logdir / name / "events.out.tfevents.1", "ab") as f:
            f.write(b"".join(records))


def cron_table(runs: int, steps: int, work: Path, jobs: int) -> None:
    print(f"\nCron tick: {runs:,} runs x 4 tags x {steps:,} steps, +100 steps each, SQLite "
          f"(CPU: all the scan's processes)")
    logdir = work / "logs"
    source = os.path.realpath(logdir)
    store = open_store(f"sqlite:///{work}/cron.db")
    names = [f"run{i:05d}" for i in range(runs)]
    wall = time.time() - 0.3 * (steps + 100)  # the new steps end now: no run is stale
    build_runs(store, source, names, steps, wall)
    start_files(logdir, names)
    print("a first scan of the logdir (its files' offsets stored)", file=sys.stderr, flush=True)
    scan(store, [str(logdir)])
    store.close()
    shutil.copy(f"{work}/cron.db", f"{work}/cron-old.db")
    shutil.copy(f"{work}/cron.db", f"{work}/cron-jobs.db")
    new = [points(steps, 100, TAGS4, i, wall) for i in range(runs)]
    print("writing the new steps' event files", file=sys.stderr, flush=True)
    write_new_steps(logdir, names, new)
    times = {}
    print("tick, old path", file=sys.stderr, flush=True)
    store = open_store(f"sqlite:///{work}/cron-old.db")
    start, cpu = time.perf_counter(), time.process_time()
    for name, p in zip(names, new):
        old_tick(store, source, name, p)
    times["old"] = (time.perf_counter() - start, time.process_time() - cpu)
    store.close()
    print("tick, losswatch scan", file=sys.stderr, flush=True)
    store = open_store(f"sqlite:///{work}/cron.db")
    start, cpu = time.perf_counter(), time.process_time()
    outcome = scan(store, [str(logdir)])
    times["scan"] = (time.perf_counter() - start, time.process_time() - cpu)
    store.close()
    check(outcome, runs)
    print(f"tick, losswatch scan --jobs {jobs}", file=sys.stderr, flush=True)
    store = open_store(f"sqlite:///{work}/cron-jobs.db")
    start, cpu, children = time.perf_counter(), time.process_time(), children_cpu()
    outcome = scan(store, [str(logdir)], jobs=jobs)
    times[f"scan --jobs {jobs}"] = (time.perf_counter() - start, time.process_time() - cpu + children_cpu() - children)
    store.close()
    check(outcome, runs)
    print(f"{'path':>14} {'tick s':>8} {'CPU s':>8} {'per run ms':>11} {'CPU per run ms':>15}")
    for how, (wall_s, cpu) in times.items():
        print(f"{how:>14} {wall_s:>8.2f} {cpu:>8.2f} {1000 * wall_s / runs:>11.1f} {1000 * cpu / runs:>15.1f}")


def check(outcome, runs: int) -> None:
    if outcome.changed != runs or outcome.points != runs * 400 or outcome.problems:
        raise SystemExit(f"the scan stored {outcome.changed:,} runs and {outcome.points:,} points: {outcome.problems[:3]}")


def children_cpu() -> float:
    """CPU seconds of this process's children that have ended (a scan's other processes)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--big", action="store_true", help="add T = 1M, 3M and 10M steps")
    parser.add_argument("--sizes", help="comma-separated T values (overrides the defaults; empty: no rescan table)")
    parser.add_argument("--runs", type=int, default=1000, help="runs in the cron tick (0: skip it)")
    parser.add_argument("--steps", type=int, default=5000, help="steps of each run in the cron tick")
    parser.add_argument("--jobs", type=int, default=2, help="processes of the cron tick's last scan (`scan --jobs`)")
    args = parser.parse_args()
    sizes = [10_000, 100_000, 300_000] + ([1_000_000, 3_000_000, 10_000_000] if args.big else [])
    if args.sizes is not None:
        sizes = [int(s) for s in args.sizes.split(",") if s]
    with tempfile.TemporaryDirectory(prefix="losswatch-scale-") as tmp:
        if sizes:
            rescan_table(sizes, Path(tmp))
        if args.runs:
            cron_table(args.runs, args.steps, Path(tmp), args.jobs)


if __name__ == "__main__":
    main()

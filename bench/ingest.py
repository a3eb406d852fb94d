"""How fast losswatch reads TensorBoard scalars, against the readers people use today.

Run:  .venv/bin/python bench/ingest.py            # full comparison, ~3-15 min
      .venv/bin/python bench/ingest.py --quick    # slow peers on a 10% subset, < 1 min
(writing the data the first time adds ~2 min on 2 cores).

Data, written once with tensorboardX into bench/data/ (git-ignored) and reused:
  1m/       one run, one file: 4 tags x 250,000 steps = 1,000,000 scalars
  200runs/  200 runs x 4 tags x 5,000 steps = 4,000,000 scalars
With --quick, EventAccumulator and tbparse read bench/data/quick/ instead (the first 100,000
records of 1m/, the first 20 runs of 200runs/), next to losswatch on the same files.

Full reads: each reader runs in its own fresh subprocess, so its peak RSS is its own.  Wall and
CPU (user+sys) time cover the read alone, after the imports; peak RSS is the child's ru_maxrss
just after the read (its value before the read, i.e. interpreter plus imports, in brackets).
A read shorter than 5 s is run in 3 fresh subprocesses and the one of median CPU time reported.
points/s is per CPU-second; MB/s is event-file bytes per wall second; "slower" is losswatch
read_logdir's points/s over the reader's on the same files.  Files are in the page cache.

Incremental reads: a copy of 1m/ is read once, its offsets and run states kept; 1,000 steps x
4 tags are then appended to the same event file as TFRecords (or written by a new tensorboardX
writer, which starts a new file), and read_logdir with the saved offsets is timed (median of
20 repeats: re-reading from the same saved offsets is idempotent).

Markdown tables go to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import crc32c
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.eventfiles frames records

DATA = Path(__file__).resolve().parent / "data"
TAGS = ("train/loss", "train/grad_norm", "train/lr", "eval/loss")
ONE_M_STEPS = 250_000
RUNS, RUN_STEPS = 200, 5_000
QUICK_RECORDS, QUICK_RUNS = 100_000, 20
APPEND_STEPS = 1_000
REPEATS = 20
SHORT_READ_S, SHORT_READ_TRIES = 5.0, 3  # sub-second reads are noisy on a shared machine


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- data


def curves(steps: int, seed: int) -> np.ndarray:
    """Plausible values for TAGS, one row per step."""
    rng = np.random.default_rng(seed)
    t = np.arange(steps) / steps
    loss = 2.5 * np.exp(-5 * t) + 0.1 + 0.05 * rng.standard_normal(steps)
    grad_norm = np.abs(1.0 + 0.3 * rng.standard_normal(steps))
    lr = 3e-4 * 0.5 * (1 + np.cos(np.pi * t))
    eval_loss = loss + 0.02 + 0.01 * rng.standard_normal(steps)
    return np.stack([loss, grad_norm, lr, eval_loss], axis=1)


def write_run(logdir: str, steps: int, seed: int, first_step: int = 0, label: str = "") -> None:
    """Write TAGS x `steps` scalars with a new tensorboardX writer (a new event file)."""
    from tensorboardX import SummaryWriter

    values = curves(steps, seed).tolist()
    with SummaryWriter(logdir) as writer:
        for i, row in enumerate(values):
            for tag, value in zip(TAGS, row):
                writer.add_scalar(tag, value, first_step + i)
            if label and (i + 1) % 50_000 == 0:
                log(f"  {label}: {i + 1:,}/{steps:,} steps written")


def make_data() -> dict[str, Path]:
    """Write whichever of the two datasets is missing, over 2 processes; reuse the rest."""
    paths = {"1m": DATA / "1m", "200runs": DATA / "200runs"}
    partial = DATA / ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    with ProcessPoolExecutor(max_workers=2) as pool:
        jobs = {}
        if not paths["1m"].exists():
            log("writing 1m/ with tensorboardX (~50 s of one core)")
            jobs[pool.submit(write_run, str(partial / "1m"), ONE_M_STEPS, 0, 0, "1m")] = "1m"
        if not paths["200runs"].exists():
            log("writing 200runs/ with tensorboardX (~200 s of CPU, shared by 2 processes)")
            for i in range(RUNS):
                jobs[pool.submit(write_run, str(partial / "200runs" / f"run-{i:03d}"), RUN_STEPS, i + 1)] = "run"
        _collect(jobs, partial, paths)
    shutil.rmtree(partial, ignore_errors=True)
    return paths


def _collect(jobs: dict, partial: Path, paths: dict[str, Path]) -> None:
    """Move each dataset into place once all of it is written (a killed run leaves no half)."""
    runs_done = 0
    for future in as_completed(jobs):
        future.result()
        if jobs[future] == "1m":
            (partial / "1m").rename(paths["1m"])
            log("  1m/ done")
            continue
        runs_done += 1
        if runs_done % 20 == 0:
            log(f"  200runs: {runs_done}/{RUNS} runs written")
        if runs_done == RUNS:
            (partial / "200runs").rename(paths["200runs"])


def make_quick_data(paths: dict[str, Path]) -> dict[str, Path]:
    """Subsets for the slow peers: the first records of 1m/, the first runs of 200runs/."""
    quick = DATA / "quick"
    subsets = {"1m": quick / f"1m-first{QUICK_RECORDS // 1000}k", "200runs": quick / f"200runs-first{QUICK_RUNS}"}
    shutil.rmtree(quick / ".partial", ignore_errors=True)
    if not subsets["1m"].exists():
        (source,) = event_files(paths["1m"])
        _copy_records(source, quick / ".partial" / source.name, QUICK_RECORDS + 1)  # + file_version
        (quick / ".partial").rename(subsets["1m"])
    if not subsets["200runs"].exists():
        for run in sorted(paths["200runs"].iterdir())[:QUICK_RUNS]:
            shutil.copytree(run, quick / ".partial" / run.name)
        (quick / ".partial").rename(subsets["200runs"])
    return subsets


def _copy_records(source: Path, target: Path, records: int) -> None:
    data = source.read_bytes()
    end = 0
    for _ in range(records):
        (length,) = struct.unpack_from("<Q", data, end)
        end += 8 + 4 + length + 4
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data[:end])


def event_files(path: Path) -> list[Path]:
    return sorted(Path(d) / f for d, _, files in os.walk(path) for f in files if "tfevents" in f)


# ---------------------------------------------------------------- readers (run in the child)
# Each loader imports what its reader needs and returns (read, measure): read(path) is timed;
# measure(result) -> (points, bytes held or None) runs after the timing.


def load_read_logdir():
    from app.ingest.logdir import read_logdir

    def measure(read):
        runs = list(read.runs.values())
        arrays = [a for r in runs for a in (r.points.tag, r.points.step, r.points.wall_time, r.points.value, r.segment)]
        return sum(len(r.points) for r in runs), sum(a.nbytes for a in arrays)

    return read_logdir, measure


def load_read_scalars():
    from app.export import read_scalars

    return read_scalars, _frame_size


def load_event_accumulator():
    from tensorboard.backend.event_processing import event_accumulator, io_wrapper

    def read(path):
        scalars = {}
        for run in io_wrapper.GetLogdirSubdirectories(str(path)):
            acc = event_accumulator.EventAccumulator(run, size_guidance={event_accumulator.SCALARS: 0})
            acc.Reload()
            for tag in acc.Tags()[event_accumulator.SCALARS]:
                scalars[run, tag] = acc.Scalars(tag)
        return scalars

    def measure(scalars):
        events = [e for series in scalars.values() for e in series]
        held = sum(sys.getsizeof(s) for s in scalars.values()) + sum(
            sys.getsizeof(e) + sys.getsizeof(e.wall_time) + sys.getsizeof(e.step) + sys.getsizeof(e.value)
            for e in events
        )
        return len(events), held

    return read, measure


def load_tbparse():
    from tbparse import SummaryReader

    return (lambda path: SummaryReader(str(path)).scalars), _frame_size


def load_floor():
    def read(path):
        return [crc32c.crc32c(f.read_bytes()) for f in event_files(path)]

    return read, lambda crcs: (None, None)


def _frame_size(frame):
    return len(frame), int(frame.memory_usage(deep=True).sum())


@dataclass(frozen=True)
class Reader:
    key: str
    label: str
    load: Callable[[], tuple[Callable, Callable]]


READERS = {
    r.key: r
    for r in (
        Reader("read_logdir", "losswatch `read_logdir`", load_read_logdir),
        Reader("read_scalars", "losswatch `read_scalars` (DataFrame)", load_read_scalars),
        Reader("event_accumulator", "tensorboard `EventAccumulator` (scalars=0)", load_event_accumulator),
        Reader("tbparse", "tbparse `SummaryReader(...).scalars`", load_tbparse),
        Reader("floor", "floor: read bytes + crc32c per file", load_floor),
    )
}
SLOW = ("event_accumulator", "tbparse")


def child(key: str, path: str) -> None:
    """Time one reader on one path; print what it measured as one JSON line."""
    read, measure = READERS[key].load()
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    result = read(Path(path))
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    points, held = measure(result)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(json.dumps({
        "points": points, "held": held, "wall": wall, "cpu": cpu,
        "rss_before_mb": before.ru_maxrss / 1024, "rss_peak_mb": after.ru_maxrss / 1024,
    }))


# ---------------------------------------------------------------- full reads (the parent)


@dataclass(frozen=True)
class Case:
    dataset: str
    path: Path
    readers: tuple[str, ...]  # read_logdir first: the others are checked against it


def cases(paths: dict[str, Path], subsets: dict[str, Path] | None) -> list[Case]:
    """Every reader on every dataset; with `subsets`, the slow peers read those instead."""
    if subsets is None:
        return [Case(name, path, tuple(READERS)) for name, path in paths.items()]
    fast = tuple(k for k in READERS if k not in SLOW)
    labels = {"1m": f"1m (first {QUICK_RECORDS // 1000}k)", "200runs": f"200runs (first {QUICK_RUNS} runs)"}
    return [
        case
        for name in paths
        for case in (Case(name, paths[name], fast), Case(labels[name], subsets[name], ("read_logdir", *SLOW)))
    ]


def run_child(key: str, path: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", key, str(path)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["exit status %d" % proc.returncode])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure_reader(key: str, path: Path) -> dict:
    """One fresh child; a short read gets more, and the one of median CPU time is kept."""
    first = run_child(key, path)
    if "error" in first or first["wall"] >= SHORT_READ_S:
        return first
    tries = [first] + [run_child(key, path) for _ in range(SHORT_READ_TRIES - 1)]
    tries = sorted((t for t in tries if "error" not in t), key=lambda t: t["cpu"])
    return tries[len(tries) // 2]


def warm(path: Path) -> int:
    """Read every event file once (so every reader finds them cached); return their bytes."""
    return sum(len(f.read_bytes()) for f in event_files(path))


def measure_case(case: Case) -> list[str]:
    nbytes = warm(case.path)
    results = {}
    for key in case.readers:
        log(f"{case.dataset}: {READERS[key].label} ...")
        results[key] = measure_reader(key, case.path)
        log(f"  {_brief(results[key])}")
    base = results["read_logdir"]
    return [table_row(case.dataset, READERS[k].label, r, base, nbytes) for k, r in results.items()]


def _brief(result: dict) -> str:
    if "error" in result:
        return f"failed: {result['error']}"
    return f"{result['wall']:.2f} s wall, {result['cpu']:.2f} s CPU, peak RSS {result['rss_peak_mb']:.0f} MB"


TABLE_HEAD = [
    "dataset", "reader", "points", "wall s", "CPU s", "points/s (CPU)", "MB/s (wall)",
    "peak RSS MB (before read)", "bytes/point held", "x slower than losswatch",
]


def table_row(dataset: str, reader: str, r: dict, base: dict, nbytes: int) -> str:
    if "error" in r:
        return _cells([dataset, reader, f"FAILED: {r['error']}"] + [""] * (len(TABLE_HEAD) - 3))
    expected = base.get("points")  # None if losswatch itself failed
    points = r["points"] if r["points"] is not None else expected  # the floor decodes nothing
    rate = points / r["cpu"] if points is not None else None
    return _cells([
        dataset,
        reader,
        _points_cell(r["points"], expected),
        f"{r['wall']:.2f}",
        f"{r['cpu']:.2f}",
        "-" if rate is None else _si(rate) + ("*" if r["points"] is None else ""),
        f"{nbytes / 1e6 / r['wall']:,.0f}",
        f"{r['rss_peak_mb']:,.0f} ({r['rss_before_mb']:,.0f})",
        "-" if r["held"] is None else f"{r['held'] / points:.0f}",
        "-" if rate is None or expected is None else f"{expected / base['cpu'] / rate:.2g}x",
    ])


def _points_cell(points: int | None, expected: int | None) -> str:
    if points is None:
        return "(no decode)"
    if expected is not None and points != expected:
        return f"{points:,} MISMATCH (losswatch {expected:,})"
    return f"{points:,}"


def _si(x: float) -> str:
    return f"{x / 1e6:.2f} M" if x >= 1e6 else f"{x / 1e3:.1f} k"


def _cells(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(head: list[str], rows: list[str]) -> str:
    return "\n".join([_cells(head), _cells(["---"] * len(head)), *rows])


# ---------------------------------------------------------------- incremental reads


def append_scalars(path: Path, first_step: int, steps: int) -> None:
    """Append TAGS x `steps` simple_value events to an existing event file, as a writer would."""
    from tests.eventfiles import record, scalar_event

    records = []
    for i, row in enumerate(curves(steps, seed=99).tolist()):
        for tag, value in zip(TAGS, row):
            records.append(record(scalar_event(first_step + i, tag, value, time.time())))
    with open(path, "ab") as f:
        f.write(b"".join(records))


def saved_progress(logdir: Path):
    """Read `logdir` fully; return what a poller keeps: offsets per file, state per run."""
    from app.ingest.logdir import read_logdir

    read = read_logdir(str(logdir))
    offsets = {path: p.offset for run in read.runs.values() for path, p in run.files.items()}
    return offsets, {name: run.state for name, run in read.runs.items()}


def time_reread(case: str, logdir: Path, offsets, states, expected: int) -> str:
    from app.ingest.logdir import read_logdir

    times, counts = [], []
    for _ in range(REPEATS):
        start = time.perf_counter()
        read = read_logdir(str(logdir), offsets=offsets, states=states)
        times.append((time.perf_counter() - start) * 1e3)
        counts.append(sum(len(run.points) for run in read.runs.values()))
    wrong = sorted({c for c in counts if c != expected})
    check = f"{expected:,}" if not wrong else f"{wrong} MISMATCH (expected {expected:,})"
    log(f"  {case}: median {statistics.median(times):.2f} ms")
    return _cells([case, check, f"{statistics.median(times):.2f}", f"{min(times):.2f}", f"{max(times):.2f}"])


def measure_incremental(one_m: Path) -> list[str]:
    log("incremental reads of a copy of 1m/ ...")
    new_steps = range(ONE_M_STEPS, ONE_M_STEPS + APPEND_STEPS)
    with tempfile.TemporaryDirectory() as tmp:
        same_file = shutil.copytree(one_m, Path(tmp) / "append")
        offsets, states = saved_progress(same_file)
        rows = [time_reread("nothing new (saved offsets)", same_file, offsets, states, 0)]
        (event_file,) = event_files(same_file)
        append_scalars(event_file, new_steps.start, len(new_steps))
        rows.append(time_reread(
            f"+{len(new_steps):,} steps x 4 tags appended to the 1M-scalar file", same_file, offsets, states, 4 * len(new_steps)
        ))
        new_file = shutil.copytree(one_m, Path(tmp) / "new-writer")
        offsets, states = saved_progress(new_file)
        write_run(str(new_file), len(new_steps), seed=99, first_step=new_steps.start)
        rows.append(time_reread(
            f"+{len(new_steps):,} steps x 4 tags by a new tensorboardX writer (new file)", new_file, offsets, states, 4 * len(new_steps)
        ))
    return rows


# ---------------------------------------------------------------- machine


def machine(load_before: float) -> list[str]:
    model = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
        platform.processor() or "unknown",
    )
    versions = ", ".join(
        f"{p} {importlib.metadata.version(p)}" for p in ("tensorboard", "tbparse", "tensorboardX", "crc32c", "numpy", "pandas", "protobuf")
    )
    return [
        f"- nproc: {len(os.sched_getaffinity(0))} (cpu_count {os.cpu_count()})",
        f"- CPU: {model}",
        f"- Python {platform.python_version()} ({sys.executable})",
        f"- {versions}",
        f"- load average (1 min) before / after: {load_before:.2f} / {os.getloadavg()[0]:.2f}"
        " (other processes share the cores: wall times suffer more than CPU times)",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="run EventAccumulator and tbparse on a 10%% subset")
    parser.add_argument("--child", nargs=2, metavar=("READER", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    paths = make_data()
    subsets = make_quick_data(paths) if args.quick else None
    rows = [row for case in cases(paths, subsets) for row in measure_case(case)]
    incremental = measure_incremental(paths["1m"])
    mode = "quick: EventAccumulator and tbparse on subsets" if args.quick else "full"
    print(f"## Full reads ({mode})\n")
    print(_table(TABLE_HEAD, rows))
    print("\n\\* the floor decodes nothing: its points/s is losswatch's point count over the floor's CPU time.\n")
    print("## Incremental reads (read_logdir with saved offsets and states)\n")
    print(_table(["case", "points returned", "median ms", "min ms", "max ms"], incremental))
    print(f"\n{REPEATS} repeats each, from the same saved offsets.\n")
    print("## Machine\n")
    print("\n".join(machine(load_before)))
    log(f"done in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()

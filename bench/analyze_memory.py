"""Peak memory and CPU of `losswatch analyze` on one long run (8 tags) in each input format:
TensorBoard event file, NDJSON, a JSON list and CSV, at 1M, 3M and 10M points, this
checkout against another (`--code`, e.g. a checkout of main) in the same run.

Each case is a fresh `python -m app.cli analyze FILE --format json` process; its peak RSS is
its VmHWM (ru_maxrss from wait4) and its CPU time user + system.  The two checkouts'
outputs are compared: "same" says they printed the same findings and health.

    .venv/bin/python bench/analyze_memory.py --code /tmp/main-checkout            # 1M, 3M, 10M
    .venv/bin/python bench/analyze_memory.py --code /tmp/main-checkout --sizes 1000000

The inputs are written once into --work (default: a folder in /tmp) and reused.  Markdown
rows on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import crc32c
import numpy as np

REPO = Path(__file__).resolve().parents[1]
TAGS = ("train/loss", "train/lr", "train/grad_norm", "train/loss_scale", "eval/loss", "train/tokens_per_s",
        "train/param_norm", "train/update_ratio")
FORMATS = ("events", "ndjson", "json", "csv")


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def values(steps: int, seed: int = 0) -> np.ndarray:
    """(steps, 8) values: a decaying loss with a spike, and seven plausible other series."""
    rng = np.random.default_rng(seed)
    t = np.arange(steps)
    out = 1 + 0.02 * rng.standard_normal((steps, len(TAGS)))
    out[:, 0] *= 2 + 3 * np.exp(-t / (steps / 8))
    out[steps // 2: steps // 2 + 20, 0] *= np.linspace(5, 1, 20)
    out[:, 1] = 3e-4 * np.minimum(1, (t + 1) / 1000)
    return out


def _masked_crc(data: bytes) -> int:
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def write_events(path: Path, v: np.ndarray) -> None:
    """Scalar events (simple_value) as tensorboardX writes them, one record per point."""
    values_of = [(b"\x0a" + _varint(len(tag)) + tag.encode()) for tag in TAGS]
    with open(path, "wb") as f:
        for step in range(len(v)):
            head = b"\x09" + struct.pack("<d", 1.7e9 + step) + b"\x10" + _varint(step)
            parts = []
            for i, tag in enumerate(values_of):
                value = tag + b"\x15" + struct.pack("<f", v[step, i])
                summary = b"\x0a" + _varint(len(value)) + value
                payload = head + b"\x2a" + _varint(len(summary)) + summary
                header = struct.pack("<Q", len(payload))
                parts.append(header + struct.pack("<I", _masked_crc(header)) + payload + struct.pack("<I", _masked_crc(payload)))
            f.write(b"".join(parts))


def _rows(v: np.ndarray):
    for step in range(len(v)):
        yield {"step": step, **{tag: float(x) for tag, x in zip(TAGS, v[step])}}


def write_ndjson(path: Path, v: np.ndarray) -> None:
    with open(path, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in _rows(v))


def write_json(path: Path, v: np.ndarray) -> None:
    with open(path, "w") as f:
        f.write("[")
        for i, row in enumerate(_rows(v)):
            f.write(("," if i else "") + json.dumps(row))
        f.write("]")


def write_csv(path: Path, v: np.ndarray) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["step", *TAGS])
        writer.writerows([step, *map(float, v[step])] for step in range(len(v)))


WRITERS = {"events": write_events, "ndjson": write_ndjson, "json": write_json, "csv": write_csv}
NAMES = {"events": "events.out.tfevents.1", "ndjson": "run.ndjson", "json": "run.json", "csv": "run.csv"}


def input_file(work: Path, fmt: str, points: int) -> Path:
    """The input of `points` points in `fmt`, written once by a child process: a peak RSS
    read from wait4 counts what a child shares with this process when forked, so this one
    never holds the values (writing 80M points left it at 886 MB, and each analyze "peaked"
    there)."""
    path = work / f"{fmt}-{points}" / NAMES[fmt]
    if not path.exists():
        progress(f"writing {path}")
        subprocess.run([sys.executable, __file__, "--write", fmt, str(points), "--work", str(work)], check=True)
    return path


def write_input(work: Path, fmt: str, points: int) -> None:
    folder = work / f"{fmt}-{points}"
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / ("partial." + NAMES[fmt])
    WRITERS[fmt](partial, values(points // len(TAGS)))
    partial.rename(folder / NAMES[fmt])


def analyze(code: Path, path: Path, out: Path) -> tuple[float, float]:
    """Peak RSS (MB) and CPU seconds of one `losswatch analyze` of `path` by `code`."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    with open(out, "wb") as stdout:
        proc = subprocess.Popen([sys.executable, "-m", "app.cli", "analyze", str(path), "--format", "json", "--fail-on", "never"],
                                cwd="/", env=env, stdout=stdout, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{code}: analyze {path} exited {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
    return usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", type=Path, help="the checkout to compare with (e.g. main)")
    parser.add_argument("--sizes", default="1000000,3000000,10000000", help="points per run, comma-separated")
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--work", type=Path, default=Path("/tmp/losswatch-analyze-memory"))
    parser.add_argument("--write", nargs=2, metavar=("FORMAT", "POINTS"), help=argparse.SUPPRESS)  # input_file's child
    args = parser.parse_args()
    if args.write:
        write_input(args.work, args.write[0], int(args.write[1]))
        return
    codes = [("new", REPO)] + ([("old", args.code.resolve())] if args.code else [])
    print("| format | points | code | peak RSS MB | bytes/point | CPU s | points/CPU-s | output |")
    print("|---|---:|---|---:|---:|---:|---:|---|")
    for points in [int(s) for s in args.sizes.split(",")]:
        for fmt in args.formats.split(","):
            path = input_file(args.work, fmt, points)
            outputs = {}
            for label, code in codes:
                progress(f"{fmt} {points:,} points: {label}")
                out = args.work / f"out-{label}.json"
                rss, cpu = analyze(code, path, out)
                outputs[label] = json.loads(out.read_text())
                same = "" if len(codes) == 1 else ("same" if outputs[label] == outputs["new"] else "DIFFERS")
                print(f"| {fmt} | {points:,} | {label} | {rss:,.0f} | {rss * 2**20 / points:,.0f} | {cpu:.1f} "
                      f"| {points / cpu:,.0f} | {same} |", flush=True)


if __name__ == "__main__":
    main()

"""Speed of the whole analysis (series preparation and every detector), in points per
CPU-second, on a 1M-point run (4 tags x 250,000 steps) and on 200 runs x 4 tags x 5,000
steps; beside a user's pandas rolling z-score rule (OLMo-style, one tag) on the same data.

    .venv/bin/python bench/analyze.py
"""

from __future__ import annotations

import platform
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzers.analyze import analyze_run  # noqa: E402
from analyzers.findings import SpikeClass  # noqa: E402
from analyzers.series import TagWrites, prepare_run  # noqa: E402
from bench.peers import olmo  # noqa: E402
from tests.curves import clean_curve, plant_explosion, plant_spike  # noqa: E402


def run_of(points: int, seed: int) -> dict[str, TagWrites]:
    curve = clean_curve(seed, points=points)
    rng = np.random.default_rng(seed)
    for at in range(points // 10, points - 2000, points // 5):
        plant_spike(curve, at, SpikeClass.FAST_RECOVERING, rng)
    plant_explosion(curve, points // 2, rng, with_spike=False)
    curve.tags["train/loss_scale"] = np.full(points, 65536.0)
    zero = np.zeros(points, np.int32)
    return {tag: TagWrites(curve.steps, values, zero) for tag, values in curve.tags.items()}


def timed(fn) -> tuple[float, float, object]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def best_of(repeats: int, fn) -> tuple[float, float, object]:
    return min((timed(fn) for _ in range(repeats)), key=lambda r: r[1])


def main() -> None:
    print("generating data...", file=sys.stderr)
    big = run_of(250_000, 1)
    many = [run_of(5_000, 100 + i) for i in range(200)]
    rows = []

    def analyze_all(runs):
        return sum(len(analyze_run(prepare_run(r))) for r in runs)

    for name, runs in (("1 run x 4 tags x 250k", [big]), ("200 runs x 4 tags x 5k", many)):
        points = sum(len(w.step) for r in runs for w in r.values())
        wall, cpu, findings = best_of(3, lambda runs=runs: analyze_all(runs))
        rows.append((name, "losswatch: every detector, 4 tags", points, wall, cpu, findings))
        losses = [(r["train/loss"].step, r["train/loss"].value) for r in runs]
        loss_points = sum(len(s) for s, _ in losses)
        wall, cpu, found = best_of(3, lambda losses=losses: sum(len(olmo(s, v)) for s, v in losses))
        rows.append((name, "pandas rolling 6-sigma rule, loss only", loss_points, wall, cpu, found))
    print("| data | analysis | points | wall s | CPU s | points/CPU-s | findings |")
    print("|---|---|---|---|---|---|---|")
    for name, what, points, wall, cpu, found in rows:
        print(f"| {name} | {what} | {points:,} | {wall:.3f} | {cpu:.3f} | {points / cpu / 1e6:.2f} M | {found} |")
    print(f"\npeak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB; "
          f"python {platform.python_version()}, numpy {np.__version__}, {platform.processor() or platform.machine()}")


if __name__ == "__main__":
    main()

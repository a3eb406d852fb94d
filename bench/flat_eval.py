"""False eval rises on flat, noisy, dense eval losses (issue 10, "never cry wolf"): the
eval-rise detector (`analyzers.overfitting`) on SEEDS flat series of N evaluations each, an
eval loss at every step around 2 with 1% and 2% Gaussian noise, where any rise is false.
Rises in the first 1,000 evaluations are counted apart: the module's docstring gives their
rate for any series.

    .venv/bin/python bench/flat_eval.py                      # 100 series of 100,000 evaluations
    .venv/bin/python bench/flat_eval.py --seeds 20 --n 300000

Markdown on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzers.overfitting import EvalRiseDetector  # noqa: E402
from analyzers.stream import detect_at_once  # noqa: E402


def false_rises(noise: float, seeds: int, n: int) -> tuple[int, int, int]:
    """(rises after the first 1,000 evaluations, series with one, rises within them)."""
    late = series_late = early = 0
    for seed in range(seeds):
        values = 2 * (1 + noise * np.random.default_rng(seed).standard_normal(n))
        starts = [f.start_step for f in detect_at_once(EvalRiseDetector(), np.arange(n), values, "val/loss")]
        k = sum(s > 1000 for s in starts)
        late, series_late, early = late + k, series_late + (k > 0), early + len(starts) - k
    return late, series_late, early


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=100, help="flat series per noise level")
    parser.add_argument("--n", type=int, default=100_000, help="evaluations per series")
    args = parser.parse_args()
    print("| noise | series x evaluations | false rises after the first 1,000 | series with one | rises within the first 1,000 |")
    print("|---|---|---|---|---|")
    for noise in (0.01, 0.02):
        print(f"noise {noise:.0%}: {args.seeds} series", file=sys.stderr, flush=True)
        late, series_late, early = false_rises(noise, args.seeds, args.n)
        print(f"| {noise:.0%} | {args.seeds} x {args.n:,} | {late} | {series_late} | {early} |")


if __name__ == "__main__":
    main()

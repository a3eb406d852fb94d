"""The labelling aid behind the loss-spike labels of reference_runs.json: lists the upward
jumps of one dense series, measured the same way for every run, so a reviewer can re-derive
which spikes were labelled required, which optional, and why (see README.md, "Spikes").

    .venv/bin/python bench/labels/spike_candidates.py ../shared/reference-runs/json/ext_speedrun_muon_124m.json train/loss

Independent of losswatch's analyzers on purpose (labels must not follow the detector):
the level is the median of the previous 21 points, the noise is 1.4826 x the median
absolute residual from a centred 21-point median over the previous 200 points, and a
candidate is a stretch of points at least 6 such sigmas above the level.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.ingest.sources import read_path  # noqa: E402

LEVEL_POINTS = 21
NOISE_POINTS = 200
CANDIDATE_Z = 6.0
REQUIRED_Z = 12.0
REQUIRED_RATIO = 1.15


def series(path: str, run: str | None, tag: str) -> tuple[np.ndarray, np.ndarray]:
    """One tag's steps and values, in step order."""
    runs = read_path(path).runs
    chosen = runs[run] if run else next(iter(runs.values()))
    p = chosen.points
    mine = p.tag == p.tags.index(tag)
    order = np.argsort(p.step[mine], kind="stable")
    return p.step[mine][order], p.value[mine][order]


def candidates(steps: np.ndarray, values: np.ndarray) -> list[dict]:
    """Every stretch at least CANDIDATE_Z sigmas above the trailing level, with its size."""
    x = pd.Series(values)
    level = x.shift(1).rolling(LEVEL_POINTS, min_periods=5).median().to_numpy()
    residual = x - x.rolling(LEVEL_POINTS, center=True, min_periods=5).median()
    sigma = (residual.abs().shift(1).rolling(NOISE_POINTS, min_periods=20).median() * 1.4826).to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (values - level) / sigma
    found, i, n = [], 0, len(values)
    while i < n:
        if not z[i] >= CANDIDATE_Z:
            i += 1
            continue
        j = i
        while j + 1 < n and (z[j + 1] >= CANDIDATE_Z or (j + 2 < n and z[j + 2] >= CANDIDATE_Z)):
            j += 1
        peak = i + int(np.argmax(values[i : j + 1]))
        ratio = float(values[peak] / level[i])
        found.append({
            "step": int(steps[i]), "peak_step": int(steps[peak]), "level": round(float(level[i]), 4),
            "peak": round(float(values[peak]), 4), "ratio": round(ratio, 3), "z": round(float(z[peak]), 1),
            "required": bool(z[peak] >= REQUIRED_Z and ratio >= REQUIRED_RATIO),
        })
        i = j + 1
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path")
    parser.add_argument("tag")
    parser.add_argument("--run")
    args = parser.parse_args()
    for c in candidates(*series(args.path, args.run, args.tag)):
        print(json.dumps(c))


if __name__ == "__main__":
    main()

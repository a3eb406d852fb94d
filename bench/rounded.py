"""Healthy runs whose loss a logger printed to a few decimals (issue 10: never cry wolf),
old code beside new: the alerts every detector raises on them, and planted spikes still
found through the rounding.

A loss printed to 2-4 decimals (the HF Trainer rounds to 4, Keras prints 4, many loops
`f"{loss:.3f}"`) moves on a decimal grid.  Where its noise is under the grid's step, or
absent, the residuals around the trailing level are exactly zero but for a double's last
bits, and a step of the grid read as a spike of up to 10^12 sigmas.  The series:

* healthy runs (`tests/curves.py` `clean_curve`: warmup, cosine, step or constant
  schedule; loss, grad norm and LR, 3,000 steps) with noise 0, 0.05%, 0.2% and 1%, their
  loss and grad norm printed to 2, 3 or 4 decimals or left whole, two seeds each; the grad
  norm as it is (0.25-0.85) or a converged model's, 20 times smaller (0.012-0.04: printed
  to 2 decimals it repeats 0.01 or 0.02 for 50-150 points);
* the same runs with one fast-recovering spike planted (1.5-4x) at 60% of the run;
* two noiseless curves, apart: `bench/append.py`'s loss, 2.0 + step/1000 to 3 decimals (a
  smooth climb: a divergence, and no spike), and a loss stuck at ln 2 printed as 0.6931
  whose last digit moves once (nothing).

    .venv/bin/python bench/rounded.py                        # this checkout
    .venv/bin/python bench/rounded.py --code /tmp/lw-main    # old beside new

Markdown on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzers.findings import SpikeClass  # noqa: E402
from tests.curves import clean_curve, plant_spike  # noqa: E402

NOISES = (0.0, 0.0005, 0.002, 0.01)
DECIMALS = (None, 2, 3, 4)
SCHEDULES = ("cosine", "step", "constant")
SEEDS = 2
NORM_SCALES = (1.0, 0.05)  # the grad norm as it is, and a converged model's
POINTS = 3000


# (group, name, {tag: (steps, values)}, planted spike step or None)
Series = tuple[str, str, dict[str, tuple[np.ndarray, np.ndarray]], int | None]


def printed(values: np.ndarray, decimals: int | None) -> np.ndarray:
    return values if decimals is None else np.round(values, decimals)


def healthy_runs() -> list[Series]:
    """Every healthy run, clean and with a planted spike, as the logger printed it."""
    out: list[Series] = []
    for noise in NOISES:
        for decimals in DECIMALS:
            for norm in NORM_SCALES:
                for schedule in SCHEDULES:
                    for seed in range(SEEDS):
                        for planted in (False, True):
                            curve = clean_curve(seed, points=POINTS, noise=noise, schedule=schedule)
                            curve.tags["train/grad_norm"] = curve.tags["train/grad_norm"] * norm
                            at = None
                            if planted:
                                plant_spike(curve, int(0.6 * POINTS), SpikeClass.FAST_RECOVERING, np.random.default_rng(seed))
                                at = curve.truth[-1].step
                            tags = {tag: (curve.steps, v if tag == "train/lr" else printed(v, decimals)) for tag, v in curve.tags.items()}
                            group = (f"{decimals} decimals" if decimals is not None else "whole") + (f", grad norm x{norm}" if norm != 1 else "")
                            out.append((group, f"{schedule}, noise {noise}, seed {seed}", tags, at))
    return out


def noiseless_runs() -> list[Series]:
    steps = np.arange(2000)
    climb = np.round(2.0 + steps / 1000, 3)
    stuck = np.full(600, 0.6931)
    stuck[400] = 0.6932
    return [
        ("noiseless", "bench/append.py's loss, 2.0 + step/1000 to 3 decimals", {"train/loss": (steps, climb)}, None),
        ("noiseless", "a loss stuck at 0.6931, one point at 0.6932", {"train/loss": (np.arange(600), stuck)}, None),
    ]


ANALYSE = textwrap.dedent("""
    import json, pickle, sys
    import numpy as np
    from analyzers.analyze import analyze_run
    from analyzers.series import TagWrites, prepare_run
    found = []
    for group, name, tags, at in pickle.load(open(sys.argv[1], "rb")):
        writes = {tag: TagWrites(s, v, np.zeros(len(s), np.int32)) for tag, (s, v) in tags.items()}
        found.append([[f.kind.value, f.tag, int(f.start_step), f.severity.name.lower(), f.message]
                      for f in analyze_run(prepare_run(writes, ()))])
    print(json.dumps(found))
""")


def analysed(code: Path | None, series: list[Series], tmp: Path) -> list[list[list]]:
    """Each series' findings (kind, tag, start step, severity, message) by the code at
    `code` (None: this checkout), in a process of its own."""
    return in_checkout(code, ANALYSE, series, tmp)


def in_checkout(code: Path | None, snippet: str, series: list[Series], tmp: Path) -> list:
    """What `snippet` prints (JSON) given the pickled `series`, run on the code at `code`
    (None: this checkout) in a process of its own."""
    code = code or Path(__file__).resolve().parents[1]
    path = tmp / "series.pickle"
    path.write_bytes(pickle.dumps(series))
    out = subprocess.run([sys.executable, "-c", snippet, str(path)], env={**os.environ, "PYTHONPATH": str(code)}, cwd=code,
                         capture_output=True, check=True, text=True)
    return json.loads(out.stdout)


def tally(series: list[Series], found: list[list[list]]) -> dict[str, Counter]:
    """Per group: healthy runs, those with any alert, their alerts (and warnings or worse);
    planted spikes, found (a loss spike within 10 steps)."""
    out: dict[str, Counter] = {}
    for (group, _, _, at), alerts in zip(series, found):
        if group == "noiseless":
            continue
        c = out.setdefault(group, Counter())
        if at is None:
            c["runs"] += 1
            c["loud runs"] += bool(alerts)
            c["alerts"] += len(alerts)
            c["warnings"] += sum(a[3] in ("warning", "critical") for a in alerts)
        else:
            c["planted"] += 1
            c["found"] += any(a[0] == "loss_spike" and abs(a[2] - at) <= 10 for a in alerts)
            c["alerts"] += sum(not (a[0] == "loss_spike" and abs(a[2] - at) <= 10) for a in alerts)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--code", type=Path, help="a checkout of the old code (e.g. main), run beside this one")
    args = parser.parse_args()
    series = healthy_runs() + noiseless_runs()
    rows, kinds, examples = [], [], {}
    with tempfile.TemporaryDirectory(prefix="rounded-") as tmp:
        for label, code in ([("old", args.code)] if args.code else []) + [("new", None)]:
            print(f"[rounded] {label}: {len(series)} series", file=sys.stderr, flush=True)
            found = analysed(code, series, Path(tmp))
            healthy = [(s, alerts) for s, alerts in zip(series, found) if s[0] != "noiseless" and s[3] is None]
            examples[label] = next((f"{s[1]}: {a[4]}" for s, alerts in healthy for a in alerts), None)
            for group, c in tally(series, found).items():
                rows.append([group, label, c["runs"], c["loud runs"], c["alerts"], c["warnings"], f"{c['found']}/{c['planted']}"])
            for s, alerts in zip(series, found):
                if s[0] == "noiseless":
                    told = Counter(f"{a[0]} ({a[3]})" for a in alerts)
                    kinds.append([s[1], label, ", ".join(f"{n} {k}" for k, n in sorted(told.items())) or "nothing"])
    rows.sort(key=lambda r: (r[0], r[1] != "old"))
    print(f"### Healthy runs printed to a few decimals ({len(series) - 2} series)\n")
    print("| printed | code | healthy runs | with an alert | alerts (planted spikes apart) | warnings or worse | planted spikes found |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
    for label, example in examples.items():
        print(f"\n{label}, a first alert on a healthy run: {example or 'none'}")
    print("\n### Noiseless curves\n")
    print("| curve | code | findings |")
    print("|---|---|---|")
    for row in kinds:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()

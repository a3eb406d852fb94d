"""One-point loss spikes while the loss still falls steeply, early in a run (issue 10): how
many of those the labels' rule requires losswatch's spike detector finds, and how many of
its alerts stand away from anything the rule would even list, old code beside new.

The curves are synthetic and speedrun-like: 3.2 + 7.6 exp(-t/150) + 0.8/sqrt(1 + t/50)
nats over 2,000 points, logged every step or every 5 steps, in fp32 or rounded to bf16,
with Student-t (3 degrees) minibatch noise of 0.6% or 1.2%, four seeds: 32 losses, each
analysed clean and with one point raised 25% at one of five places (points 40 to 800),
192 series in all.  The truth is the rule the real public logs were labelled by
(`bench/labels/spike_candidates.py`, independent of the analyzers): a stretch 12 sigmas
and 15% above the median of the 21 points before it is required; 6 sigmas, optional.
The heavy-tailed noise throws its own required blips, which count as well.

    .venv/bin/python bench/falling_spikes.py                        # this checkout
    .venv/bin/python bench/falling_spikes.py --code /tmp/lw-main    # old beside new

Markdown on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.labels.spike_candidates import candidates  # noqa: E402

POINTS = 2000
JUMP = 1.25
AT = (40, 80, 150, 300, 800)  # points the jump is planted at
SEEDS = 4


def bf16(x: np.ndarray) -> np.ndarray:
    bits = np.asarray(x, np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32).astype(np.float64)


def curves() -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(name, steps, values) of every series."""
    out = []
    for every in (1, 5):
        for rounded in (False, True):
            for noise in (0.006, 0.012):
                for seed in range(SEEDS):
                    t = np.arange(POINTS) * every
                    rng = np.random.default_rng(seed)
                    v = (3.2 + 7.6 * np.exp(-t / 150) + 0.8 / np.sqrt(1 + t / 50)) * (1 + noise * rng.standard_t(3, POINTS))
                    for at in (None, *AT):
                        jumped = v.copy()
                        if at is not None:
                            jumped[at] *= JUMP
                        name = f"every {every}, {'bf16' if rounded else 'fp32'}, noise {noise}, seed {seed}, jump at {at}"
                        out.append((name, t, bf16(jumped) if rounded else jumped))
    return out


DETECT = textwrap.dedent("""
    import json, sys
    import numpy as np
    from analyzers.roles import Role
    from analyzers.series import TagWrites, prepare_series
    from analyzers.spikes import LossSpikeDetector
    data = np.load(sys.argv[1])
    found = []
    for k in range(len(data["steps"])):
        steps, values = data["steps"][k], data["values"][k]
        writes = TagWrites(steps, values, np.zeros(len(values), np.int32))
        found.append([f.start_step for f in LossSpikeDetector().detect(prepare_series("train/loss", Role.LOSS, writes, {}))])
    print(json.dumps(found))
""")


def detected(code: Path | None, series: list[tuple[str, np.ndarray, np.ndarray]], tmp: Path) -> list[list[int]]:
    """Each series' spike onsets by the detector of the code at `code` (None: this checkout)."""
    code = code or Path(__file__).resolve().parents[1]
    path = tmp / "curves.npz"
    np.savez(path, steps=np.array([t for _, t, _ in series]), values=np.array([v for _, _, v in series]))
    out = subprocess.run([sys.executable, "-c", DETECT, str(path)], env={**os.environ, "PYTHONPATH": str(code)}, cwd=code,
                         capture_output=True, check=True, text=True)
    return json.loads(out.stdout)


def scores(series: list[tuple[str, np.ndarray, np.ndarray]], found: list[list[int]]) -> dict[str, int]:
    """Required stretches found, and alerts away from every candidate (within 3 points)."""
    total = {"required": 0, "found": 0, "planted": 0, "planted found": 0, "alerts": 0, "away from any candidate": 0}
    for (name, t, v), onsets in zip(series, found):
        near = 3 * int(t[1] - t[0])
        listed = candidates(t, v)
        planted = None if name.endswith("None") else int(t[int(name.rsplit(" ", 1)[1])])
        for c in listed:
            if c["required"]:
                hit = any(abs(s - c["step"]) <= near for s in onsets)
                total["required"] += 1
                total["found"] += hit
                if planted is not None and abs(c["step"] - planted) <= near:
                    total["planted"] += 1
                    total["planted found"] += hit
        total["alerts"] += len(onsets)
        total["away from any candidate"] += sum(not any(abs(s - c["step"]) <= near for c in listed) for s in onsets)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--code", type=Path, help="a checkout of the old code (e.g. main), run beside this one")
    args = parser.parse_args()
    series = curves()
    rows = []
    with tempfile.TemporaryDirectory(prefix="falling-spikes-") as tmp:
        for label, code in ([("old", args.code)] if args.code else []) + [("new", None)]:
            print(f"[falling spikes] {label}: {len(series)} series", file=sys.stderr, flush=True)
            s = scores(series, detected(code, series, Path(tmp)))
            rows.append([label, s["required"], s["found"], f"{s['found'] / s['required']:.2f}", s["planted"], s["planted found"],
                         s["alerts"], s["away from any candidate"]])
    print(f"### One-point spikes on steeply falling synthetic losses ({len(series)} series)\n")
    print("| code | required | found | recall | planted jumps required | found | alerts | away from any 6-sigma candidate |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")


if __name__ == "__main__":
    main()

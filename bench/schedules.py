"""Healthy runs on a schedule with warm restarts (issue 10: never cry wolf), old code beside
new: the alerts every detector raises on them, and spikes planted between restarts, or on
an LR pushed past its peak by a bug, still found.

SGDR (PyTorch's `CosineAnnealingWarmRestarts`, the HF Trainer's `cosine_with_restarts`)
sends the LR back to its peak every cycle, and the loss rises with it, then falls as the LR
anneals.  The series (`tests/curves.py` `restart_curve`, 6,000 logged points, 3 seeds):

* cycles of 300 and 1,000 steps logged every step, and of 10,000 steps logged every 10;
  the LR jumping back at once, or warming up again over 20 or 50 steps (timm's cycles); two
  of them with an eval loss (1.05x the mean of the last 25 train losses) every 20 or 500
  steps;
* each run clean, and again with one fast-recovering spike planted between two restarts
  (at 58% of the run, away from any restart);
* the 1,000-step cycles with the LR multiplied by 10 for 400 steps from 3,500 (a bug, past
  its peak) and the loss 1.5x for the first 100 of them: a spike that is news.

Each run is analysed in one pass over the finished curve, and again fed 10 steps at a
time (every tag's points in them) as a training loop posts them: "ever shown live" counts
the warnings (and worse) on the healthy runs that any of those feeds returned, open ones
included, even if a later feed took them back.

    .venv/bin/python bench/schedules.py                        # this checkout
    .venv/bin/python bench/schedules.py --code /tmp/lw-main    # old beside new

Markdown on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzers.findings import SpikeClass  # noqa: E402
from bench.rounded import Series, analysed, in_checkout, tally  # noqa: E402
from tests.curves import plant_spike, restart_curve  # noqa: E402

SHAPES = (  # (period, interval, ramp, eval_every)
    (300, 1, 0, None), (1000, 1, 0, None), (1000, 1, 20, None), (1000, 1, 50, None), (10000, 10, 0, None),
    (1000, 1, 0, 20), (10000, 10, 0, 50),
)
SEEDS = 3
POINTS = 6000


def _tags(curve) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every tag of a curve, its evaluations included, as (steps, values)."""
    return {**{tag: (curve.steps, v) for tag, v in curve.tags.items()}, **curve.evals}


def restart_runs() -> list[Series]:
    """Every run on warm restarts, clean and with a planted spike between restarts."""
    out: list[Series] = []
    for period, interval, ramp, every in SHAPES:
        group = f"cycles of {period} steps, every {interval}" + (f", {ramp}-step warm-up" if ramp else "")
        group += f", eval every {every * interval} steps" if every else ""
        for seed in range(SEEDS):
            for planted in (False, True):
                curve = restart_curve(seed, period=period, points=POINTS, interval=interval, ramp=ramp, eval_every=every)
                at = None
                if planted:
                    plant_spike(curve, int(0.58 * POINTS), SpikeClass.FAST_RECOVERING, np.random.default_rng(seed))
                    at = curve.truth[-1].step
                out.append((group, f"seed {seed}", _tags(curve), at))
    return out


def lr_bug_runs() -> list[Series]:
    """The LR x10 past its peak for 400 steps, the loss 1.5x for 100: a spike to tell."""
    out: list[Series] = []
    for seed in range(SEEDS):
        curve = restart_curve(seed, period=1000, points=POINTS)
        curve.tags["train/lr"][3500:3900] *= 10
        curve.tags["train/loss"][3500:3600] *= 1.5
        out.append(("LR x10 past its peak (a bug)", f"seed {seed}", _tags(curve), 3500))
    return out


LIVE = textwrap.dedent("""
    import json, pickle, sys
    import numpy as np
    from analyzers.runstream import feed_run, start_run
    from analyzers.series import TagWrites
    out = []
    for group, name, tags, at in pickle.load(open(sys.argv[1], "rb")):
        state, seen = start_run(), {}
        steps = np.unique(np.concatenate([s for s, _ in tags.values()]))
        for lo, hi in zip(steps[::10], np.append(steps[10::10], steps[-1] + 1)):  # 10 steps' points of every tag
            cut = {t: (s >= lo) & (s < hi) for t, (s, _) in tags.items()}
            new = {t: TagWrites(s[cut[t]], v[cut[t]], np.zeros(int(cut[t].sum()), np.int32)) for t, (s, v) in tags.items() if cut[t].any()}
            state, closed, still = feed_run(state, new)
            for f in closed + still:
                seen[(f.kind.value, f.tag, int(f.start_step))] = max(seen.get((f.kind.value, f.tag, int(f.start_step)), 0), int(f.severity))
        out.append([[k[0], k[1], k[2], severity] for k, severity in seen.items()])
    print(json.dumps(out))
""")


def live(code: Path | None, series: list[Series], tmp: Path) -> list[list[list]]:
    """Each series' alerts ever returned while it is fed 10 steps at a time (kind, tag,
    start step, highest severity), by the code at `code` (None: this checkout)."""
    return in_checkout(code, LIVE, series, tmp)


def live_warnings(series: list[Series], found: list[list[list]]) -> dict[str, int]:
    """Per group: warnings or worse ever shown live on the healthy runs."""
    out: dict[str, int] = {}
    for (group, _, _, at), alerts in zip(series, found):
        if at is None:
            out[group] = out.get(group, 0) + sum(a[3] >= 2 for a in alerts)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--code", type=Path, help="a checkout of the old code (e.g. main), run beside this one")
    args = parser.parse_args()
    series = restart_runs() + lr_bug_runs()
    rows, examples = [], {}
    with tempfile.TemporaryDirectory(prefix="schedules-") as tmp:
        for label, code in ([("old", args.code)] if args.code else []) + [("new", None)]:
            print(f"[schedules] {label}: {len(series)} series", file=sys.stderr, flush=True)
            found = analysed(code, series, Path(tmp))
            print(f"[schedules] {label}: fed 10 steps at a time", file=sys.stderr, flush=True)
            shown = live_warnings(series, live(code, series, Path(tmp)))
            examples[label] = next((f"{s[1]}, {s[0]}: {a[4]}" for s, alerts in zip(series, found) if s[3] is None for a in alerts), None)
            for group, c in tally(series, found).items():
                rows.append([group, label, c["runs"], c["loud runs"], c["alerts"], c["warnings"], shown.get(group, "-"),
                             f"{c['found']}/{c['planted']}"])
    rows.sort(key=lambda r: (r[0], r[1] != "old"))
    print(f"### Healthy runs on warm restarts ({len(series)} series)\n")
    print("| schedule | code | healthy runs | with an alert | alerts (planted spikes apart) | warnings or worse "
          "| warnings or worse ever shown live | planted spikes found |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
    for label, example in examples.items():
        print(f"\n{label}, a first alert on a healthy run: {example or 'none'}")


if __name__ == "__main__":
    main()

"""Spikes told at their onset on coarse logs, live: how they end (issue 10: early, and never
crying wolf).  Every train and eval loss of the labelled corpora (and, with `--wild DIR`,
the public `trainer_state.json` files bench/wild.py reads) is fed to the spike detector 10
steps a feed, as a live run posts it.  A spike on a tag logged so coarsely that its 3rd
point is over `prompt_steps` (50) away is told at its onset as a pending info; this counts
those, by how they end: back (fast or slow: info or a warning), divergent, still open at
the end of the run, or withdrawn (it kept climbing: a trend's, its alert resolved); and
those back fast that were a warning on the way (still above the band at their 2nd point):
the warnings a blip cost.

    .venv/bin/python bench/prompt_spikes.py [--wild /work/wild]

Markdown on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzers.findings import Finding  # noqa: E402
from analyzers.roles import Role, infer_role  # noqa: E402
from analyzers.spikes import LossSpikeDetector  # noqa: E402
from app.ingest.logdir import Run  # noqa: E402
from app.ingest.sources import read_path  # noqa: E402
from bench import corpus as labels  # noqa: E402
from bench.realcurves import read_run  # noqa: E402
from bench.wild import LABELS as WILD_LABELS  # noqa: E402

CHUNK_STEPS = 10
ENDINGS = ("fast_recovering", "slow_recovering", "divergent", "open at the end", "withdrawn", "fast, warned first")


def losses(run: Run) -> Iterator[tuple[str, Role, np.ndarray, np.ndarray]]:
    """Each train or eval loss of a run, by step."""
    p = run.points
    for t, name in enumerate(p.tags):
        role = infer_role(name, run.name)
        if role in (Role.LOSS, Role.EVAL_LOSS):
            mine = p.tag == t
            order = np.argsort(p.step[mine], kind="stable")
            yield name, role, p.step[mine][order], p.value[mine][order]


def endings(tag: str, role: Role, step: np.ndarray, value: np.ndarray) -> Counter:
    """How the spikes first told while still pending info (at their onset) end."""
    detector = LossSpikeDetector(evaluations=role is Role.EVAL_LOSS)
    state = detector.start()
    chunk = step // CHUNK_STEPS
    cuts = np.flatnonzero(np.diff(chunk)) + 1
    prompt: set[int] = set()  # onsets told as a pending info
    warned: set[int] = set()  # and later told as a warning or worse while open
    shown: set[int] = set()
    out: Counter = Counter()
    for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(step)]):
        state, done, still = detector.feed(state, step[a:b], value[a:b], tag)
        prompt |= {f.start_step for f in still if _pending_info(f)}
        warned |= {f.start_step for f in still if f.start_step in prompt and str(f.severity) != "info"}
        final = {f.start_step: f for f in done}
        out.update("withdrawn" for s in shown - {f.start_step for f in still} - set(final) if s in prompt)
        out.update(f.classification.value for s, f in final.items() if s in prompt)
        out.update("fast, warned first" for s, f in final.items() if s in warned and f.classification.value == "fast_recovering")
        shown = {f.start_step for f in still}
    out.update("open at the end" for s in shown if s in prompt)
    return out


def _pending_info(f: Finding) -> bool:
    return f.classification is not None and f.classification.value == "pending" and str(f.severity) == "info"


def labelled_runs() -> Iterator[tuple[str, str, Run]]:
    for path in (labels.LABELS, labels.TRAINED, labels.RECORDS):
        for r in labels.load(path).runs:
            yield path.stem, r.part, read_run(r)


def wild_runs(directory: Path) -> Iterator[tuple[str, str, Run]]:
    for r in json.loads(WILD_LABELS.read_text())["runs"]:
        file = directory / f"{r['run']}.json"
        if file.exists():
            for run in read_path(str(file)).runs.values():
                yield "wild", r["part"], run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wild", type=Path, help="the directory of bench/wild.py's trainer_state.json files")
    args = parser.parse_args()
    counts: dict[tuple[str, str], Counter] = {}
    runs = list(labelled_runs()) + (list(wild_runs(args.wild)) if args.wild else [])
    for i, (corpus, part, run) in enumerate(runs, 1):
        print(f"{i}/{len(runs)} {corpus} {run.name}", file=sys.stderr)
        total = counts.setdefault((corpus, part), Counter())
        for tag, role, step, value in losses(run):
            total.update(endings(tag, role, step, value))
    print("| corpus | part | told at onset | " + " | ".join(ENDINGS) + " |")
    print("|---|---|---|" + "---|" * len(ENDINGS))
    for (corpus, part), c in counts.items():
        told = sum(c[e] for e in ENDINGS[:-1])
        print(f"| {corpus} | {part} | {told} | " + " | ".join(str(c[e]) for e in ENDINGS) + " |")


if __name__ == "__main__":
    main()

"""Public Hugging Face `trainer_state.json` files as users' runs look (issue 10: never cry
wolf): what losswatch warns of on each, against labels made by eye before it ran
(bench/labels/wild_trainer_states.json), old code beside new.

The files are other people's and are not in this repository: each run is named
`<owner>__<repository>` and its file is that repository's `trainer_state.json` at the
`path` and `commit` its label gives, as read on 2026-12-04 and 2026-12-05.  Put them in one
directory under those names.  Each part is scored apart: `tuning` (runs that drove changes,
or were looked at with their alerts) and `untuned` (labelled and committed before losswatch
ever ran on them, and never tuned on; a part with no runs, as between two batches, is not
printed).

    .venv/bin/python bench/wild.py DIR                       # this checkout
    .venv/bin/python bench/wild.py DIR --code /tmp/lw-main   # old beside new

A labelled event is found when an alert of its kind (or an accepted one) on its tag starts
within its tolerance (`bench.corpus.Event.matches`, as for the other corpora); a warning or
worse matching no event, optional ones included, is false.
Markdown on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.corpus import Event, parse_event  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
LABELS = REPO / "bench" / "labels" / "wild_trainer_states.json"
LOUD = ("warning", "critical")


def alerts(code: Path, files: list[Path]) -> list[dict]:
    """Every alert `losswatch analyze` reports on the files, run on the code at `code`."""
    command = [sys.executable, "-c", "from app.cli import main; main()", "analyze", *map(str, files), "--format", "json",
               "--fail-on", "never"]
    out = subprocess.run(command, env={**os.environ, "PYTHONPATH": str(code)}, cwd=code, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["alerts"]


def events(runs: list[dict]) -> dict[str, tuple[Event, ...]]:
    """Each labelled run's events, checked as the other corpora's are."""
    return {r["run"]: tuple(parse_event(r["run"], e, f"{LABELS.name}: {r['run']}.events[{j}]") for j, e in enumerate(r["events"]))
            for r in runs}


def score(runs: list[dict], found: list[dict]) -> dict[str, object]:
    """Labelled events found (and of their own kind), those missed, and the loud alerts no
    event explains."""
    labelled = events(runs)
    by_run: dict[str, list[dict]] = {}
    for a in found:
        by_run.setdefault(a["run"], []).append(a)

    def told(e: Event, own: bool = False) -> bool:
        return any(e.matches(a["kind"], a["tag"], a["start_step"]) and (not own or a["kind"] == e.kind) for a in by_run.get(e.run, []))

    required = [e for evs in labelled.values() for e in evs if not e.optional]
    false = [a for run, evs in labelled.items() for a in by_run.get(run, [])
             if a["severity"] in LOUD and not any(e.matches(a["kind"], a["tag"], a["start_step"]) for e in evs)]
    return {"events": len(required), "found": sum(map(told, required)), "own kind": sum(told(e, own=True) for e in required),
            "false": false, "missed": [e for e in required if not told(e)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path, help="the trainer_state.json files, named <owner>__<repository>.json")
    parser.add_argument("--code", type=Path, help="a checkout of the old code (e.g. main), run beside this one")
    parser.add_argument("--show-untuned", action="store_true", help="also list the untuned part's misses and false warnings (once looked at, tuning on them makes it tuning)")
    args = parser.parse_args()
    runs = json.loads(LABELS.read_text())["runs"]
    files = [args.dir / f"{r['run']}.json" for r in runs]
    missing = [f.name for f in files if not f.exists()]
    if missing:
        sys.exit(f"bench/wild.py: {len(missing)} of the {len(files)} labelled files are not in {args.dir}: {', '.join(missing[:5])}")
    print("| part | code | runs | labelled events | found | of their own kind | false warnings | runs with one |")
    print("|---|---|---|---|---|---|---|---|")
    details = []
    for label, code in ([("old", args.code)] if args.code else []) + [("new", REPO)]:
        print(f"analysing {len(files)} runs with the {label} code ...", file=sys.stderr)
        found = alerts(code, files)
        for part in ("tuning", "untuned"):
            mine = [r for r in runs if r["part"] == part]
            if not mine:
                continue
            s = score(mine, found)
            false = s["false"]
            print(f"| {part} | {label} | {len(mine)} | {s['events']} | {s['found']} | {s['own kind']} | {len(false)} | {len({a['run'] for a in false})} |")
            if part == "tuning" or args.show_untuned:
                details += [f"  {part}, {label}: missed {e.run} {e.tag} {e.kind} @ {e.step}: {e.why}" for e in s["missed"]]
                details += [f"  {part}, {label}: {a['severity']} {a['run']} {a['tag']} {a['kind']} @ {a['start_step']}: {a['message']}" for a in false]
    if details:
        print("\nmisses and false warnings (the untuned part's only with --show-untuned):")
        print("\n".join(details))


if __name__ == "__main__":
    main()

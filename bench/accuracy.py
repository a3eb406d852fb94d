"""Precision and recall of losswatch's detectors on a labelled corpus (generated curves with
planted patterns, tests/curves.py: train losses, and runs with eval losses or not learning) and the classification accuracy of loss spikes, beside the
one-rule detectors other tools ship, on the same curves; then the real sample runs against
what was caused in them (sample_runs/labels.json); then the real public logs labelled in
bench/labels/reference_runs.json and the runs trained for the purpose in
bench/labels/trained_runs.json (bench/trained/), each per kind on the tuning and the held-out part, and
the speedrun records held out whole (bench/labels/speedrun_records.json, bench/records/), beside
OLMo-core's rule and trainspotter, with warnings on clean runs and the time to first alert
in a live replay (bench/replay.py).

    .venv/bin/python bench/accuracy.py                  # everything (a few minutes)
    .venv/bin/python bench/accuracy.py --real-only      # only the labelled real curves
    .venv/bin/python bench/accuracy.py --no-replay      # without the live replay
    .venv/bin/python bench/accuracy.py --show-heldout   # also list held-out misses and false alarms

Markdown tables on stdout, progress on stderr.  Per-event detail (misses, false alarms,
delays) is printed for the tuning and retired parts only: the held-out part is never looked
at while tuning (bench/labels/README.md), so only its totals are shown unless --show-heldout.
trainspotter runs from its own virtualenv (bench/trainspotter_peer.py); without it the
comparison says how to install it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzers.findings import Kind, Severity  # noqa: E402
from app.analysis import analyze  # noqa: E402
from app.ingest.sources import read_path  # noqa: E402
from bench import corpus as labels  # noqa: E402
from bench import realcurves  # noqa: E402
from bench.peers import PEERS  # noqa: E402
from bench.replay import replay_events  # noqa: E402
from tests.curves import SCORED, Score, eval_corpus, labelled_corpus, score, tolerance  # noqa: E402


def peer_score(corpus, rule) -> Score:
    result = Score()
    for curve in corpus:
        interval = int(curve.steps[1] - curve.steps[0])
        found = rule(curve.steps, curve.tags["train/loss"])
        planted = [t.step for t in curve.truth if t.kind is Kind.LOSS_SPIKE]
        tol = tolerance(Kind.LOSS_SPIKE, interval, len(curve.steps))
        used = set()
        for step in planted:
            near = [i for i, f in enumerate(found) if i not in used and abs(f - step) <= tol]
            if near:
                used.add(near[0])
                result.true_positives += 1
            else:
                result.false_negatives += 1
        result.false_positives += len(found) - len(used)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description="Accuracy of losswatch's detectors beside its peers.")
    parser.add_argument("--real-only", action="store_true", help="only the labelled real curves (public logs, trained runs)")
    parser.add_argument("--no-replay", action="store_true", help="skip the live replay (time to first alert)")
    parser.add_argument("--show-heldout", action="store_true", help="also list the held-out part's misses and false alarms")
    args = parser.parse_args()
    if not args.real_only:
        generated()
        sample_runs()
    reference_runs(show_heldout=args.show_heldout, replay=not args.no_replay)
    trained_runs(show_heldout=args.show_heldout, replay=not args.no_replay)
    speedrun_records(show_heldout=args.show_heldout, replay=not args.no_replay)


def generated() -> None:
    corpus = labelled_corpus() + eval_corpus()
    print(f"labelled corpus: {len(corpus)} curves ({sum(not c.truth for c in corpus)} clean), "
          f"{sum(len(c.truth) for c in corpus)} planted events", file=sys.stderr)
    scores, loud_clean = score(corpus)
    print("| detector | kind | planted | found right | false alarms | precision | recall | classified right |")
    print("|---|---|---|---|---|---|---|---|")
    for kind in SCORED:
        s = scores[kind]
        cls = f"{s.classification_accuracy:.3f} ({s.classified_right}/{s.classified})" if s.classified else "-"
        print(f"| losswatch | {kind.value} | {s.true_positives + s.false_negatives} | {s.true_positives} | "
              f"{s.false_positives} | {s.precision:.3f} | {s.recall:.3f} | {cls} |")
    for name, rule in PEERS.items():
        s = peer_score(corpus, rule)
        print(f"| {name} | loss_spike | {s.true_positives + s.false_negatives} | {s.true_positives} | "
              f"{s.false_positives} | {s.precision:.3f} | {s.recall:.3f} | - (no classes) |")
    print(f"\nclean curves with a warning or worse: {len(loud_clean)}")
    for line in loud_clean:
        print("  " + line)


def sample_runs() -> None:
    samples = Path(__file__).resolve().parents[1] / "sample_runs"
    labels = json.loads((samples / "labels.json").read_text())
    alerts = {name: analyze(str(samples), run) for name, run in read_path(str(samples)).runs.items()}
    print("\n| sample run | caused | found | step found | classification |")
    print("|---|---|---|---|---|")
    matched = set()
    for event in labels["events"]:
        hits = [
            a for a in alerts[event["run"]]
            if a.finding.kind.value == event["kind"] and a.finding.tag == event["tag"]
            and abs(a.finding.start_step - event["step"]) <= event["tolerance"]
        ]
        matched.update(a.id for a in hits[:1])
        f = hits[0].finding if hits else None
        caused = event.get("classification", "-")
        cls = f"{f.classification.value} (caused: {caused})" if f and f.classification else "-"
        print(f"| {event['run']} | {event['kind']} {event['tag']} @ {event['step']} | {'yes' if f else 'NO'} | "
              f"{f.start_step if f else '-'} | {cls} |")
    extra = [a for run in alerts.values() for a in run if a.id not in matched and a.finding.severity >= Severity.WARNING]
    print(f"\nwarnings or worse not among the caused patterns: {len(extra)}")
    for a in extra:
        print(f"  {a.run}: {a.finding.message}")


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def reference_runs(show_heldout: bool, replay: bool) -> None:
    corpus = labels.load()
    if not (corpus.shared_root / "reference-runs").is_dir():
        print(f"\nreal public logs: not found under {corpus.shared_root} (shared/ is laid beside the repo)")
        return
    real_corpus("Real public logs (bench/labels/reference_runs.json)", corpus, show_heldout, replay)


def trained_runs(show_heldout: bool, replay: bool) -> None:
    real_corpus("Runs trained for the purpose (bench/labels/trained_runs.json)", labels.load(labels.TRAINED), show_heldout, replay)


def speedrun_records(show_heldout: bool, replay: bool) -> None:
    real_corpus("Speedrun records, held out whole (bench/labels/speedrun_records.json)", labels.load(labels.RECORDS),
                show_heldout, replay)


def real_corpus(title: str, corpus: labels.Corpus, show_heldout: bool, replay: bool) -> None:
    """Score losswatch and its peers on one labelled corpus of real curves, per part."""
    started = time.monotonic()
    progress(f"{title}: {len(corpus.runs)} labelled runs under {corpus.shared_root}")
    flags = {"losswatch": {}, "OLMo-core 6 sigma/128": {}}
    for run in corpus.runs:
        realcurves.read_run(run)
        flags["losswatch"][run] = realcurves.losswatch_flags(run)
        flags["OLMo-core 6 sigma/128"][run] = realcurves.olmo_flags(run)
    progress(f"  read and analysed in {time.monotonic() - started:.0f} s")
    missing = realcurves.trainspotter_missing()
    if missing is None:
        progress("  trainspotter ...")
        flags["trainspotter 0.2.6"] = realcurves.trainspotter_flags(corpus)
    outcomes = {name: {run: realcurves.match(run, f[run]) for run in corpus.runs} for name, f in flags.items()}

    print(f"\n## {title}\n")
    for part in _parts(corpus):
        runs = corpus.part(part)
        print(f"{part}: {len(runs)} runs, {sum(len(r.required) for r in runs)} required events, "
              f"{sum(len(r.events) - len(r.required) for r in runs)} optional")
    print("\n| detector | part | kind | labelled | found | recall | flags | false | precision | spike class right |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, per_run in outcomes.items():
        for part in _parts(corpus):
            runs = corpus.part(part)
            scores = realcurves.score(runs, per_run)
            for kind, k in [*scores.items(), ("all", realcurves.totals(scores))]:
                print(f"| {name} | {part} | {kind} | {k.labelled} | {k.found} | {k.recall()} | {k.flags} | {k.false} | "
                      f"{k.precision()} | {k.classes()} |")
    if missing:
        print(f"\n{missing}")

    print("\n| detector | part | clean runs | false warnings on clean runs | false warnings in clean spans | false warnings in all | duplicates |")
    print("|---|---|---|---|---|---|---|")
    for name, per_run in outcomes.items():
        for part in _parts(corpus):
            runs = corpus.part(part)
            clean_runs = [r for r in runs if not r.required]
            on_clean = sum(len(realcurves.loud(per_run[r])) for r in clean_runs)
            in_spans = sum(1 for r in runs for f in realcurves.loud(per_run[r]) if any(s.covers(f.tag, f.start_step) for s in r.clean))
            anywhere = sum(len(realcurves.loud(per_run[r])) for r in runs)
            dups = sum(len(per_run[r].duplicates) for r in runs)
            print(f"| {name} | {part} | {len(clean_runs)} | {on_clean} | {in_spans} | {anywhere} | {dups} |")

    for part in _parts(corpus):
        if part == "heldout" and not show_heldout:
            print("\nheld-out misses and false alarms: not listed (never looked at while tuning; --show-heldout lists them)")
            continue
        details(part, corpus.part(part), outcomes["losswatch"])

    if replay:
        time_to_alert(corpus, show_heldout)
    progress(f"{title}: done in {time.monotonic() - started:.0f} s")


def details(part: str, runs: tuple, outcomes: dict) -> None:
    print(f"\nlosswatch on the {part} part, misses:")
    for run in runs:
        o = outcomes[run]
        for e in o.missed:
            print(f"  {run.run} {e.tag} {e.kind} @ {e.step}: {e.why}")
        for e, f in o.found.items():
            if e.kind == "loss_spike" and f.kind == "loss_spike" and not e.class_right(f.classification):
                print(f"  {run.run} {e.tag} @ {e.step}: found as {f.classification}, labelled {e.classification}")
    print(f"\nlosswatch on the {part} part, false alarms (severity, run, tag, kind, step: message):")
    for run in runs:
        for f in outcomes[run].false:
            print(f"  {f.severity} {run.run} {f.tag} {f.kind} @ {f.start_step}: {f.message}")


def time_to_alert(corpus, show_heldout: bool) -> None:
    started = time.monotonic()
    todo = [(realcurves.read_run(run), event) for run in corpus.runs for event in run.required]
    progress(f"live replay of {len(todo)} events, 10 steps per request ...")
    timings = replay_events(todo, progress)
    part_of = {(r.run, e): r.part for r in corpus.runs for e in r.required}
    print("\n## Time to first alert, live (chunks of 10 steps)\n")
    print("Steps from the labelled onset to the first response carrying a matching alert change "
          "(firing, updated or pending), and the points the event's tag logged from its onset to then; "
          "then the steps to the first such change at warning or worse (what a receiver hears by default), "
          "for the events that reached one (a fast-recovering spike rightly stays info).\n")
    print("| part | kind | events | told | median steps | worst steps | median points | worst points | never told "
          "| warned | median steps to a warning | worst |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for part in _parts(corpus):
        mine = [t for t in timings if part_of[(t.event.run, t.event)] == part]
        for kind in sorted({t.event.kind for t in mine}):
            ts = [t for t in mine if t.event.kind == kind]
            told = [t.delay for t in ts if t.delay is not None]
            points = [t.told_points for t in ts if t.told_points is not None]
            warned = [t.warning_delay for t in ts if t.warning_delay is not None]
            print(f"| {part} | {kind} | {len(ts)} | {len(told)} | {_median(told)} | {max(told) if told else '-'} | "
                  f"{_median(points)} | {max(points) if points else '-'} | {len(ts) - len(told)} | "
                  f"{len(warned)} | {_median(warned)} | {max(warned) if warned else '-'} |")
    for part in _parts(corpus):
        if part == "heldout" and not show_heldout:
            continue
        print(f"\nper event, {part} part (run tag kind @ onset: told after steps, points; a warning after steps):")
        for t in timings:
            if part_of[(t.event.run, t.event)] == part:
                print(f"  {t.event.run} {t.event.tag} {t.event.kind} @ {t.event.step}: "
                      f"{'never' if t.delay is None else t.delay}, {'-' if t.told_points is None else t.told_points}; "
                      f"{'-' if t.warning_delay is None else t.warning_delay}")
    progress(f"  replay done in {time.monotonic() - started:.0f} s")


def _parts(corpus: labels.Corpus) -> list[str]:
    """The parts that hold runs (the public logs' held-out part and the trained runs' first
    one are retired; the speedrun records are held out whole)."""
    return [part for part in labels.PARTS if corpus.part(part)]


def _median(values: list[int]) -> str:
    return f"{statistics.median(values):g}" if values else "-"


if __name__ == "__main__":
    main()

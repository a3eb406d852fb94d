"""Precision and recall of losswatch's detectors on a labelled corpus (generated curves with
planted patterns, tests/curves.py: train losses, and runs with eval losses or not learning) and the classification accuracy of loss spikes, beside the
one-rule detectors other tools ship, on the same curves; then the real sample runs against
what was caused in them (sample_runs/labels.json).

    .venv/bin/python bench/accuracy.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzers.findings import Kind, Severity  # noqa: E402
from app.analysis import analyze  # noqa: E402
from app.ingest.sources import read_path  # noqa: E402
from bench.peers import PEERS  # noqa: E402
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
    sample_runs()


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
        cls = f"{f.classification.value} (caused: {event['classification']})" if f and f.classification else "-"
        print(f"| {event['run']} | {event['kind']} {event['tag']} @ {event['step']} | {'yes' if f else 'NO'} | "
              f"{f.start_step if f else '-'} | {cls} |")
    extra = [a for run in alerts.values() for a in run if a.id not in matched and a.finding.severity >= Severity.WARNING]
    print(f"\nwarnings or worse not among the caused patterns: {len(extra)}")
    for a in extra:
        print(f"  {a.run}: {a.finding.message}")


if __name__ == "__main__":
    main()

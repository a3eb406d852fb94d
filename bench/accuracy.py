"""Precision and recall of losswatch's detectors on a labelled corpus (generated curves with
planted patterns, tests/curves.py) and the classification accuracy of loss spikes, beside the
one-rule detectors other tools ship, on the same curves.

    .venv/bin/python bench/accuracy.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzers.findings import Kind  # noqa: E402
from bench.peers import PEERS  # noqa: E402
from tests.curves import SCORED, Score, labelled_corpus, score, tolerance  # noqa: E402


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
    corpus = labelled_corpus()
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


if __name__ == "__main__":
    main()

"""Scoring detectors on the labelled real logs (bench/labels/reference_runs.json): what each
detector flags on a run, reduced to one shape, matched event by event against the labels.

Matching: each required event takes the nearest unused flag of its kind (or an accepted
kind) on its tag whose start lies within the event's tolerance.  A flag left over is a
duplicate when it matches a required event already found, is ignored when it matches an
optional event, and is a false alarm otherwise.  Precision is per flagged kind (true flags
/ flags, duplicates and optional hits left out), recall per labelled kind (events found /
required events); spike class right counts found spikes flagged as loss spikes with a class
(the peers give none)."""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np

from analyzers.roles import Role, infer_role
from app.analysis import analyze
from app.ingest.logdir import Run
from app.ingest.sources import read_path
from bench.corpus import Corpus, Event, LabelledRun
from bench.peers import olmo

SEVERITIES = {"info": 1, "warning": 2, "critical": 3}


@dataclass(frozen=True)
class Flag:
    """Something a detector told about one tag of one run."""

    kind: str
    tag: str
    start_step: int
    severity: str  # info, warning or critical
    classification: str | None = None
    message: str = ""


@dataclass
class Outcome:
    """How one run's flags met its labels."""

    found: dict[Event, Flag] = field(default_factory=dict)
    missed: list[Event] = field(default_factory=list)
    false: list[Flag] = field(default_factory=list)
    duplicates: list[Flag] = field(default_factory=list)
    optional: list[Flag] = field(default_factory=list)


def match(run: LabelledRun, flags: list[Flag]) -> Outcome:
    outcome = Outcome()
    free = list(flags)
    for event in sorted(run.required, key=lambda e: e.step):
        near = [f for f in free if event.matches(f.kind, f.tag, f.start_step)]
        if near:
            best = min(near, key=lambda f: (f.kind != event.kind, abs(f.start_step - event.step)))
            outcome.found[event] = best
            free.remove(best)
        else:
            outcome.missed.append(event)
    for f in free:
        if any(e.matches(f.kind, f.tag, f.start_step) for e in run.required):
            outcome.duplicates.append(f)
        elif any(e.matches(f.kind, f.tag, f.start_step) for e in run.events if e.optional):
            outcome.optional.append(f)
        else:
            outcome.false.append(f)
    return outcome


@dataclass
class KindScore:
    labelled: int = 0
    found: int = 0
    flags: int = 0
    false: int = 0
    classified: int = 0
    classified_right: int = 0

    def precision(self) -> str:
        return f"{(self.flags - self.false) / self.flags:.2f}" if self.flags else "-"

    def recall(self) -> str:
        return f"{self.found / self.labelled:.2f}" if self.labelled else "-"

    def classes(self) -> str:
        return f"{self.classified_right}/{self.classified}" if self.classified else "-"


def score(runs: tuple[LabelledRun, ...], outcomes: dict[LabelledRun, Outcome]) -> dict[str, KindScore]:
    kinds: dict[str, KindScore] = {}
    for run in runs:
        o = outcomes[run]
        for event in run.required:
            k = kinds.setdefault(event.kind, KindScore())
            k.labelled += 1
            if event in o.found:
                k.found += 1
                f = o.found[event]
                if event.kind == "loss_spike" and f.kind == "loss_spike" and f.classification and event.classification:
                    k.classified += 1
                    k.classified_right += event.class_right(f.classification)
        for f in o.found.values():
            kinds.setdefault(f.kind, KindScore()).flags += 1
        for f in o.false:
            k = kinds.setdefault(f.kind, KindScore())
            k.flags += 1
            k.false += 1
    return dict(sorted(kinds.items()))


def totals(scores: dict[str, KindScore]) -> KindScore:
    t = KindScore()
    for k in scores.values():
        for name in ("labelled", "found", "flags", "false", "classified", "classified_right"):
            setattr(t, name, getattr(t, name) + getattr(k, name))
    return t


# -- reading the labelled runs ---------------------------------------------------------------


@cache
def _read(path: str) -> dict[str, Run]:
    return read_path(path).runs


def read_run(run: LabelledRun) -> Run:
    return _read(str(run.location))[run.run]


# -- the detectors, reduced to flags ---------------------------------------------------------


def losswatch_flags(run: LabelledRun) -> list[Flag]:
    """What `losswatch analyze` reports on the run."""
    return [
        Flag(a.finding.kind.value, a.finding.tag, a.finding.start_step, str(a.finding.severity),
             a.finding.classification.value if a.finding.classification else None, a.finding.message)
        for a in analyze(str(run.location), read_run(run))
    ]


def olmo_flags(run: LabelledRun) -> list[Flag]:
    """OLMo-core's stability rule (mean + 6 sigma of the previous 128 values) on each loss,
    eval-loss and grad-norm tag, as losswatch assigns roles.  It skips the step silently;
    each onset counts as a warning."""
    p = read_run(run).points
    flags = []
    for i, tag in enumerate(p.tags):
        role = infer_role(tag)
        kind = {Role.LOSS: "loss_spike", Role.EVAL_LOSS: "loss_spike", Role.GRAD_NORM: "grad_norm_explosion"}.get(role)
        if kind is None:
            continue
        mine = p.tag == i
        order = np.argsort(p.step[mine], kind="stable")
        steps, values = p.step[mine][order], p.value[mine][order]
        flags += [Flag(kind, tag, int(s), "warning") for s in olmo(steps, values)]
    return flags


TRAINSPOTTER_KINDS = {"spikes": "loss_spike", "overfitting": "overfitting", "plateau": "plateau"}
SPLITS = {"train", "training", "validation", "val", "valid", "eval", "test"}
INSTALL = "python3 -m venv /work/scratch-venv && /work/scratch-venv/bin/pip install trainspotter==0.2.6"


def trainspotter_python() -> str:
    return os.environ.get("TRAINSPOTTER_PYTHON", "/work/scratch-venv/bin/python")


def trainspotter_missing() -> str | None:
    """Why trainspotter cannot be compared here, or None when it can."""
    python = trainspotter_python()
    if not Path(python).exists():
        return f"trainspotter: not installed: install it with `{INSTALL}` (or set TRAINSPOTTER_PYTHON) to compare"
    probe = subprocess.run([python, "-c", "import trainspotter"], capture_output=True, text=True, timeout=60)
    if probe.returncode:
        return f"trainspotter: not installed in {python}: install it with `{INSTALL}` to compare"
    return None


def trainspotter_flags(corpus: Corpus) -> dict[LabelledRun, list[Flag]]:
    """trainspotter's findings on every labelled run, from one subprocess.  The split runs of
    a Keras logdir (`.../train`, `.../validation`) go in as one run, as its own TensorBoard
    reader reads them."""
    groups: dict[str, dict[str, tuple[LabelledRun, str, list]]] = {}
    for run in corpus.runs:
        parent, _, split = run.run.rpartition("/")
        key = f"{run.path}::{parent}" if split in SPLITS else f"{run.path}::{run.run}"
        p = read_run(run).points
        for i, tag in enumerate(p.tags):
            column = f"{split}/{tag}" if split in SPLITS else tag
            mine = p.tag == i
            points = [[int(s), _json_value(v)] for s, v in zip(p.step[mine], p.value[mine])]
            groups.setdefault(key, {})[column] = (run, tag, points)
    request = [{"key": k, "columns": {c: pts for c, (_, _, pts) in cols.items()}} for k, cols in groups.items()]
    done = subprocess.run(
        [trainspotter_python(), str(Path(__file__).with_name("trainspotter_peer.py"))],
        input=json.dumps(request), capture_output=True, text=True, timeout=1800, check=True,
    )
    flags: dict[LabelledRun, list[Flag]] = {run: [] for run in corpus.runs}
    for result in json.loads(done.stdout):
        columns = groups[result["key"]]
        for f in result["findings"]:
            run, tag, _ = columns[f["column"]]
            flags[run].append(Flag(_trainspotter_kind(f), tag, f["step_start"],
                                   {"error": "critical"}.get(f["severity"], f["severity"]), None, f["title"]))
    return flags


def _trainspotter_kind(finding: dict) -> str:
    if finding["detector"] == "divergence":
        return "nonfinite" if "non-finite" in finding["title"] else "divergence"
    if finding["detector"] == "grad_norm":
        return "grad_norm_explosion" if "explosion" in finding["title"] else "grad_norm_saturation"
    return TRAINSPOTTER_KINDS.get(finding["detector"], finding["detector"])


def _json_value(v: float) -> float | str:
    return v if np.isfinite(v) else ("NaN" if np.isnan(v) else ("Infinity" if v > 0 else "-Infinity"))


def loud(outcome: Outcome) -> list[Flag]:
    """False alarms at warning or worse."""
    return [f for f in outcome.false if SEVERITIES.get(f.severity, 2) >= 2]


def severity_counts(flags: list[Flag]) -> str:
    c = Counter(f.severity for f in flags)
    return ", ".join(f"{c[s]} {s}" for s in ("critical", "warning", "info") if c[s]) or "none"

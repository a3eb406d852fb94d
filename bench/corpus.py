"""The labelled corpora of real curves: the public logs (bench/labels/reference_runs.json),
the runs trained here for the purpose (bench/labels/trained_runs.json) and the speedrun
records held out whole (bench/labels/speedrun_records.json).  What a person
sees on each curve, as data, and the rule for matching an alert to it.

Loaded by bench/accuracy.py (which scores losswatch and its peers on it) and by
tests/test_labels.py (which keeps the file well-formed).  Labels are never derived from
what a detector reports: see bench/labels/README.md for how they were made."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
LABELS = REPO / "bench" / "labels" / "reference_runs.json"
TRAINED = REPO / "bench" / "labels" / "trained_runs.json"
RECORDS = REPO / "bench" / "labels" / "speedrun_records.json"

KINDS = frozenset({
    "loss_spike", "grad_norm_explosion", "nonfinite", "divergence", "overfitting",
    "plateau", "loss_scale_collapse", "restart", "grad_norm_stuck",
})
SPIKE_CLASSES = frozenset({"fast_recovering", "slow_recovering", "divergent"})
PARTS = ("tuning", "retired", "heldout")  # retired: held out until its misses were looked at (labels/README.md)


class LabelError(Exception):
    """The label file is not what this module expects; says where."""


@dataclass(frozen=True)
class Event:
    """One thing on a curve a person would want to be told about.  An alert matches it when
    it is of `kind` (or one of `accept_kinds`) on `tag` and starts within `tolerance` steps
    of `step`.  An optional event is one a person would not mind being told about but
    would not miss either: an alert on it is neither credited nor counted as false."""

    run: str
    tag: str
    kind: str
    step: int
    tolerance: int
    why: str
    classification: str | None = None
    accept_classes: tuple[str, ...] = ()
    accept_kinds: tuple[str, ...] = ()
    optional: bool = False

    def matches(self, kind: str, tag: str, start_step: int) -> bool:
        """A finding about the whole run (tag `*`: a restart rewinds every tag) matches an
        event on any of its tags."""
        return (
            (kind == self.kind or kind in self.accept_kinds) and tag in (self.tag, "*")
            and abs(start_step - self.step) <= self.tolerance
        )

    def class_right(self, classification: str | None) -> bool:
        return classification == self.classification or classification in self.accept_classes


@dataclass(frozen=True)
class Span:
    """A stretch of one tag judged clean: nothing there deserves a warning."""

    tag: str
    start: int | None
    end: int | None
    why: str

    def covers(self, tag: str, step: int) -> bool:
        return tag == self.tag and (self.start is None or step >= self.start) and (self.end is None or step <= self.end)


@dataclass(frozen=True)
class LabelledRun:
    run: str
    path: str  # relative to the corpus root
    family: str
    part: str
    about: str
    events: tuple[Event, ...]
    clean: tuple[Span, ...]
    location: Path  # the path resolved against the corpus root

    @property
    def required(self) -> tuple[Event, ...]:
        return tuple(e for e in self.events if not e.optional)


@dataclass(frozen=True)
class Corpus:
    shared_root: Path
    runs: tuple[LabelledRun, ...]

    def part(self, name: str) -> tuple[LabelledRun, ...]:
        return tuple(r for r in self.runs if r.part == name)


def load(path: Path = LABELS) -> Corpus:
    """Parse a label file; its root (`shared_root`) is resolved against the repository."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise LabelError(f"{path}: {e}") from e
    root = (REPO / data["shared_root"]).resolve()
    return Corpus(root, tuple(_run(r, i, path, root) for i, r in enumerate(data["runs"])))


def _run(raw: dict[str, Any], index: int, path: Path, root: Path) -> LabelledRun:
    where = f"{path.name}: runs[{index}] ({raw.get('run')!r})"
    try:
        events = tuple(parse_event(raw["run"], e, f"{where}.events[{j}]") for j, e in enumerate(raw["events"]))
        clean = tuple(Span(c["tag"], c.get("from"), c.get("to"), c["why"]) for c in raw["clean"])
        run = LabelledRun(raw["run"], raw["path"], raw["family"], raw["part"], raw["about"], events, clean, root / raw["path"])
    except KeyError as e:
        raise LabelError(f"{where}: missing {e.args[0]!r}") from e
    if run.part not in PARTS:
        raise LabelError(f"{where}: part {run.part!r} is not one of {PARTS}")
    return run


def parse_event(run: str, raw: dict[str, Any], where: str) -> Event:
    """One labelled event, checked: LabelError, saying where, for an unknown kind or class."""
    event = Event(
        run, raw["tag"], raw["kind"], raw["step"], raw["tolerance"], raw["why"], raw.get("classification"),
        tuple(raw.get("accept_classes", ())), tuple(raw.get("accept_kinds", ())), bool(raw.get("optional", False)),
    )
    bad_kinds = {event.kind, *event.accept_kinds} - KINDS
    if bad_kinds:
        raise LabelError(f"{where}: unknown kind {sorted(bad_kinds)}")
    classes = {c for c in (event.classification, *event.accept_classes) if c is not None}
    if classes - SPIKE_CLASSES:
        raise LabelError(f"{where}: unknown spike class {sorted(classes - SPIKE_CLASSES)}")
    if event.kind == "loss_spike" and not event.optional and event.classification is None:
        raise LabelError(f"{where}: a required loss_spike needs its classification")
    if not isinstance(event.step, int) or not isinstance(event.tolerance, int) or event.tolerance < 0:
        raise LabelError(f"{where}: step and tolerance must be integers, tolerance >= 0")
    if not event.why.strip():
        raise LabelError(f"{where}: say why")
    return event

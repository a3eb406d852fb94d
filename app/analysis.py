"""The bridge from what the reader returns to what the analyzers take, and from findings
to alerts: a finding placed in its run, with a stable identity."""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from analyzers.analyze import analyze_run
from analyzers.config import AnalysisConfig
from analyzers.findings import Finding, Kind
from analyzers.health import RunHealth, run_health
from analyzers.runstream import NeedsReplay, RunState, config_key, feed_run, start_run
from analyzers.runstream import run_health as stream_health
from analyzers.series import Resume, TagWrites, prepare_run
from app.ingest.logdir import Run
from app.ingest.points import Points
from app.ingest.problems import Problem
from app.ingest.streamed import Batch, StreamSource

log = logging.getLogger("losswatch.analysis")


class AnalysisFailed(Exception):
    """A detector raised on one run's data.  Caught at the run boundary, so one run's bad
    data (or a detector bug it triggers) never stops the analysis of any other run; the
    message names the run and the error, and the traceback goes to the log."""

    def __init__(self, source: str, run: str, error: BaseException) -> None:
        self.source, self.run = source, run
        self.reason = f"{type(error).__name__}: {error}"
        super().__init__(f"run {run!r} ({source}): analysis failed: {self.reason}")


@dataclass(frozen=True)
class Alert:
    """A finding of one run.  `id` is the same for the same incident on every analysis:
    a fingerprint of run, tag, kind and onset step."""

    id: str
    source: str  # the path the run was found under
    run: str
    finding: Finding

    def to_dict(self) -> dict[str, Any]:
        f = self.finding
        return {
            "id": self.id,
            "source": self.source,
            "run": self.run,
            "tag": f.tag,
            "kind": f.kind.value,
            "classification": f.classification.value if f.classification else None,
            "severity": str(f.severity),
            "start_step": f.start_step,
            "peak_step": f.peak_step,
            "end_step": f.end_step,
            "recovery_steps": f.recovery_steps,
            "peak_value": _number(f.peak_value),
            "baseline": _number(f.baseline),
            "ratio": _number(f.ratio),
            "message": f.message,
            "remediation": f.remediation,
            "evidence": {k: _number(v) if isinstance(v, float) else v for k, v in f.evidence.items()},
        }


# Patterns whose onset moves as data arrives: it is not part of their identity (one of each
# per tag at a time).  Divergence, plateau and overfitting keep the onset they opened with.
_ONSET_FREE = {Kind.LOSS_SCALE_COLLAPSE.value}


def fingerprint(source: str, run: str, tag: str, kind: str, start_step: int) -> str:
    """The alert's identity: the same incident gets the same id on every analysis."""
    onset = "" if kind in _ONSET_FREE else str(start_step)
    key = "\x1f".join((source, run, tag, kind, onset))
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def tag_writes(run: Run) -> dict[str, TagWrites]:
    """A read run's points, split per tag, in write order."""
    return split_writes(run.points, run.segment)


def analyze(source: str, run: Run, config: AnalysisConfig = AnalysisConfig()) -> list[Alert]:
    """Alerts of a run just read."""
    return assess_run(source, run, config)[0]


def assess_run(source: str, run: Run, config: AnalysisConfig = AnalysisConfig()) -> tuple[list[Alert], RunHealth]:
    """Alerts and health of a run just read."""
    resumes = tuple(Resume(r.from_step, r.to_step, r.segment, r.wall_time, r.tags) for r in run.rollbacks)
    return assess_writes(source, run.name, tag_writes(run), resumes, config)


def analyze_writes(
    source: str,
    run: str,
    writes: dict[str, TagWrites],
    resumes: tuple[Resume, ...],
    config: AnalysisConfig = AnalysisConfig(),
) -> list[Alert]:
    """Alerts of a run given as every write of each tag (as the store holds them).
    Raises AnalysisFailed, never anything else, when the detectors fail on it."""
    return assess_writes(source, run, writes, resumes, config)[0]


def assess_writes(
    source: str,
    run: str,
    writes: dict[str, TagWrites],
    resumes: tuple[Resume, ...],
    config: AnalysisConfig = AnalysisConfig(),
) -> tuple[list[Alert], RunHealth]:
    """Alerts and health of a run given as every write of each tag.  Raises
    AnalysisFailed, never anything else, when the detectors fail on it.  The run is
    analysed with its own settings: `config`'s overrides that match it applied."""
    config = config.for_run(source, run)
    try:
        prepared = prepare_run(writes, resumes, config.roles, run, config.running_mean)
        findings = analyze_run(prepared, config)
        health = run_health(prepared, findings, config.plateau, config.health)
    except Exception as e:  # the boundary of pure analyzer code: no I/O or store state in here
        log.exception("analysis failed", extra={"source": source, "run": run})
        raise AnalysisFailed(source, run, e) from e
    alerts = [Alert(fingerprint(source, run, f.tag, f.kind.value, f.start_step), source, run, f) for f in findings]
    return alerts, health


def _number(x: float | None) -> float | None:
    return x if x is None or math.isfinite(x) else None


# -- a path analysed as it is read ------------------------------------------------------

MAX_CHECKPOINTS = 24  # saved states a rollback can replay from; older ones are thinned out


@dataclass(frozen=True)
class RunAssessed:
    """One run of a streamed source, analysed: what `losswatch analyze` prints of it."""

    name: str
    alerts: list[Alert]
    health: RunHealth | None  # None when the analysis failed (`error`)
    points: int
    tags: list[str]  # the tags with points, in order of first appearance
    rollbacks: int
    error: AnalysisFailed | None = None


def assess_source(
    path: str, source: StreamSource, config: AnalysisConfig = AnalysisConfig(),
    report: Callable[[list[Problem]], None] = lambda _problems: None,
) -> list[RunAssessed]:
    """Every run of a source, analysed as its batches are read: memory follows a batch and
    the streaming state (`analyzers.runstream`), never the run, and the findings are those
    of `assess_run` on the whole run (tests/test_stream_analyze.py).  A rollback that
    rewrites steps already fed reads the source again and replays from a saved state that
    had not reached them.  Problems go to `report` as they are found."""
    feeds: dict[str, _RunFeed] = {}
    for index, batch in enumerate(source.batches()):
        report(batch.problems)
        if len(batch.points):
            feed = feeds.get(batch.run)
            if feed is None:
                feed = feeds[batch.run] = _RunFeed(source, batch.run, config.for_run(path, source.name(batch.run, [batch.run])))
            feed.add(batch, index)
    assessed = []
    for run, feed in feeds.items():
        name = source.name(run, list(feeds))
        own = config.for_run(path, name)
        if config_key(own) != config_key(feed.config):  # an override matches only its final name
            feed = _RunFeed(source, run, own)
            for index, batch in _batches_of(source, run, None):
                feed.add(batch, index)
        assessed.append(feed.result(path, name))
    return assessed


def _batches_of(source: StreamSource, run: str, upto: int | None) -> Iterator[tuple[int, Batch]]:
    """The batches of `run` read again, with their index in the source, up to `upto`."""
    for index, batch in enumerate(source.batches()):
        if upto is not None and index > upto:
            return
        if batch.run == run and len(batch.points):
            yield index, batch


@dataclass
class _Checkpoint:
    state: RunState
    closed: int  # findings returned as final before it
    segment: int  # the highest segment fed before it


class _RunFeed:
    """One run's streaming analysis: the state, the findings final so far, and saved
    states to replay from."""

    def __init__(self, source: StreamSource, run: str, config: AnalysisConfig) -> None:
        self.source, self.run, self.config = source, run, config
        self.state = start_run()
        self.closed: list[Finding] = []
        self.open: list[Finding] = []
        self.resumes: list[Resume] = []
        self.segment = 0  # the highest segment fed
        self.carry: dict[str, TagWrites] = {}  # each tag's writes at its last step, held for the next feed
        self.checkpoints = [_Checkpoint(self.state, 0, 0)]
        self.points, self.rollbacks = 0, 0
        self.tags: dict[str, None] = {}
        self.failure: Exception | None = None

    def add(self, batch: Batch, index: int) -> None:
        """Feed the source's batch `index`; on a rollback into steps fed, replay."""
        if self.failure is not None:
            return
        self.points += len(batch.points)
        self.rollbacks += len(batch.rollbacks)
        counts = np.bincount(batch.points.tag, minlength=len(batch.points.tags))
        self.tags.update((batch.points.tags[i], None) for i in np.flatnonzero(counts))
        try:
            self._take(batch, None)
        except NeedsReplay as e:
            self._replay(e.rewrites, index, e.at_once)
        except Exception as e:  # the boundary of pure analyzer code, as in `assess_writes`
            self._fail(e)

    def result(self, path: str, name: str) -> RunAssessed:
        if self.failure is None and self.carry:
            try:
                self._feed({}, final=True)
            except Exception as e:  # one run's bad data (or a detector bug) stops only its analysis
                self._fail(e)
        if self.failure is not None:
            error = AnalysisFailed(path, name, self.failure)
            error.__cause__ = self.failure
            return RunAssessed(name, [], None, self.points, list(self.tags), self.rollbacks, error)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            health = stream_health(self.state, self.open, self.config)
        findings = sorted(self.closed + self.open, key=lambda f: (f.start_step, f.kind.value, f.tag))
        alerts = [Alert(fingerprint(path, name, f.tag, f.kind.value, f.start_step), path, name, f) for f in findings]
        return RunAssessed(name, alerts, health, self.points, list(self.tags), self.rollbacks)

    def _fail(self, e: Exception) -> None:
        log.exception("analysis failed", extra={"run": self.run})
        self.failure = e

    def _take(self, batch: Batch, after: dict[str, int] | None) -> None:
        """Feed a batch's writes (in a replay, only those past `after`'s step of their tag:
        the resumes are all known then)."""
        writes = split_writes(batch.points, batch.segment)
        if after is None:
            self.resumes += [Resume(r.from_step, r.to_step, r.segment, r.wall_time, r.tags) for r in batch.rollbacks]
        else:
            writes = {tag: _past(w, after.get(tag, -1)) for tag, w in writes.items()}
        self._feed(writes, final=False, ahead=after is not None)

    def _take_all(self, batches: Iterable[Batch], after: dict[str, int]) -> None:
        """Feed the writes of batches read again past `after`'s step of their tag, at once
        (each batch's points let go once split)."""
        parts: dict[str, list[TagWrites]] = {}
        for batch in batches:
            for tag, w in split_writes(batch.points, batch.segment).items():
                parts.setdefault(tag, []).append(_past(w, after.get(tag, -1)))
        self._feed({tag: _joined(*ws) for tag, ws in parts.items()}, final=False, ahead=True)

    def _feed(self, writes: dict[str, TagWrites], final: bool, ahead: bool = False) -> None:
        """Feed writes with the resumes of the segments fed so far (`ahead`: every resume
        known, so that a replay hides the rewritten steps as a one-shot analysis does)."""
        for tag, held in self.carry.items():
            writes[tag] = _joined(held, writes[tag]) if tag in writes else held
        self.carry = {} if final else _hold_last_steps(writes)
        writes = {tag: w for tag, w in writes.items() if len(w.step)}
        if not writes:
            return
        segment = max(self.segment, *(int(w.segment.max()) for w in writes.values()))
        known = tuple(r for r in self.resumes if ahead or r.segment <= segment)
        state, closed, open_ = feed_run(self.state, writes, known, self.config, self.run)
        self.state, self.open, self.segment = state, open_, segment
        self.closed += closed
        self._checkpoint()

    def _checkpoint(self) -> None:
        self.checkpoints.append(_Checkpoint(self.state, len(self.closed), self.segment))
        if len(self.checkpoints) > MAX_CHECKPOINTS:  # keep the first and the newest, thin the rest
            old = self.checkpoints[1:-MAX_CHECKPOINTS // 3]
            self.checkpoints[1:-MAX_CHECKPOINTS // 3] = old[1::2]

    def _replay(self, rewrites: dict[str, int], index: int, at_once: bool) -> None:
        """Feed every batch up to `index` again from the newest saved state that had not
        reached the rewritten steps (an older rollback may call for an older one); batch by
        batch, or in one feed when a replay asks for it (`NeedsReplay.at_once`)."""
        while True:
            while not all(t not in (s := self.checkpoints[-1].state).tags or s.tags[t].fed < at for t, at in rewrites.items()):
                self.checkpoints.pop()
            base = self.checkpoints[-1]
            self.state, self.closed, self.segment = base.state, self.closed[: base.closed], base.segment
            self.carry, self.open = {}, []
            after = base.state.fed()
            try:
                batches = (batch for _, batch in _batches_of(self.source, self.run, index))
                if at_once:
                    self._take_all(batches, after)
                else:
                    for batch in batches:
                        self._take(batch, after)
                return
            except NeedsReplay as e:
                for tag, at in e.rewrites.items():
                    rewrites[tag] = min(rewrites.get(tag, at), at)
                at_once = at_once or e.at_once
            except Exception as e:
                self._fail(e)
                return


def split_writes(points: Points, segment: np.ndarray) -> dict[str, TagWrites]:
    """Points split per tag, in write order."""
    order = np.argsort(points.tag, kind="stable")
    bounds = np.flatnonzero(np.diff(points.tag[order])) + 1
    return {
        points.tags[points.tag[chunk[0]]]: TagWrites(points.step[chunk], points.value[chunk], segment[chunk])
        for chunk in np.split(order, bounds)
        if len(chunk)
    }


def _past(w: TagWrites, fed: int) -> TagWrites:
    keep = w.step > fed
    return TagWrites(w.step[keep], w.value[keep], w.segment[keep])


def _joined(*parts: TagWrites) -> TagWrites:
    return TagWrites(np.concatenate([w.step for w in parts]), np.concatenate([w.value for w in parts]),
                     np.concatenate([w.segment for w in parts]))


def _hold_last_steps(writes: dict[str, TagWrites]) -> dict[str, TagWrites]:
    """Take each tag's writes at its last step out of `writes` and return them: the next
    feed may write that step again (the later write wins), which a state that has passed it
    could only take by replaying."""
    held = {}
    for tag, w in writes.items():
        if len(w.step):
            cut = len(w.step) - _tail_run(w.step)
            held[tag] = TagWrites(w.step[cut:], w.value[cut:], w.segment[cut:])
            writes[tag] = TagWrites(w.step[:cut], w.value[:cut], w.segment[:cut])
    return held


def _tail_run(step: np.ndarray) -> int:
    """How many writes at the end are at the last step."""
    differs = np.flatnonzero(step != step[-1])
    return len(step) - (int(differs[-1]) + 1 if len(differs) else 0)

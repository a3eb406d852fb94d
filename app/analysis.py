"""The bridge from what the reader returns to what the analyzers take, and from findings
to alerts: a finding placed in its run, with a stable identity."""

from __future__ import annotations

import hashlib
import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from analyzers.analyze import analyze_run
from analyzers.config import AnalysisConfig
from analyzers.findings import Finding, Kind
from analyzers.health import RunHealth, run_health
from analyzers.series import Resume, TagWrites, prepare_run
from app.ingest.logdir import Run

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
    p = run.points
    order = np.argsort(p.tag, kind="stable")
    bounds = np.flatnonzero(np.diff(p.tag[order])) + 1
    return {
        p.tags[p.tag[chunk[0]]]: TagWrites(p.step[chunk], p.value[chunk], run.segment[chunk])
        for chunk in np.split(order, bounds)
        if len(chunk)
    }


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
        prepared = prepare_run(writes, resumes, config.roles, run)
        findings = analyze_run(prepared, config)
        health = run_health(prepared, findings, config.plateau, config.health)
    except Exception as e:  # the boundary of pure analyzer code: no I/O or store state in here
        log.exception("analysis failed", extra={"source": source, "run": run})
        raise AnalysisFailed(source, run, e) from e
    alerts = [Alert(fingerprint(source, run, f.tag, f.kind.value, f.start_step), source, run, f) for f in findings]
    return alerts, health


def _number(x: float | None) -> float | None:
    return x if x is None or math.isfinite(x) else None

"""An alert's life, in the manner of Prometheus: pending -> firing -> resolved.

`evaluate` is a pure function of the stored alert records, the current analysis and the
current step and time.  It says what every alert is now and which changes to report:

* a new finding fires at once, a loss spike whose class is still pending included (as a
  warning, or critical when far above its level): the analyzers report a spike only once
  it is still up a few points after its onset, or its class is known;
* a firing alert whose class or severity changes (pending -> divergent) is `updated`, not
  replaced: its identity is a fingerprint of run, tag, kind and onset; one that is over
  resolves, with its final class (a spike called divergent that came back: slow-recovering);
* an alert resolves once, when its condition is over (the spike recovered, the values are
  finite again) or when the analysis no longer sees it (a rollback rewrote those steps, or
  a spike told at its onset kept climbing: a trend's, not a spike); one that is over by
  the time it is first seen fires and resolves in the same evaluation;
* a NaN or a divergence on a tag inhibits the lesser spike alerts that start within it on
  that tag (while it lasts, or before it was over): they are kept, but never reported.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from analyzers.findings import Kind, Severity
from app.analysis import Alert


class State(str, enum.Enum):
    PENDING = "pending"  # kept by versions that held spikes back until classified; fires on the next evaluation
    FIRING = "firing"
    RESOLVED = "resolved"

    def __str__(self) -> str:
        return self.value


class Change(str, enum.Enum):
    FIRING = "firing"
    UPDATED = "updated"
    RESOLVED = "resolved"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class AlertRecord:
    """One alert as stored: its state, and the finding as last seen (a JSON object)."""

    id: str
    run: str
    tag: str
    kind: str
    state: State
    severity: str
    classification: str | None
    start_step: int
    finding: dict[str, Any]
    since_step: int | None  # step and time of the last state change
    since_time: float
    inhibited_by: str | None = None


@dataclass(frozen=True)
class Event:
    """A change to report and keep in the alert's history."""

    change: Change
    record: AlertRecord  # the alert after the change
    step: int | None
    reason: str = ""


INHIBITORS = frozenset({Kind.NONFINITE.value, Kind.DIVERGENCE.value})
REWRITTEN = "no longer seen: those steps were rewritten"
WITHDRAWN = "no longer seen: it kept climbing, a trend rather than a spike"


def consulted(current: list[Alert]) -> tuple[set[str], set[str]]:
    """What `evaluate` reads of the stored alerts besides the open ones, for these current
    alerts: (the ids of the current alerts, the tags of their loss spikes, on which stored
    `INHIBITORS` may inhibit them).  A resolved alert outside both changes nothing, so a
    long run's history of resolved alerts need not be read."""
    return {a.id for a in current}, {a.finding.tag for a in current if a.finding.kind is Kind.LOSS_SPIKE}


def evaluate(
    stored: Mapping[str, AlertRecord], current: list[Alert], last_step: int | None, now: float,
    vanishing: Mapping[str, str] | None = None,
) -> tuple[list[AlertRecord], list[Event]]:
    """Every alert's record after this evaluation, and the events to report.

    `vanishing`: the stored alerts whose absence from `current` means they are no longer
    seen, each with why (`REWRITTEN` or `WITHDRAWN`: the streaming analysis re-reports only
    what is still open; one final before is left as it is); None: every one, as rewritten
    (an analysis of the whole run)."""
    seen = {a.id for a in current}
    settled = [] if vanishing is None else [r for r in stored.values() if r.id not in seen and r.id not in vanishing]
    inhibited = _inhibitions(current, settled)
    records: list[AlertRecord] = []
    events: list[Event] = []
    for alert in current:
        old = stored.get(alert.id)
        record, happened = _step(old, alert, inhibited.get(alert.id), last_step, now)
        records.append(record)
        if record.inhibited_by is None:
            events.extend(happened)
    for old in stored.values():
        if old.id not in seen and old.state is not State.RESOLVED and (vanishing is None or old.id in vanishing):
            record = replace(old, state=State.RESOLVED, since_step=last_step, since_time=now)
            records.append(record)
            if old.inhibited_by is None:
                why = REWRITTEN if vanishing is None else vanishing[old.id]
                events.append(Event(Change.RESOLVED, record, last_step, why))
    return records, events


def _step(
    old: AlertRecord | None, alert: Alert, inhibitor: str | None, last_step: int | None, now: float
) -> tuple[AlertRecord, list[Event]]:
    f = alert.finding
    fields = alert.to_dict()
    target = _target(alert)
    record = AlertRecord(
        id=alert.id,
        run=alert.run,
        tag=f.tag,
        kind=f.kind.value,
        state=target,
        severity=str(f.severity),
        classification=f.classification.value if f.classification else None,
        start_step=f.start_step,
        finding=fields,
        since_step=old.since_step if old else None,
        since_time=old.since_time if old else now,
        inhibited_by=inhibitor,
    )
    before = old.state if old else None
    if before is target:
        changed = old is not None and (old.severity, old.classification) != (record.severity, record.classification)
        return record, [Event(Change.UPDATED, record, last_step)] if changed and target is not State.RESOLVED else []
    record = replace(record, since_step=_when(alert, target, last_step), since_time=now)
    if target is State.FIRING:
        return record, [Event(Change.FIRING, record, _fired_at(alert, last_step))]
    happened = [] if before is State.FIRING else [Event(Change.FIRING, replace(record, state=State.FIRING), _fired_at(alert, last_step))]
    return record, happened + [Event(Change.RESOLVED, record, record.since_step)]


def _target(alert: Alert) -> State:
    return State.FIRING if alert.finding.ongoing else State.RESOLVED


def _when(alert: Alert, target: State, last_step: int | None) -> int | None:
    f = alert.finding
    if target is State.RESOLVED:
        return f.end_step if f.end_step is not None else last_step
    return _fired_at(alert, last_step)


def _fired_at(alert: Alert, last_step: int | None) -> int | None:
    """The step at which the alert could first fire: its onset, or for a spike the step by
    which it was seen to be one (back, or still up at the last point)."""
    f = alert.finding
    return f.start_step if f.kind is not Kind.LOSS_SPIKE else (f.end_step or last_step)


def _inhibitions(current: list[Alert], settled: list[AlertRecord] = ()) -> dict[str, str]:
    """Spike alert id -> the NaN or divergence alert on its tag that came first, is worse
    and was not over by the spike's onset (one in `current`, or a settled one: final in an
    earlier analysis).  As Alertmanager's inhibitions hold only while their source fires: a
    divergence that came back says nothing of a spike after it (a creeping 1.5B speedrun
    loss, +4% and back, hid its next 1.8x spike)."""
    by_tag: dict[str, list[tuple[int, int | None, Severity, str]]] = {}
    for a in current:
        if a.finding.kind.value in INHIBITORS:
            end = None if a.finding.ongoing else a.finding.end_step
            by_tag.setdefault(a.finding.tag, []).append((a.finding.start_step, end, a.finding.severity, a.id))
    for r in settled:
        if r.kind in INHIBITORS:
            end = None if r.finding.get("ongoing") else r.finding.get("end_step")
            by_tag.setdefault(r.tag, []).append((r.start_step, end, Severity[r.severity.upper()], r.id))
    out = {}
    for a in current:
        if a.finding.kind is not Kind.LOSS_SPIKE:
            continue
        for start, end, severity, inhibitor in sorted(by_tag.get(a.finding.tag, []), key=lambda x: x[0]):
            if start <= a.finding.start_step and (end is None or a.finding.start_step <= end) and severity > a.finding.severity:
                out[a.id] = inhibitor
                break
    return out

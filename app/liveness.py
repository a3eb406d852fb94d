"""A stored run's pace, kept as points arrive, and the `stale` alert judged from it.

`observe` runs in the transaction that stores points (every way points arrive goes
through `app.updates.store_points`): it keeps the run's last-seen wall time, its recent
gaps between points and each tag's last value and peak.  Everything else here is a pure
function of that stored row and the current time (`analyzers.liveness`), so a run that
stops posting is judged with no new data arriving: by every scan and by the service's
background loop.

Last seen is the wall time of the run's newest point (the trainer's clock, as the logdir
or the client recorded it; the arrival time where none was recorded), never later than
now, and never earlier than when losswatch first saw the run: a logdir read for the first
time long after it was written is not stale at once, only if it still does not advance.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from analyzers.config import AnalysisConfig
from analyzers.findings import Kind
from analyzers.liveness import RECENT_GAPS, Liveness, StaleConfig, back_finding, stale_finding, usual_interval
from analyzers.roles import Role, assign_roles
from app.alerts.lifecycle import AlertRecord, State
from app.analysis import Alert, fingerprint
from app.ingest.points import Points
from app.store.runs import StoredRun

STALE = Kind.STALE.value


def observe(run: StoredRun, points: Points, now: float) -> dict[str, Any]:
    """The run row's new liveness columns after storing `points` (any new point un-finishes it)."""
    if not len(points):
        return {}
    pace = dict(run.pace or {})
    wall = np.where(np.isfinite(points.wall_time), points.wall_time, now)
    order = np.lexsort((wall, points.step))
    steps, times = points.step[order], np.minimum(wall[order], now)
    step_end = np.append(np.flatnonzero(np.diff(steps)), len(steps) - 1)  # the last write of each step
    step_times = times[step_end]
    newest = pace.get("newest")
    previous = [newest] if newest is not None else []
    gaps = np.diff(np.array(previous + step_times.tolist(), np.float64))
    pace["gaps"] = (list(pace.get("gaps", [])) + [float(g) for g in gaps if g > 0])[-RECENT_GAPS:]
    pace["newest"] = float(step_times.max()) if newest is None else max(float(newest), float(step_times.max()))
    tags = dict(pace.get("tags", {}))
    by_tag = np.lexsort((np.arange(len(points)), points.step, points.tag))  # each tag's latest step last
    tag, value = points.tag[by_tag], points.value[by_tag]
    ends = np.append(np.flatnonzero(np.diff(tag)), len(tag) - 1)
    starts = np.insert(ends[:-1] + 1, 0, 0)
    peaks = np.maximum.reduceat(np.where(np.isfinite(value), value, -np.inf), starts)
    for end, peak in zip(ends, peaks):
        name = points.tags[tag[end]]
        known = [p for p in tags.get(name, [None, None])[1:] if p is not None]
        tags[name] = [_json(float(value[end])), max(known + ([float(peak)] if np.isfinite(peak) else []), default=None)]
    pace["tags"] = tags
    first_seen = run.last_seen_at if run.last_seen_at is not None else now
    return {"pace": pace, "last_seen_at": max(first_seen, pace["newest"]), "finished_at": None}


def liveness(run: StoredRun, config: StaleConfig, roles: dict[str, str] | None = None) -> Liveness:
    """What `analyzers.liveness` judges a run by, from its stored row (roles: the run's own,
    to find its LR tags)."""
    pace = run.pace or {}
    return Liveness(run.last_seen_at, usual_interval(pace.get("gaps", [])), run.finished_at is not None,
                    _schedule_ended(run, config, roles))


def last_values(name: str, pace: dict | None, roles: dict[str, str] | None = None) -> dict[str, float]:
    """Role -> the last value of the run's first tag (by name) of that role (finite ones only)."""
    tags = (pace or {}).get("tags", {})
    assigned = assign_roles(sorted(tags), roles, name)
    out: dict[str, float] = {}
    for tag in sorted(tags):
        value = tags[tag][0]
        role = assigned[tag].value
        if role not in out and isinstance(value, float) and math.isfinite(value):
            out[role] = value
    return out


def _schedule_ended(run: StoredRun, config: StaleConfig, roles: dict[str, str] | None) -> bool:
    tags = (run.pace or {}).get("tags", {})
    assigned = assign_roles(sorted(tags), roles, run.name)
    for tag, (last, peak) in tags.items():
        if assigned[tag] is Role.LEARNING_RATE and isinstance(last, float) and peak is not None and peak > 0:
            if last <= config.schedule_end * peak:
                return True
    return False


def status(run: StoredRun, config: AnalysisConfig, now: float, alerting: bool = False) -> str:
    """running, finished or stale: what the runs list shows.  Stale while its `stale` alert
    is open (`alerting`: a scan with other settings may have fired it), or as of now."""
    if run.finished_at is not None:
        return "finished"
    if alerting:
        return "stale"
    own = config.for_run(run.source, run.name)
    if stale_finding(liveness(run, own.stale, own.roles), run.last_step, now, own.stale) is not None:
        return "stale"
    return "running"


def stale_alerts(run: StoredRun, stored: dict[str, AlertRecord], config: AnalysisConfig, now: float) -> list[Alert]:
    """The run's `stale` alerts as of now: the ongoing one if it is stale, and each open one
    that is over (it advanced again, or was marked finished), as a finding that resolves."""
    own = config.for_run(run.source, run.name)
    current = []
    finding = stale_finding(liveness(run, own.stale, own.roles), run.last_step, now, own.stale)
    if finding is not None:
        current.append(Alert(fingerprint(run.source, run.name, "", STALE, finding.start_step), run.source, run.name, finding))
    ids = {a.id for a in current}
    for record in stored.values():
        if record.kind == STALE and record.state is not State.RESOLVED and record.id not in ids:
            over = back_finding(record.start_step, run.last_step, run.finished_at is not None,
                                record.finding.get("evidence", {}))
            current.append(Alert(record.id, run.source, run.name, over))
    return current


def _json(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)

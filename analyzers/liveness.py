"""Whether a run is still alive, from when its points arrived (wall time), not from their values.

A crashed or hung job is the most common failure of all, and it writes nothing: no detector
that reads values can see it.  So a run is judged by the wall time of its newest point and
the usual wall time between its points (the median of its recent gaps, so one checkpoint
pause or one burst does not set the pace).  It is stale once it has not advanced for
`intervals` (10) of its usual gaps, and never before `min_minutes` (10): a job logging
every few seconds is not dead after a minute's checkpoint write.  The judgement is a pure
function of those stored numbers and the current time, so a run that stops posting is
noticed with no new data arriving.

A run is never stale once it is finished: explicitly (`POST /v1/runs/{run}/finish`, its
client's close), or, where nothing says so (a TensorBoard logdir), when its learning rate
reached the end of its schedule: at most `schedule_end` (10%) of its peak, after the
peak.  A run whose LR decayed to its floor is done training, not hung.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np

from analyzers.baseline import median
from analyzers.findings import Finding, Kind, Severity

RECENT_GAPS = 64  # the usual interval is the median of this many most recent gaps


REMEDIATION = ("Check whether the job crashed, hung or was pre-empted (scheduler state, the last lines of its log, "
               "GPU utilisation). If it ended normally, mark it finished: POST /v1/runs/<its name>/finish (the losswatch "
               "client does so when it closes cleanly).")


@dataclass(frozen=True)
class StaleConfig:
    intervals: float = 10.0  # stale after this many usual intervals without a new point ...
    min_minutes: float = 10.0  # ... and never sooner than this
    schedule_end: float = 0.1  # an LR at most this share of its peak (after it): the schedule ended


@dataclass(frozen=True)
class Liveness:
    """What the store keeps of a run's pace: the wall time of its newest point, its usual
    interval between points (None until two points arrived apart), whether it was marked
    finished and whether its LR schedule ended."""

    last_seen: float | None
    interval: float | None
    finished: bool = False
    schedule_ended: bool = False


def usual_interval(gaps: Sequence[float]) -> float | None:
    """The median of the recent positive gaps between points; None without any."""
    positive = [g for g in gaps if g > 0 and math.isfinite(g)]
    return float(median(np.array(positive))) if positive else None  # np.median's own machinery: 1% of a cron tick


def stale_after(interval: float | None, config: StaleConfig) -> float:
    """Seconds without a new point after which a run of this pace is stale."""
    floor = config.min_minutes * 60.0
    return floor if interval is None else max(config.intervals * interval, floor)


def schedule_ended(lr: np.ndarray, config: StaleConfig) -> bool:
    """Whether an LR series (in step order) decayed to the end of its schedule: its last
    value at most `schedule_end` of its peak, with the peak before it (the start of a
    warmup is low too, and is not an end)."""
    finite = lr[np.isfinite(lr)]
    if len(finite) < 2:
        return False
    peak_at = int(np.argmax(finite))
    peak = float(finite[peak_at])
    return peak > 0 and peak_at < len(finite) - 1 and float(finite[-1]) <= config.schedule_end * peak


def stale_finding(live: Liveness, last_step: int | None, now: float, config: StaleConfig) -> Finding | None:
    """The `stale` finding when the run has not advanced for longer than it should have
    (ongoing), else None.  Its message names only stored numbers (never `now`), so the
    alert it becomes does not change while the run stays silent."""
    if live.finished or live.schedule_ended or live.last_seen is None or last_step is None:
        return None
    limit = stale_after(live.interval, config)
    if now - live.last_seen <= limit:
        return None
    pace = f"usual interval {_duration(live.interval)}" if live.interval is not None else "no usual interval yet"
    return Finding(
        kind=Kind.STALE, tag="", severity=Severity.WARNING, start_step=last_step,
        message=f"no new point since {_iso(live.last_seen)} at step {last_step} ({pace}; stale after {_duration(limit)})",
        remediation=REMEDIATION, end_step=last_step, ongoing=True,
        evidence={"last_seen": live.last_seen, "interval": live.interval, "stale_after": limit},
    )


def back_finding(start_step: int, last_step: int | None, finished: bool, evidence: dict) -> Finding:
    """A `stale` incident that began at `start_step`, over: points arrived again, or the run
    was marked finished."""
    why = "marked finished" if finished else f"advanced again, to step {last_step}"
    return Finding(
        kind=Kind.STALE, tag="", severity=Severity.WARNING, start_step=start_step,
        message=f"{why} after being stale since step {start_step}", remediation=REMEDIATION,
        end_step=last_step if last_step is not None else start_step, ongoing=False, evidence=dict(evidence),
    )


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"

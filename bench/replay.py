"""Time to first alert, live: a labelled run is posted into the service's ingest path (the
same `app.service.ingest.ingest_json` the HTTP endpoint calls, on a SQLite store in a temp
dir, every request analysed) in chunks of 10 steps, and for each labelled event we record
the first step at which a response carries a matching alert change, and the first at which
that change is a warning or worse (what a receiver hears by default: a spike on a coarse
log is told at its onset as info, a warning only once confirmed).

Real runs are long (the Marian run spans 1.2M updates), so each event is replayed on a
window: the history before it goes in one request (for a sudden event the 2,000 logged
points of its tag before it, enough for every baseline; for a trend, divergence, overfitting
or plateau, the whole run so far, since trends are judged over the run), then 10-step chunks
from 20 steps before the onset until a warning, the matching alert's resolution or a
horizon (sudden events: 1,500 steps or 30 logged points, whichever is longer; trends: the
end of the run).  Empty chunks (coarse logging) are not posted.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.ingest.logdir import Run
from app.ingest.points import json_number
from app.service.ingest import ingest_json
from app.service.settings import Settings
from app.store.db import Store, open_store
from bench.corpus import Event

CHUNK_STEPS = 10
SUDDEN = {"loss_spike", "grad_norm_explosion", "nonfinite"}
HISTORY_POINTS = 2000
LEAD_STEPS = 20
SUDDEN_HORIZON_STEPS = 1500
SUDDEN_HORIZON_POINTS = 30
TELLING = ("firing", "updated", "pending")
LOUD = ("warning", "critical")


@dataclass(frozen=True)
class Timing:
    """When a labelled event was first told live: the last step posted when a response first
    carried a matching change (firing, updated or pending), and how many points the event's
    tag had logged from its onset up to then (the onset's own included): an evaluation
    every 5,000 updates cannot be told sooner than 5,000 steps, but it can be told at its
    first evaluation."""

    event: Event
    told_step: int | None
    told_points: int | None
    warned_step: int | None  # the first such change at warning or worse (None: never)
    posts: int

    @property
    def delay(self) -> int | None:
        return None if self.told_step is None else self.told_step - self.event.step

    @property
    def warning_delay(self) -> int | None:
        return None if self.warned_step is None else self.warned_step - self.event.step


class Replayer:
    """One temp SQLite store; each event is replayed into a run of its own."""

    def __init__(self, directory: str) -> None:
        self.store: Store = open_store(f"sqlite:///{Path(directory) / 'replay.db'}")
        self.settings = Settings(analysis_interval=0.0, background=False)
        self.clock = 0.0
        self.replays = 0

    def close(self) -> None:
        self.store.close()

    def replay(self, run: Run, event: Event) -> Timing:
        self.replays += 1
        name = f"{run.name}#{self.replays}"
        steps, tags, values, times = _ordered(run)
        start, live, horizon = _window(steps, tags, values, run.points.tags, event)
        history = (steps >= start) & (steps < live)
        if history.any():
            self._post(name, run.points.tags, steps[history], tags[history], values[history], times[history])
        chunk = np.floor_divide(steps, CHUNK_STEPS)
        later = np.flatnonzero((steps >= live) & (steps <= horizon))
        own = steps[tags == run.points.tags.index(event.tag)]
        posts, told, warned = 0, None, None
        for ids in np.split(later, np.flatnonzero(np.diff(chunk[later])) + 1) if len(later) else []:
            changes = self._post(name, run.points.tags, steps[ids], tags[ids], values[ids], times[ids])
            posts += 1
            last = int(steps[ids].max())
            mine = [c.event for c in changes if _about(c.event, event)]
            telling = [e for e in mine if e.change.value in TELLING]
            told = last if told is None and telling else told
            if any(e.record.severity in LOUD for e in telling):
                warned = last
                break
            if any(e.change.value == "resolved" for e in mine):  # over: no warning will come
                break
        points = None if told is None else int(np.sum((own >= event.step) & (own <= told)))
        return Timing(event, told, points, warned, posts)

    def _post(
        self, name: str, names: tuple[str, ...], steps: np.ndarray, tags: np.ndarray, values: np.ndarray, times: np.ndarray
    ) -> list:
        """One request, with each point's wall time where the run recorded one (as the client
        sends it: what tells a job going over its steps again from a retry)."""
        body = json.dumps({"points": [
            {"step": int(s), "tag": names[t], "value": json_number(float(v)), **({"wall_time": float(w)} if math.isfinite(w) else {})}
            for s, t, v, w in zip(steps, tags, values, times)
        ]}).encode()
        self.clock += 1.0
        return ingest_json(self.store, name, body, False, False, self.settings, self.clock).changes


def _about(reported, event: Event) -> bool:
    r = reported.record
    return event.matches(r.kind, r.tag, r.start_step)


def _ordered(run: Run) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The points in the order the job wrote them: by segment (a resumed job's second event
    file comes after its first, its steps going back), then by step; with their wall times."""
    p = run.points
    order = np.lexsort((p.step, run.segment))
    return p.step[order], p.tag[order], p.value[order], p.wall_time[order]


def _window(steps, tags, values, names: tuple[str, ...], event: Event) -> tuple[int, int, int]:
    """First step of the history, first live step, last step replayed."""
    own = steps[tags == names.index(event.tag)]
    interval = float(np.median(np.diff(own))) if len(own) > 1 else 1.0
    live = max(int(steps.min()), int(math.floor((event.step - LEAD_STEPS) / CHUNK_STEPS) * CHUNK_STEPS))
    if event.kind in SUDDEN:
        before = own[own < live]
        start = int(before[-HISTORY_POINTS]) if len(before) >= HISTORY_POINTS else int(steps.min())
        horizon = event.step + int(max(SUDDEN_HORIZON_STEPS, SUDDEN_HORIZON_POINTS * interval))
    else:
        start, horizon = int(steps.min()), int(steps.max())
    return start, live, horizon


def replay_events(runs: list[tuple[Run, Event]], progress: Callable[[str], None]) -> list[Timing]:
    """Every event's timing, in the order given."""
    timings = []
    with tempfile.TemporaryDirectory(prefix="losswatch-replay-") as tmp:
        replayer = Replayer(tmp)
        try:
            for i, (run, event) in enumerate(runs, 1):
                timing = replayer.replay(run, event)
                told = "not told" if timing.delay is None else f"+{timing.delay} steps"
                progress(f"replay {i}/{len(runs)}: {run.name} {event.kind} {event.tag} @ {event.step}: {told} ({timing.posts} posts)")
                timings.append(timing)
        finally:
            replayer.close()
    return timings

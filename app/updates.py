"""Bringing a stored run up to date: store what was read, re-analyse, move the alerts.

One code path for every way points arrive (`losswatch scan`, the service's ingest
endpoints, its logdir poller and its deferred analysis).  `store_points`, `apply` and
`reassess` run inside the caller's transaction, which holds the run's lock; `assess` only
reads, and `analyze_now` runs the two phases in transactions of its own."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from sqlalchemy.engine import Connection

from analyzers.config import AnalysisConfig
from app import incremental, liveness
from app.alerts.lifecycle import INHIBITORS, AlertRecord, Event, State, consulted, evaluate
from app.alerts.receivers import route
from app.analysis import Alert, AnalysisFailed
from app.ingest.logdir import RunState
from app.ingest.points import Points
from app.ingest.restarts import Rollback
from app.store import alerts as stored_alerts
from app.store import runs as stored_runs
from app.store import silences as stored_silences
from app.store import streams
from app.store.db import Store
from app.store.runs import StoredRun
from app.store.schema import runs
from app.store.streams import SavedState


@dataclass(frozen=True)
class Reported:
    """A change to tell someone about, and where its run was found."""

    source: str
    event: Event
    id: int | None = None  # the change's row in alert_events


def store_points(
    conn: Connection,
    run: StoredRun,
    points: Points,
    segment: np.ndarray,
    rollbacks: tuple[Rollback, ...],
    state: RunState,
    now: float,
    dirty: bool = False,
) -> StoredRun:
    """Append points and rollbacks and the run's new state; returns the run as it now is.
    `dirty`: the run waits for analysis (the service defers busy runs), said in the same
    write of its row."""
    (updated,) = store_points_of_runs(conn, [Storing(run, points, segment, rollbacks, state, now, dirty)])
    return updated


@dataclass(frozen=True)
class Storing:
    """What `store_points` stores for one run (`run`: its locked row)."""

    run: StoredRun
    points: Points
    segment: np.ndarray
    rollbacks: tuple[Rollback, ...]
    state: RunState
    now: float
    dirty: bool = False


def store_points_of_runs(conn: Connection, storing: Sequence[Storing]) -> list[StoredRun]:
    """`store_points` of several runs (each once) with the statements of one: a group of
    small appends written in one transaction costs what one of them would."""
    stored_runs.append_points_of_runs(conn, [(s.run.id, s.points, s.segment) for s in storing])
    saves, updated = [], []
    for s in storing:
        stored_runs.add_rollbacks(conn, s.run.id, s.rollbacks)
        last_step = s.run.last_step
        if len(s.points):
            newest = int(s.points.step.max())
            last_step = newest if last_step is None else max(last_step, newest)
        alive = liveness.observe(s.run, s.points, s.now)
        points = s.run.points + len(s.points)
        updated.append(replace(s.run, state=s.state, points=points, last_step=last_step, updated_at=s.now, **alive))
        saves.append(stored_runs.RunSave(s.run.id, s.state, points, last_step, s.now, alive, s.dirty))
    stored_runs.save_runs(conn, saves)
    return updated


@dataclass(frozen=True)
class Assessment:
    """The alerts of a run as it stood with `points` points stored, or why the analysis
    failed (`error`): then the run's alerts stay as they were."""

    points: int
    last_step: int | None
    current: list[Alert]
    error: str | None = None
    health: dict | None = None  # the run's health summary (analyzers/health.py)
    stream: incremental.Advance | None = None  # the streaming state it reached, saved when applied
    vanishing: Mapping[str, str] | None = None  # alerts whose absence means "no longer seen", with why (None: any)


@dataclass(frozen=True)
class Applied:
    """What applying an assessment changed, and the analysis error recorded on the run."""

    changes: list[Reported]
    error: str | None = None


def assess(conn: Connection, run: StoredRun, config: AnalysisConfig) -> Assessment:
    """Feed the writes stored since the run's last analysis to its streaming state (only
    those are read).  Reads only: the service runs it outside the write lock, so a slow
    analysis never holds up other runs' appends."""
    return _assessed(conn, stored_runs.get_run(conn, run.id), config)  # the row and the points from one snapshot


def assess_runs(conn: Connection, runs: Sequence[StoredRun], config: AnalysisConfig) -> list[tuple[StoredRun, Assessment]]:
    """`assess` of each run still stored, their rows read in one query."""
    current = stored_runs.runs_by_id(conn, [run.id for run in runs])
    return assess_batch(conn, [current[run.id] for run in runs if run.id in current], config)


def assess_batch(conn: Connection, runs: Sequence[StoredRun], config: AnalysisConfig) -> list[tuple[StoredRun, Assessment]]:
    """`assess` of runs as their rows say they stand in `conn`'s view (locked, or read in
    it), their saved states read in one query: a scan analyses dozens of runs per
    transaction, and a statement per run was a twentieth of a cron tick."""
    states = streams.load_states(conn, [run.id for run in runs])
    return [(run, _assessed(conn, run, config, states)) for run in runs]


def _assessed(conn: Connection, run: StoredRun, config: AnalysisConfig,
              states: Mapping[int, SavedState] | None = None) -> Assessment:
    """`assess` of the run as `run` says it stands in `conn`'s view (`states`: a batch's
    saved states, see `incremental.advance`)."""
    try:
        done = incremental.advance(conn, run, config, states)
    except AnalysisFailed as e:
        return Assessment(run.points, run.last_step, [], error=e.reason)
    return Assessment(run.points, run.last_step, done.alerts, health=done.health.to_dict(), stream=done.advance,
                      vanishing=done.vanishing)


def apply(
    conn: Connection, run: StoredRun, assessment: Assessment, webhooks: Sequence[str], now: float,
    config: AnalysisConfig = AnalysisConfig(), stored: dict[str, AlertRecord] | None = None,
) -> Applied:
    """Move the run's alerts along by an assessment and queue their deliveries (see
    `record_changes`) and returns the changes to report.  `run` is the locked row.  An
    assessment older than the last one applied is dropped (two analyses of a run can finish
    out of order); one that missed points stored since leaves the run waiting for the next
    analysis.  A failed analysis is recorded on the run (the API and UI show it) and stops
    waiting: the next points stored try again.  `stored`: the run's alerts the evaluation
    can change or consult, when already read with a batch's (`alerts_to_evaluate`)."""
    if run.analyzed_points is not None and assessment.points < run.analyzed_points:
        return Applied([])
    done = {"analyzed_at": now, "analysis_error": assessment.error}
    if assessment.points >= run.points:
        done["dirty_since"] = None
    if assessment.error is not None:
        stored_runs.update_run(conn, run.id, done)
        return Applied([], assessment.error)
    if assessment.stream is not None and not incremental.save(conn, run.id, assessment.stream):
        return Applied([])  # another analysis of the run was applied meanwhile: the run waits for the next
    if stored is None:
        stored = alerts_to_evaluate(conn, [(run, assessment)])[run.id]
    detected = {k: r for k, r in stored.items() if r.kind != liveness.STALE}  # judged by time, below
    changes = record_changes(conn, run, detected, assessment.current, assessment.last_step, webhooks, now,
                             assessment.vanishing)
    done["health"] = assessment.health
    stored_runs.update_run(conn, run.id, {"analyzed_points": assessment.points, **done})
    return Applied(changes + refresh_liveness(conn, run, config, webhooks, now, stored))


def alerts_to_evaluate(conn: Connection, assessed: Sequence[tuple[StoredRun, Assessment]]) -> dict[int, dict[str, AlertRecord]]:
    """Run id -> its stored alerts that evaluating its assessment can change or consult (see
    `lifecycle.consulted`): the open ones, those reported again, and the NaN and divergence
    alerts on the tags of reported spikes; one query for them all."""
    ids: set[str] = set()
    spike_tags: set[str] = set()
    for _, assessment in assessed:
        reported, tags = consulted(assessment.current)
        ids |= reported
        spike_tags |= tags
    return stored_alerts.load_alerts_to_evaluate_of_runs(conn, [run.id for run, _ in assessed], ids, INHIBITORS, spike_tags)


def record_changes(
    conn: Connection, run: StoredRun, stored: dict[str, AlertRecord], current: list[Alert], last_step: int | None,
    webhooks: Sequence[str], now: float, vanishing: Mapping[str, str] | None = None,
) -> list[Reported]:
    """Move these alerts along, keep their changes and queue their deliveries (not for
    alerts silenced, by their flag or by an active silence; each receiver spec in `webhooks`
    gets one message of the changes it routes to); returns the changes to report.
    `vanishing`: the alerts whose absence from `current` means they are no longer seen,
    with why (None: any; see `evaluate`)."""
    records, events = evaluate(stored, current, last_step, now, vanishing)
    stored_alerts.save_alerts(conn, run.id, [r for r in records if stored.get(r.id) != r])  # an open alert seen again, unchanged: no write
    if not events:
        return []
    reported = list(zip(stored_alerts.add_events(conn, events, now), events))
    quiet = stored_alerts.silenced_ids(conn, [e.record.id for _, e in reported])
    quiet |= stored_silences.silenced(conn, [e.record for _, e in reported], now)
    loud = [(i, e) for i, e in reported if e.record.id not in quiet]
    peak = stored_alerts.peak_severities(conn, sorted({e.record.id for _, e in loud}))
    stored_alerts.enqueue(conn, run.id, route(webhooks, loud, peak), now)
    return [Reported(run.source, e, i) for i, e in reported]


def refresh_liveness(
    conn: Connection, run: StoredRun, config: AnalysisConfig, webhooks: Sequence[str], now: float,
    stored: dict[str, AlertRecord] | None = None,
) -> list[Reported]:
    """Fire, or resolve, the locked run's `stale` alert as of `now`.  `stored` need hold only
    the open alerts (`apply` reads no resolved stale one): the stale alerts judged are the
    open ones, resolving, and an ongoing one, which fires alike whether an earlier incident
    of its id was read, resolved, or not."""
    if stored is None:
        stored = stored_alerts.load_alerts(conn, run.id)
    stale = {k: r for k, r in stored.items() if r.kind == liveness.STALE}
    current = _stale_changes(run, stale, config, now)
    if current is None:
        return []
    return record_changes(conn, run, stale, current, run.last_step, webhooks, now)


def _stale_changes(run: StoredRun, stale: dict[str, AlertRecord], config: AnalysisConfig, now: float) -> list[Alert] | None:
    """The run's `stale` alerts as of now, or None when that changes nothing stored (the
    service's loop asks this of every quiet run every few seconds: only a change writes)."""
    current = liveness.stale_alerts(run, stale, config, now)
    open_ids = {k for k, r in stale.items() if r.state is not State.RESOLVED}
    if all(a.finding.ongoing for a in current) and {a.id for a in current} == open_ids:
        return None
    return current


def check_liveness(
    store: Store, config: AnalysisConfig, webhooks: Sequence[str], now: float, sources: list[str] | None = None,
    hold: Callable[[Connection, list[Reported]], None] | None = None,
) -> list[Reported]:
    """Judge every quiet run (of these sources; None: all) for staleness: the scan and the
    service's background loop call this, so a run that stops posting fires with no new data
    arriving.  Runs are read first; only one whose stale alert changes is locked and judged
    again under its lock, so two checkers report each change once.  `hold` sees each run's
    changes inside the transaction that made them (a scan holds them until printed)."""
    floor = min([config.stale.min_minutes] + [float(o.settings["stale"]["min_minutes"]) for o in config.overrides
                                               if "min_minutes" in o.settings.get("stale", {})]) * 60.0
    with store.read() as conn:
        quiet = stored_runs.quiet_runs(conn, now - floor, sources)
        stale = stored_alerts.open_of_kind(conn, liveness.STALE, [r.id for r in quiet])
    changes: list[Reported] = []
    for candidate in quiet:
        if _stale_changes(candidate, stale.get(candidate.id, {}), config, now) is None:
            continue
        with store.write() as conn:
            run = stored_runs.lock_run(conn, candidate.source, candidate.name, now)
            changed = refresh_liveness(conn, run, config, webhooks, now)
            if hold is not None and changed:
                hold(conn, changed)
            changes += changed
    return changes


def finish(conn: Connection, run: StoredRun, config: AnalysisConfig, webhooks: Sequence[str], now: float) -> list[Reported]:
    """Mark the locked run finished (its job ended normally): no stale alert from now on,
    and an open one resolves.  New points un-finish it."""
    conn.execute(runs.update().where(runs.c.id == run.id).values(finished_at=now))
    return refresh_liveness(conn, replace(run, finished_at=now), config, webhooks, now)


def reassess(conn: Connection, run: StoredRun, config: AnalysisConfig, webhooks: Sequence[str], now: float) -> Applied:
    """Analyse and apply in the caller's one transaction (a scan: crash-safe as a whole)."""
    return apply(conn, run, assess(conn, run, config), webhooks, now, config)


def analyze_locked(conn: Connection, run: StoredRun, config: AnalysisConfig, webhooks: Sequence[str], now: float) -> Applied:
    """Analyse and apply in the transaction that has just stored the run's points under its
    lock (`run`: the row as `store_points` left it).  For a small append to a run analysed up
    to date: the analysis costs what the points posted bring, and one transaction does what
    `analyze_now` needs three for (a third of an analysed append's round trips)."""
    return apply(conn, run, _assessed(conn, run, config), webhooks, now, config)


def analyze_now(store: Store, run: StoredRun, config: AnalysisConfig, webhooks: Sequence[str], now: float) -> Applied:
    """Analyse outside the write lock, then apply under the run's lock (the service)."""
    with store.read() as conn:
        assessment = assess(conn, run, config)
    with store.write() as conn:
        locked = stored_runs.lock_run(conn, run.source, run.name, now)
        return apply(conn, locked, assessment, webhooks, now, config)


def analyze_apart(
    store: Store, runs: Sequence[StoredRun], config: AnalysisConfig, webhooks: Sequence[str], clock: Callable[[], float],
    record: Callable[[Connection, StoredRun, Applied, float], None] | None = None,
) -> list[tuple[StoredRun, Applied]]:
    """`analyze_now` of a batch of runs: analysed in one read transaction (their saved states
    read in one query), then applied in one transaction under their locks, taken in (source,
    name) order as a group of appends takes them, the alerts their evaluations need read in
    one query.  An analysis another one overtook is dropped and the run keeps waiting (see
    `apply`).  `record` sees each run's changes inside the transaction (a scan holds them
    until printed)."""
    if not runs:
        return []
    with store.read() as conn:
        assessed = assess_runs(conn, runs, config)
    now = clock()
    with store.write() as conn:
        locked: dict[tuple[str, str], StoredRun] = {}
        for source in sorted({run.source for run, _ in assessed}):
            names = [run.name for run, _ in assessed if run.source == source]
            locked |= {(source, name): run for name, run in stored_runs.lock_runs(conn, source, names, now).items()}
        batch = [(locked[run.source, run.name], assessment) for run, assessment in assessed]
        stored = alerts_to_evaluate(conn, batch)
        out = []
        for run, assessment in batch:
            out.append((run, apply(conn, run, assessment, webhooks, now, config, stored[run.id])))
            if record is not None:
                record(conn, *out[-1], now)
        return out


def due_for_analysis(run: StoredRun, interval: float, now: float) -> bool:
    """Whether the run (as locked) may be analysed now: not analysed in the last `interval` s."""
    return run.analyzed_at is None or now - run.analyzed_at >= interval

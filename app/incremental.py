"""Analysing a stored run by what is new in it: load the run's streaming state, feed it the
writes stored since, and hand back the state to save with the alerts.  A rollback that
rewrites steps the state has passed replays from the newest checkpoint that had not
reached them (from the start only when none is old enough)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from analyzers.config import AnalysisConfig
from analyzers.findings import Finding
from analyzers.health import RunHealth
from analyzers.runstream import (
    NeedsReplay,
    RunState,
    StateOutdated,
    config_key,
    dumps,
    feed_run,
    loads,
    run_health,
    start_run,
)
from app.alerts.lifecycle import REWRITTEN, WITHDRAWN
from app.analysis import Alert, AnalysisFailed, fingerprint
from app.store import alerts as stored_alerts
from app.store import runs as stored_runs
from app.store import streams
from app.store.runs import StoredRun

log = logging.getLogger("losswatch.analysis")


@dataclass(frozen=True)
class Advance:
    """The state an analysis reached, to save when it is applied."""

    data: bytes
    positions: dict[str, tuple[int, int]]
    version: int | None  # the saved state it started from (None: none)
    points: int  # points fed, all tags
    fed: dict[str, int]
    checkpoint: bool  # keep it as a checkpoint too
    replayed_from: int | None  # points of the checkpoint a replay started from (0: the start)


@dataclass(frozen=True)
class Advanced:
    alerts: list[Alert]
    health: RunHealth
    vanishing: Mapping[str, str] | None  # alerts whose absence means "no longer seen", with why; None: any
    advance: Advance


def advance(conn: Connection, run: StoredRun, config: AnalysisConfig,
            states: Mapping[int, streams.SavedState] | None = None) -> Advanced:
    """Feed the run's new writes to its saved state.  Raises AnalysisFailed, never anything
    else, when the detectors fail on them.  The run is analysed with its own settings:
    `config`'s `[[override]]` tables that match it applied.  `states`: the saved states of
    a batch of runs this one is in, read at once (`streams.load_states`; None: read its own)."""
    config = config.for_run(run.source, run.name)
    saved = streams.load_state(conn, run.id) if states is None else states.get(run.id)
    resumes = stored_runs.load_resumes(conn, run.id) if run.state.segments.segment else ()  # segment 0: never rolled back
    try:
        state = _saved(saved)
        shown = _ids(run, state.shown)
        writes, positions = streams.new_writes(conn, run.id, saved.positions if saved else {})
        try:
            if saved is not None and state.config != config_key(config):
                # fed with other settings or saved in another format: no checkpoint will do, from the start
                raise NeedsReplay({"*": -1})
            new, closed, still = feed_run(state, writes, resumes, config, run.name)
            vanishing = None if saved is None else dict.fromkeys(shown, WITHDRAWN)
            replayed = None
        except NeedsReplay as e:
            new, closed, still, base_points, positions, after = _replay(conn, run, e.rewrites, resumes, config)
            if base_points:  # shown but not seen again: withdrawn, unless its steps were fed again
                vanishing = {**dict.fromkeys(shown, WITHDRAWN), **dict.fromkeys(_rewritten(conn, run, after), REWRITTEN)}
            else:
                vanishing = None
            replayed = base_points
        health = run_health(new, still, config)
    except (AnalysisFailed, sa.exc.SQLAlchemyError):
        # the store's errors are not the detectors': a database that went away mid-read is
        # answered at the edge (503, to retry), and swallowing it left the transaction dead
        # for the writes after it (PendingRollbackError: a 500)
        raise
    except Exception as e:  # the boundary of the analyzer code, as in app.analysis
        log.exception("analysis failed", extra={"source": run.source, "run": run.name})
        raise AnalysisFailed(run.source, run.name, e) from e
    alerts = [_alert(run, f) for f in closed + still]
    latest = saved.checkpoint if saved is not None and replayed is None else streams.latest_checkpoint(conn, run.id, replayed)
    step = Advance(
        dumps(new), positions, saved.version if saved else None, new.points, new.fed(),
        checkpoint=new.points - latest >= streams.CHECKPOINT_POINTS, replayed_from=replayed,
    )
    return Advanced(alerts, health, vanishing, step)


def _saved(saved: streams.SavedState | None) -> RunState:
    """The saved state, or a new one when there is none or it is of another format (its
    config then matches no settings, so the run is fed again from the start)."""
    if saved is None:
        return start_run()
    try:
        return loads(saved.data)
    except StateOutdated:
        return replace(start_run(), config="outdated")


def _replay(conn: Connection, run: StoredRun, rewrites: dict[str, int], resumes, config: AnalysisConfig):
    """Feed again from the newest checkpoint before every rewritten step."""
    kept = streams.checkpoints(conn, run.id)
    while True:
        usable = [c for c in kept if all(c.fed.get(tag, -1) < at for tag, at in rewrites.items())]
        base, points = (loads(streams.checkpoint_data(conn, usable[-1].id)), usable[-1].points) if usable else (start_run(), 0)
        writes, positions = streams.writes_after(conn, run.id, base.fed())
        try:
            new, closed, still = feed_run(base, writes, resumes, config, run.name)
            return new, closed, still, points, positions, min(base.fed().values(), default=-1)
        except NeedsReplay as again:  # an older resume rewrites steps this checkpoint passed
            for tag, at in again.rewrites.items():
                rewrites[tag] = min(rewrites.get(tag, at), at)


def _rewritten(conn: Connection, run: StoredRun, after: int) -> frozenset[str]:
    """Alerts about steps a replay fed again (past `after`, where the checkpoint stood):
    not seen again means those steps were rewritten."""
    return frozenset(a.id for a in stored_alerts.load_alerts(conn, run.id).values() if a.start_step > after)


def _ids(run: StoredRun, keys: list[tuple[str, str, int]]) -> frozenset[str]:
    return frozenset(fingerprint(run.source, run.name, tag, kind, start) for tag, kind, start in keys)


def _alert(run: StoredRun, f: Finding) -> Alert:
    return Alert(fingerprint(run.source, run.name, f.tag, f.kind.value, f.start_step), run.source, run.name, f)


def save(conn: Connection, run_id: int, step: Advance) -> bool:
    """Save what `advance` reached (False: another analysis saved since; nothing done)."""
    if not streams.save_state(conn, run_id, step.data, step.positions, step.points, step.version):
        return False
    if step.replayed_from is not None:
        streams.drop_checkpoints_after(conn, run_id, step.replayed_from)
    if step.checkpoint:
        streams.add_checkpoint(conn, run_id, step.data, step.points, step.fed)
    return True

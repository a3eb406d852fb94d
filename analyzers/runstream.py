"""A whole run, analysed as it grows: `feed_run(state, writes, resumes)` takes only the
writes stored since the state was saved and returns the state to save with them, the
findings now final and those still open.  Feeding a run in any split gives what feeding
it at once gives (tests/test_run_stream.py), so a scan costs what the new points bring,
not what the run holds.

What the state keeps, bounded whatever the run's length:

* per tag, every detector's own state (`analyzers/stream.py`) and its open findings;
* per tag, the last `tail_points` points of its current view (the *tail*): the window
  the cross-tag steps read (a plateau's loss level while the LR is 0, the train loss an
  eval rise is judged against, the last window of the health summary), and a few
  *anchors*: the points at the onset of an open cause or eval rise, so an incident open
  for longer than the tail is still judged on the points it began with;
* the findings of the detectors while the cross-tag steps may still change them (a
  grad-norm explosion and the loss spike it leads are one incident); once every tag's
  tail has moved `tail_points / 2` points past one, its finding is final: it is returned
  once as closed and counted in the health summary, and no longer re-emitted;
* the resumes, with the writes of the steps they rewrote (at most `tail_points` per tag).

Big feeds are cut into windows of at most `tail_points / 4` points per tag, so a first
scan of a long run decides each finding with the same data at hand as a live run.

A write at a step the state has passed (a resume, a late write of an earlier step)
cannot be fed: `NeedsReplay` says from which step each tag is rewritten, and the caller
feeds again from a saved state that had not reached those steps (a checkpoint).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import math
import struct
import typing
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from analyzers import running_mean
from analyzers.config import AnalysisConfig
from analyzers.findings import Finding, Kind, Severity, SpikeClass
from analyzers.gradnorm import GradNormDetector, GradNormState
from analyzers.health import Health, RunHealth, converged, told, unsettling
from analyzers.incidents import (
    after_warm_restart,
    explained_by_spike,
    inside_explosion,
    join_explosions,
    overfitting_tells,
    rise_after_warm_restart,
    spike_tells_eval_rise,
    told_by_loss_nan,
    unfelt,
)
from analyzers.lossscale import LossScaleDetector, LossScaleState
from analyzers.nonfinite import NonFiniteDetector, NonFiniteState, hidden_nan, under_fp16
from analyzers.overfitting import EvalRiseDetector, EvalRiseState, judge, train_counterpart
from analyzers.plateau import (
    InitialLevelDetector,
    InitialLevelState,
    ZeroLRDetector,
    ZeroLRState,
    merge_plateaus,
    stalled_plateaus,
    warming_up,
)
from analyzers.restarts import RestartDetector
from analyzers.roles import Role, assign_roles
from analyzers.running_mean import MeanState
from analyzers.schedule import RestartState, WarmRestartDetector
from analyzers.series import Resume, RunSeries, Series, TagWrites, current_view, logging_interval, restart_steps, resume_steps
from analyzers.spikes import LossSpikeDetector, SpikeState
from analyzers.stream import StreamState, field_types, of_states, required
from analyzers.trend import DivergenceDetector, DivergenceState

TAIL_POINTS = 4096  # points of each tag's current view the state keeps
MAX_KEPT = 512  # findings kept for the cross-tag steps; past that the oldest are final
MAX_PAST_SPIKES = 1024  # per loss tag: final spikes an open divergence may be explained by
MAX_PAST_RESTARTS = 1024  # the LR's warm restarts a spike kept may have followed

_LOSSES = (Role.LOSS, Role.EVAL_LOSS)
_TAILED = (*_LOSSES, Role.LEARNING_RATE, Role.GRAD_NORM)  # the roles the cross-tag steps read points of


class NeedsReplay(Exception):
    """Writes rewrite steps the state has passed: feed again from a state that has not
    reached `rewrites[tag]` for any tag (the step from which that tag is rewritten).
    `at_once`: feed every write since that state in one feed (a train loss found to be
    logged as running means, or given up on, is told so by a stretch of points that a feed
    in parts would see again only piece by piece, and ask again)."""

    def __init__(self, rewrites: dict[str, int], at_once: bool = False) -> None:
        self.rewrites, self.at_once = rewrites, at_once
        super().__init__("writes rewrite steps already analysed: " + ", ".join(f"{t} from step {s}" for t, s in rewrites.items()))


class StateOutdated(Exception):
    """A saved state of another format (a detector's state changed shape since it was
    saved): the run is fed again from the start."""


# Raise when any detector's state changes shape (or the way it is packed at rest).
STATE_FORMAT = 18
READ_FORMATS = (18,)  # 18: an eval rise keeps where its evaluations over the margin began


# -- the state --------------------------------------------------------------------------


@dataclass
class TagState:
    role: Role
    detectors: dict[str, StreamState]
    open: dict[str, list[Finding]] = field(default_factory=dict)  # per detector, as of its last feed
    step: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # the tail
    value: np.ndarray = field(default_factory=lambda: np.zeros(0))
    points: int = 0  # points of the current view fed
    last_step: int = -1  # the last step fed
    finite: int = 0
    first_step: int = -1
    head: np.ndarray = field(default_factory=lambda: np.zeros(0))  # the first finite values (health)
    best: float = math.inf  # the lowest finite value and its step (an eval loss's best)
    best_step: int = -1
    peak: float = -math.inf  # the highest finite value (an LR's peak)
    last_finite: float = math.nan
    anchors: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # name -> finite points kept
    mean: MeanState | None = None  # a train loss: whether it is logged as running means (`analyzers.running_mean`)

    @property
    def fed(self) -> int:
        """The last step fed (-1 before any)."""
        return self.last_step


@dataclass
class Kept:
    """A detector's closed finding, kept while the cross-tag steps may change it."""

    group: str  # the detector
    tag: str
    finding: Finding
    done: bool = False  # returned as final already: kept as context only


@dataclass
class ResumeRecord:
    resume: Resume
    writes: dict[str, TagWrites]  # per LR and loss tag: the writes of the steps it rewrote, old and new


@dataclass
class HealthTally:
    """The health summary's share of the findings already final."""

    spikes: int = 0
    largest: tuple[tuple[float, float], dict] | None = None
    above_band: int = 0  # steps above the band of final spikes that came back
    still_up: dict[str, list[int]] = field(default_factory=dict)  # tag -> [count, sum of onsets] of final spikes not back
    first: dict[str, tuple[tuple, str]] = field(default_factory=dict)  # category -> (sort key, told) of the first final one


@dataclass
class RunState:
    tags: dict[str, TagState] = field(default_factory=dict)
    kept: list[Kept] = field(default_factory=list)
    resumes: list[ResumeRecord] = field(default_factory=list)
    past_spikes: dict[str, list[tuple[int, bool, int | None]]] = field(default_factory=dict)  # tag -> (onset, fast, end) of dropped ones
    past_restarts: list[tuple[int, int | None, int]] = field(default_factory=list)  # (start, end, cycle) of dropped warm restarts
    finals: list[tuple[str, str, int]] = field(default_factory=list)  # (tag, kind, start) returned as final
    shown: list[tuple[str, str, int]] = field(default_factory=list)  # (tag, kind, start) of the last open findings
    tally: HealthTally = field(default_factory=HealthTally)
    points: int = 0  # points fed, all tags
    config: str = ""  # `config_key` of the settings it was fed with

    def fed(self) -> dict[str, int]:
        """The last step fed of each tag: a saved state can replay writes after these."""
        return {tag: t.fed for tag, t in self.tags.items()}


def start_run() -> RunState:
    return RunState()


_CONFIG_KEYS: dict[int, tuple[AnalysisConfig, str]] = {}  # id -> the settings (kept, so the id stays theirs), key


def config_key(config: AnalysisConfig) -> str:
    """Which settings a state was fed with: a state fed with others must start again.
    Worked out once per settings object (every analysis asks twice, and the repr of every
    setting costs more than loading a small state)."""
    known = _CONFIG_KEYS.get(id(config))
    if known is None or known[0] is not config:
        if len(_CONFIG_KEYS) >= 64:  # settings made per run (overrides): the cache stays small
            _CONFIG_KEYS.clear()
        known = _CONFIG_KEYS[id(config)] = (config, hashlib.sha256(repr(config).encode()).hexdigest()[:16])
    return known[1]


# -- detectors per role -----------------------------------------------------------------


def _detectors(role: Role, config: AnalysisConfig) -> dict[str, Any]:
    p = config.plateau
    out: dict[str, Any] = {"nonfinite": NonFiniteDetector(config.nonfinite)}
    if role in _LOSSES:
        out["spike"] = LossSpikeDetector(config.spikes, evaluations=role is Role.EVAL_LOSS)
    if role is Role.GRAD_NORM:
        out["grad"] = GradNormDetector(config.grad_norm)
    if role is Role.LOSS_SCALE:
        out["scale"] = LossScaleDetector(config.loss_scale)
    if role is Role.LEARNING_RATE:
        out["zero_lr"] = ZeroLRDetector(p)
        out["warm_restart"] = WarmRestartDetector(config.schedule)
    if role is Role.LOSS:
        out["divergence"] = DivergenceDetector(config.trend)
        out["initial"] = InitialLevelDetector(p)
    if role is Role.EVAL_LOSS:
        out["eval_rise"] = EvalRiseDetector(config.overfitting)
        out["initial"] = InitialLevelDetector(p, evaluations=True)
    return out


_STATE_TYPES: dict[str, type] = {
    "nonfinite": NonFiniteState, "spike": SpikeState, "grad": GradNormState, "scale": LossScaleState,
    "zero_lr": ZeroLRState, "warm_restart": RestartState, "divergence": DivergenceState, "initial": InitialLevelState, "eval_rise": EvalRiseState,
}


def _new_tag(role: Role, config: AnalysisConfig) -> TagState:
    detectors = _detectors(role, config)
    states = {name: (d.start(role) if name == "nonfinite" else d.start()) for name, d in detectors.items()}
    return TagState(role=role, detectors=states, mean=running_mean.start() if role is Role.LOSS else None)


# -- feeding ----------------------------------------------------------------------------


def feed_run(
    state: RunState,
    writes: Mapping[str, TagWrites],
    resumes: tuple[Resume, ...] = (),
    config: AnalysisConfig = AnalysisConfig(),
    run: str = "",
    tail_points: int = TAIL_POINTS,
) -> tuple[RunState, list[Finding], list[Finding]]:
    """Feed the writes stored since `state` (per tag, in write order; `resumes`: every
    resume of the run so far).  Returns the new state, the findings final now (returned
    once) and those still open (returned by every feed until final).  Raises NeedsReplay
    when the writes rewrite steps the state has passed.  `state` is not changed."""
    _check(state, writes, resumes)
    state = _copy(state)
    state.config = config_key(config)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        views = _record_resumes(state, writes, resumes)
        roles = assign_roles([t for t in writes if t not in state.tags], config.roles, run)
        for tag in writes:
            if tag not in state.tags:
                state.tags[tag] = _new_tag(roles[tag], config)
        resumed = tuple(r.resume for r in state.resumes)
        for tag, (step, value) in views.items():
            if len(step):
                views[tag] = (step, _as_batches(tag, state.tags[tag], step, value, config, resumed))
                _summarise(state.tags[tag], step, views[tag][1], config)
        closed: list[Finding] = []
        windows = list(_windows(state, views, tail_points))
        complete: dict[str, set[str]] = {}
        for window, fed in zip(windows, _feed_detectors(state, windows, config)):
            _feed_window(state, window, fed, tail_points)
            _anchor(state, config, complete)
            closed += _settle(state, config, tail_points)
        open_ = _emit(state, _cross(state, config), final=False)
    state.shown = [_key(f) for f in open_]
    averaged = {tag: t.mean.period for tag, t in state.tags.items() if t.mean is not None and t.mean.period}
    return state, running_mean.noted(closed, averaged), running_mean.noted(open_, averaged)


def _as_batches(tag: str, t: TagState, step: np.ndarray, value: np.ndarray, config: AnalysisConfig,
                resumes: tuple[Resume, ...]) -> np.ndarray:
    """A tag's new points as the detectors should see them: a train loss logged as running
    means worked back to its batches' (its mean starts afresh where the run resumed).
    Raises NeedsReplay when these points change the values of steps already fed (the epochs
    learned: from the curve's start)."""
    if t.mean is None:
        return value
    t.mean, out, changed = running_mean.feed(t.mean, step, value, config.running_mean, restart_steps(resumes, tag))
    if changed is not None and changed <= t.last_step:
        raise NeedsReplay({tag: changed}, at_once=True)
    return out


def _copy(state: RunState) -> RunState:
    """A copy a feed may change: what it changes in place is copied, the rest (frozen
    detector states and findings, arrays it only ever replaces) is shared."""
    t = state.tally
    return RunState(
        tags={tag: replace(x, detectors=dict(x.detectors), open=dict(x.open), anchors=dict(x.anchors)) for tag, x in state.tags.items()},
        kept=[replace(k) for k in state.kept],
        resumes=[ResumeRecord(r.resume, dict(r.writes)) for r in state.resumes],
        past_spikes={k: list(v) for k, v in state.past_spikes.items()},
        past_restarts=list(state.past_restarts),
        finals=list(state.finals),
        shown=list(state.shown),
        tally=HealthTally(t.spikes, t.largest, t.above_band, {k: list(v) for k, v in t.still_up.items()}, dict(t.first)),
        points=state.points,
        config=state.config,
    )


def _check(state: RunState, writes: Mapping[str, TagWrites], resumes: tuple[Resume, ...]) -> None:
    rewrites: dict[str, int] = {}
    known = {r.resume.segment for r in state.resumes}
    for r in resumes:
        if r.segment in known:
            continue
        for tag, t in state.tags.items():
            if (not r.tags or tag in r.tags) and t.fed >= r.to_step:
                rewrites[tag] = min(rewrites.get(tag, r.to_step), r.to_step)
    for tag, w in writes.items():
        t = state.tags.get(tag)
        if t is not None and len(w.step) and int(w.step.min()) <= t.fed:
            low = int(w.step.min())
            rewrites[tag] = min(rewrites.get(tag, low), low)
    if rewrites:
        raise NeedsReplay(rewrites)


def _record_resumes(state: RunState, writes: Mapping[str, TagWrites], resumes: tuple[Resume, ...]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Note new resumes (with the writes of the steps they rewrite, for the restart
    finding) and return each tag's new points of the current view, sorted by step."""
    known = {r.resume.segment: r for r in state.resumes}
    for r in sorted(resumes, key=lambda r: r.segment):
        if r.segment not in known:
            record = ResumeRecord(r, {})
            for tag, t in state.tags.items():
                if t.role in (Role.LEARNING_RATE, Role.LOSS):
                    inside = (t.step >= r.to_step) & (t.step <= r.from_step)
                    k = int(inside.sum())
                    record.writes[tag] = TagWrites(t.step[inside], t.value[inside], np.full(k, r.segment - 1, np.int32))
            state.resumes.append(record)
            known[r.segment] = record
    for tag, w in writes.items():
        for record in state.resumes:
            r = record.resume
            around = (w.step >= r.to_step) & (w.step <= r.from_step) & (w.segment <= r.segment)
            if not around.any():
                continue
            kept = record.writes.get(tag, TagWrites(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int32)))
            segment = np.where(w.segment[around] < r.segment, r.segment - 1, r.segment).astype(np.int32)
            record.writes[tag] = TagWrites(
                np.concatenate([kept.step, w.step[around]])[-TAIL_POINTS:],
                np.concatenate([kept.value, w.value[around]])[-TAIL_POINTS:],
                np.concatenate([kept.segment, segment])[-TAIL_POINTS:],
            )
    views = {}
    all_resumes = tuple(rec.resume for rec in state.resumes)
    for tag, w in writes.items():
        step, value = np.asarray(w.step, np.int64), np.asarray(w.value, np.float64)
        resume_to = resume_steps(all_resumes, tag)
        settled = not resume_to or (len(step) and int(w.segment.min()) >= max(resume_to))
        if settled and np.all(step[1:] > step[:-1]):  # appended in order, nothing hidden: as it is
            views[tag] = (step, value)
            continue
        keep = current_view(np.zeros(len(step), np.int8), step, np.asarray(w.segment), resume_to)
        step, value = step[keep], value[keep]
        order = np.argsort(step, kind="stable")
        views[tag] = (step[order], value[order])
    return views


def _windows(state: RunState, views: dict[str, tuple[np.ndarray, np.ndarray]], tail_points: int):
    """The new points cut by step into windows of at most tail_points/4 points per tag (a
    feed that small is one), cut where each tag's count since its first point reaches a
    multiple of that."""
    size = max(1, tail_points // 4)
    if all(len(step) <= size for step, _ in views.values()):
        yield {tag: v for tag, v in views.items() if len(v[0])}  # a small feed: one window
        return
    cuts = set()
    for tag, (step, _) in views.items():
        done = state.tags[tag].points
        first = (-done) % size
        cuts.update(step[first::size].tolist() if len(step) else [])
    bounds = sorted(cuts)
    lo = None
    for hi in [*bounds, None]:
        window = {}
        for tag, (step, value) in views.items():
            a = 0 if lo is None else int(np.searchsorted(step, lo))
            b = len(step) if hi is None else int(np.searchsorted(step, hi))
            if b > a:
                window[tag] = (step[a:b], value[a:b])
        if window:
            yield window
        lo = hi


def _summarise(t: TagState, step: np.ndarray, value: np.ndarray, config: AnalysisConfig) -> None:
    """What the health summary keeps of a tag's new points (nothing reads it between
    windows: taken once per feed)."""
    finite = np.isfinite(value)
    fv, fs = (value, step) if finite.all() else (value[finite], step[finite])
    if t.first_step < 0:
        t.first_step = int(step[0])
    if len(fv):
        need = config.plateau.points - len(t.head)
        if need > 0:
            t.head = np.concatenate([t.head, fv[:need]])
        i = int(np.argmin(fv))
        if fv[i] < t.best:
            t.best, t.best_step = float(fv[i]), int(fs[i])
        t.peak = max(t.peak, float(fv.max()))
        t.last_finite = float(fv[-1])
    t.finite += len(fv)


def _feed_window(
    state: RunState, window: dict[str, tuple[np.ndarray, np.ndarray]], fed: dict[str, dict[str, Fed]], tail_points: int,
) -> None:
    for tag, (step, value) in window.items():
        t = state.tags[tag]
        for name, (new, done, still) in fed[tag].items():
            if new is not None:
                t.detectors[name] = new
            t.open[name] = still
            state.kept += [Kept(name, tag, f) for f in done]
        t.points += len(step)
        t.last_step = int(step[-1])
        if t.role in _TAILED:
            t.step = np.concatenate([t.step, step])[-tail_points:]
            t.value = np.concatenate([t.value, value])[-tail_points:]
        state.points += len(step)


Fed = tuple[Any, list[Finding], list[Finding]]  # a detector's state after a window (None: not needed), closed, open
Piece = tuple[np.ndarray, np.ndarray]
MAX_BLOCK = 64  # windows a quiet detector is fed at once


def _unread(state: Any, value: np.ndarray) -> bool:
    return True


def _not_at_zero(state: GradNormState, value: np.ndarray) -> bool:
    """A grad norm's state is read between windows only while it repeats 0 (a cause)."""
    return state.stuck.value != 0 and not bool((value == 0).any())


# Detectors whose states between windows no cross-tag step reads (given the state before
# a stretch and its values): those may be fed a stretch of windows at once.
_SKIPPABLE: dict[str, Callable[[Any, np.ndarray], bool]] = {
    "nonfinite": _unread, "spike": _unread, "scale": _unread, "divergence": _unread, "initial": _unread,
    "grad": _not_at_zero, "warm_restart": _unread,
}


def _feed_detectors(state: RunState, windows: list[dict[str, Piece]], config: AnalysisConfig) -> list[dict[str, dict[str, Fed]]]:
    """What each detector of each tag says after each window: per window, tag -> detector
    -> (state, closed, open), as if fed window by window."""
    out: list[dict[str, dict[str, Fed]]] = [{} for _ in windows]
    for tag, t in state.tags.items():
        pieces = [w.get(tag) for w in windows]
        if not any(p is not None for p in pieces):
            continue
        for name, detector in _detectors(t.role, config).items():
            skippable = _SKIPPABLE.get(name)
            for k, result in enumerate(_feed_quietly(detector, t.detectors[name], not t.open.get(name), pieces, tag, skippable)):
                if result is not None:
                    out[k].setdefault(tag, {})[name] = result
    return out


def _feed_quietly(
    detector: Any, state: Any, quiet: bool, pieces: list[Piece | None], tag: str,
    skippable: Callable[[Any, np.ndarray], bool] | None,
) -> list[Fed | None]:
    """What a detector says after each window (None where the tag has no points), feeding
    it whole stretches of quiet windows at once where its states between them are not read
    (`skippable`; None: never): a detector's findings do not depend on how its series is cut, and a feed
    costs about as much for 1,000 points as for 60,000, so a first scan of a long run costs
    what a one-shot analysis does.

    While nothing is open (`quiet`), a growing run of windows is fed at once from the
    state before it.  If that finds nothing, each window of it found nothing: a finding
    open at a window's end would still be open or closed at the run's (none is ever
    withdrawn) and closed ones are the same however the series is cut.  If it finds
    something, the windows ending before the first finding's start found nothing either,
    and they are fed at once again to reach the state before it; the next window is fed
    on its own, and window by window while a finding stays open.  The states between are
    None."""
    out: list[Fed | None] = [None] * len(pieces)
    present = [k for k, p in enumerate(pieces) if p is not None]
    i, block = 0, 1
    while i < len(present):
        span = present[i : i + (block if quiet and skippable else 1)]
        step, value = _joined(pieces, span)
        if len(span) > 1 and not skippable(state, value):  # type: ignore[misc]
            span = span[:1]
            step, value = _joined(pieces, span)
        new, done, still = detector.feed(state, step, value, tag)
        if len(span) > 1 and (done or still):
            first = min(f.start_step for f in done + still)
            span = [k for k in span if int(pieces[k][0][-1]) < first] or span[:1]  # type: ignore[index]
            new, done, still = detector.feed(state, *_joined(pieces, span), tag)
            block = 1
        else:
            block = min(2 * block, MAX_BLOCK)
        for k in span[:-1]:
            out[k] = (None, [], [])
        out[span[-1]] = (new, done, still)
        state, quiet, i = new, not still, i + len(span)
    return out


def _joined(pieces: list[Piece | None], span: list[int]) -> Piece:
    """The windows `span` (indices into `pieces`, all present) as one piece."""
    parts = [p for p in (pieces[k] for k in span) if p is not None]
    if len(parts) == 1:
        return parts[0]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


# -- anchors: the points an open incident began with --------------------------------------


def _anchor(state: RunState, config: AnalysisConfig, complete: dict[str, set[str]]) -> None:
    """Keep, on the loss tags, the points at the onset of each cause (LR or grad norm at
    zero: the loss level then) and of each eval rise (the train and eval losses at the best
    evaluation, and at the highest so far of the rise: once it is over, `judge` reads the
    train loss at both, and its noise over the 4 x `train_points` before the highest, every
    time it is judged again), while the tails still hold them; drop those no incident needs.
    `complete`: per tag, the anchors seen complete during this feed (never taken again)."""
    size = config.plateau.level_points
    want: dict[str, dict[str, tuple[int, int, int]]] = {}  # tag -> name -> (step, back, fwd)
    train = [tag for tag, t in state.tags.items() if t.role is Role.LOSS]
    for start in _cause_starts(state):
        for tag in train:
            want.setdefault(tag, {})[f"from:{start}"] = (start, 0, size)
    rises = _group(state, "eval_rise")
    points = {t: state.tags[t].finite for t in train}
    for tag, best in _best_steps(state, rises):
        counterpart = train_counterpart(tag, points)
        want.setdefault(tag, {})[f"at:{best}"] = (best, 2, 1)
        if counterpart is not None:
            want.setdefault(counterpart, {})[f"at:{best}"] = (best, config.overfitting.train_points, 1)
    for tag, peak in {(tag, f.peak_step) for tag, f in rises if f.peak_step is not None}:
        counterpart = train_counterpart(tag, points)
        want.setdefault(tag, {})[f"at:{peak}"] = (peak, 2, 1)
        if counterpart is not None:
            want.setdefault(counterpart, {})[f"peak:{peak}"] = (peak, 4 * config.overfitting.train_points, 1)
    for tag, t in state.tags.items():
        wanted = want.get(tag, {})
        t.anchors = {k: v for k, v in t.anchors.items() if k in wanted}
        done = complete.setdefault(tag, set())
        done.intersection_update(wanted)  # one dropped now is taken again if wanted later
        wanted = {k: w for k, w in wanted.items() if k not in done}
        done.update(k for k, w in wanted.items() if _complete(t.anchors.get(k), w))
        wanted = {k: w for k, w in wanted.items() if k not in done}
        if not wanted:
            continue
        finite = np.isfinite(t.value)
        s, v = t.step[finite], t.value[finite]
        whole = t.points <= len(t.step)
        for name, (at, back, fwd) in wanted.items():
            i = int(np.searchsorted(s, at))
            if not (whole or (len(s) and s[0] < at and i >= back)):
                continue  # the tail has moved past it: keep what was taken
            a = max(0, int(np.searchsorted(s, at, side="right")) - back) if back else i
            b = min(len(s), i + fwd)
            t.anchors[name] = (s[a:b].copy(), v[a:b].copy())


def _complete(anchor: tuple[np.ndarray, np.ndarray] | None, wanted: tuple[int, int, int]) -> bool:
    """Whether an anchor taken already holds all `fwd` points from its step on: taking it
    again from the tail would give the same points (those before its step were complete
    when it was taken, or are all the series has)."""
    if anchor is None:
        return False
    at, _, fwd = wanted
    return len(anchor[0]) - int(np.searchsorted(anchor[0], at)) >= fwd


def _cause_starts(state: RunState) -> set[int]:
    """Where the causes kept begin, and where a stretch of zero LR or zero grad norm that
    may become one began (its loss level then is taken before the tail moves on)."""
    starts = {f.start_step for f in _causes_raw(state)}
    for t in state.tags.values():
        zero = t.detectors.get("zero_lr")
        if isinstance(zero, ZeroLRState) and zero.since >= 0:
            starts.add(zero.since)
        grad = t.detectors.get("grad")
        if isinstance(grad, GradNormState) and grad.stuck.value == 0 and grad.stuck.points:
            starts.add(grad.stuck.start_step)
    return starts


def _best_steps(state: RunState, rises: list[tuple[str, Finding]]) -> set[tuple[str, int]]:
    """The best evaluation of each eval rise kept (`rises`), and the current best of each
    eval loss (where the next rise would be judged from)."""
    out = {(tag, f.start_step) for tag, f in rises}
    for tag, t in state.tags.items():
        rise = t.detectors.get("eval_rise")
        if isinstance(rise, EvalRiseState) and rise.best_step >= 0:
            out.add((tag, rise.best_step))
    return out


def _series(state: RunState, tag: str) -> Series:
    """A tag's tail as the batch steps take it, with its anchors before it."""
    t = state.tags[tag]
    step, value = t.step, t.value
    first = int(step[0]) if len(step) else None
    extra = [a for a in t.anchors.values() if len(a[0])]
    if extra and first is not None and t.points > len(step):
        s = np.concatenate([a[0] for a in extra])
        v = np.concatenate([a[1] for a in extra])
        s, i = np.unique(s, return_index=True)
        v = v[i]
        before = s < first
        step, value = np.concatenate([s[before], step]), np.concatenate([v[before], value])
    finite = np.isfinite(value)
    return Series(tag, t.role, step, value, finite, step[finite], value[finite], logging_interval(step))


# -- the cross-tag steps, on findings and tails -------------------------------------------


def _group(state: RunState, group: str) -> list[tuple[str, Finding]]:
    """A detector's findings, closed (in order) then open, tag by tag in the run's order."""
    kept: dict[str, list[Finding]] = {}
    for k in state.kept:  # one pass: up to MAX_KEPT, and this runs after every window
        if k.group == group:
            kept.setdefault(k.tag, []).append(k.finding)
    out = []
    for tag, t in state.tags.items():
        out += [(tag, f) for f in kept.get(tag, ())]
        out += [(tag, f) for f in t.open.get(group, [])]
    return out


def _causes_raw(state: RunState) -> list[Finding]:
    grad = [f for _, f in _group(state, "grad") if f.kind is Kind.GRAD_NORM_STUCK and f.peak_value == 0]
    return [f for _, f in _group(state, "zero_lr")] + grad


class _Tails(dict):
    """Tag -> its tail as a Series, made when first asked for: the cross-tag steps read a
    tail only about a finding, and most feeds have none to judge."""

    def __init__(self, state: RunState) -> None:
        super().__init__()
        self.state = state

    def __missing__(self, tag: str) -> Series:
        made = self[tag] = _series(self.state, tag)
        return made


def _cross(state: RunState, config: AnalysisConfig) -> list[Finding]:
    """`analyzers.analyze._analyze`'s joins, on the findings kept and the tails."""
    tags = state.tags
    by_role = {role: [tag for tag, t in tags.items() if t.role is role] for role in Role}
    series = _Tails(state)
    losses = by_role[Role.LOSS] + by_role[Role.EVAL_LOSS]
    spikes = [f for tag, f in _group(state, "spike") if tag in losses]
    spikes.sort(key=lambda f: losses.index(f.tag))  # train losses first, as the batch path
    explosions = [f for _, f in _group(state, "grad")]
    explosions, spikes = join_explosions(explosions, spikes, config.incident_steps)
    lr_restarts = state.past_restarts + [(f.start_step, f.end_step, f.evidence["cycle"]) for _, f in _group(state, "warm_restart")]
    trends = _trends(state, config, series, by_role, spikes, explosions, lr_restarts)
    spikes = [s for s in spikes if not overfitting_tells(s, trends)]
    reported = [s for s in spikes if not after_warm_restart(s, lr_restarts, config.schedule, tags[s.tag].last_step)]
    fp16 = bool(by_role[Role.LOSS_SCALE])
    nonfinite = []
    for tag, f in _group(state, "nonfinite"):
        if f.severity is Severity.CRITICAL and tags[tag].role is Role.GRAD_NORM:
            f = hidden_nan(f, series[tag], [series[t] for t in by_role[Role.LOSS]])
        nonfinite.append(under_fp16(f) if fp16 and f.severity >= Severity.WARNING else f)
    nonfinite = [
        f for f in nonfinite
        if not told_by_loss_nan(f, nonfinite, set(losses), set(by_role[Role.GRAD_NORM])) and not inside_explosion(f, explosions)
    ]
    explosions = unfelt(explosions, spikes + trends + nonfinite, set(losses), config.incident_steps, config.grad_norm.quiet_points)
    scale = [f for _, f in _group(state, "scale")]
    run = RunSeries({tag: series[tag] for tag in tags}, {}, ()) if state.resumes else None
    restarts = []
    detector = RestartDetector(config.restarts)
    for record in state.resumes:
        empty = TagWrites(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int32))
        at = replace(run, writes={tag: record.writes.get(tag, empty) for tag in tags})
        restarts.append(detector.finding(at, record.resume, spikes))
    findings = reported + explosions + nonfinite + scale + trends + restarts
    return sorted(findings, key=lambda f: (f.start_step, f.kind.value, f.tag))


def _trends(
    state: RunState, config: AnalysisConfig, series: _Tails, by_role: dict[Role, list[str]],
    spikes: list[Finding], grad: list[Finding], lr_restarts: list[tuple[int, int | None, int]],
) -> list[Finding]:
    p = config.plateau
    causes = [f for _, f in _group(state, "zero_lr")]
    causes += [f for f in grad if f.kind is Kind.GRAD_NORM_STUCK and f.peak_value == 0]
    lr_tags = by_role[Role.LEARNING_RATE]
    found = []
    for tag in by_role[Role.LOSS]:
        mine = [f for t, f in _group(state, "divergence") if t == tag]
        if mine:
            past = [_past_spike(tag, *spike) for spike in state.past_spikes.get(tag, [])]
            rises = [f for f in mine if not explained_by_spike(f, past + spikes)]
            found += [f for f in rises if not rise_after_warm_restart(f, lr_restarts, state.tags[tag].last_step)]
        unmoved = [f for t, f in _group(state, "initial") if t == tag and not _warming_up(series, lr_tags, f)]
        found += merge_plateaus(unmoved + (stalled_plateaus(series[tag], causes, p) if causes else []))
    for tag in by_role[Role.EVAL_LOSS]:
        rises = [r for t, r in _group(state, "eval_rise") if t == tag]
        if rises:
            twin = train_counterpart(tag, {t: state.tags[t].finite for t in by_role[Role.LOSS]})
            judged = [judge(r, series[tag], series[twin] if twin else None, config.overfitting) for r in rises]
            past = [_past_spike(tag, *spike) for spike in state.past_spikes.get(tag, [])]
            judged = [f for f in judged if not spike_tells_eval_rise(f, past + spikes)]
            found += [f for f in judged if not rise_after_warm_restart(f, lr_restarts, state.tags[tag].last_step)]
        found += [f for t, f in _group(state, "initial") if t == tag and not _warming_up(series, lr_tags, f)]
    return found


def _warming_up(series: _Tails, lr_tags: list[str], plateau: Finding) -> bool:
    """`warming_up` against the run's first LR tag, if it has one."""
    return warming_up(series[lr_tags[0]] if lr_tags else None, plateau)


def _past_spike(tag: str, start: int, fast: bool, end: int | None) -> Finding:
    """What `explained_by_spike` needs of a spike no longer kept: its tag, onset, class and
    where the loss came back from it (None: it did not)."""
    kind = SpikeClass.FAST_RECOVERING if fast else SpikeClass.SLOW_RECOVERING if end is not None else SpikeClass.DIVERGENT
    return Finding(Kind.LOSS_SPIKE, tag, Severity.INFO, start, "", "", classification=kind, end_step=end)


# -- what is final ----------------------------------------------------------------------


def _key(f: Finding) -> tuple[str, str, int]:
    return (f.tag, f.kind.value, f.start_step)


def _reach(f: Finding) -> int:
    return max(f.start_step, f.end_step if f.end_step is not None else f.start_step, f.peak_step or f.start_step)


def _settle(state: RunState, config: AnalysisConfig, tail_points: int) -> list[Finding]:
    """Make final the kept findings every tail has moved well past (or the oldest, past
    MAX_KEPT), return the cross-tag findings they settle, and forget the context every
    tail has left behind."""
    full = [t for t in state.tags.values() if len(t.step) >= tail_points]
    cutoff = min((int(t.step[tail_points // 2]) for t in full), default=None)
    live = [k for k in state.kept if not k.done]
    ripe = [k for k in live if cutoff is not None and _reach(k.finding) < cutoff]
    extra = len(state.kept) - MAX_KEPT
    if extra > 0:
        chosen = {id(k) for k in ripe}
        ripe += [k for k in live if id(k) not in chosen][:extra]
    if not ripe:
        _forget(state, tail_points, config.incident_steps)
        return []
    done_keys = {(k.tag, k.finding.start_step) for k in ripe} | {(k.tag, k.finding.start_step) for k in state.kept if k.done}
    cause_starts = {k.finding.start_step for k in ripe if k.group == "zero_lr" or (k.group == "grad" and k.finding.kind is Kind.GRAD_NORM_STUCK)}
    for k in ripe:
        k.done = True
    live_keys = {(k.tag, k.finding.start_step) for k in state.kept if not k.done}
    live_keys |= {(tag, f.start_step) for tag, t in state.tags.items() for fs in t.open.values() for f in fs}
    final = []
    for f in _cross(state, config):
        here = (f.tag, f.start_step)
        if f.kind is Kind.RESTART or here in live_keys:
            continue
        if here in done_keys or (f.kind is Kind.PLATEAU and not f.ongoing and f.start_step in cause_starts):
            final.append(f)
    closed = _emit(state, final, final=True)
    for f in closed:
        _tally(state.tally, f, state)
    _forget(state, tail_points, config.incident_steps)
    return closed


def _emit(state: RunState, findings: list[Finding], final: bool) -> list[Finding]:
    """`findings` less those already returned as final; `final`: these now are."""
    seen = set(state.finals)
    out = [f for f in findings if _key(f) not in seen]
    if final:
        state.finals = (state.finals + [_key(f) for f in out])[-4 * MAX_KEPT :]
    return out


def _forget(state: RunState, tail_points: int, lead: int) -> None:
    """Drop final findings every tail has left behind (and, past MAX_KEPT, the oldest), but
    not a grad-norm explosion that leads a loss spike still open (within `lead` steps, as
    `join_explosions` pairs them): the spike's evidence names it as long as it is open.
    Run after every window, so what is kept depends on where the tails stand, not on where
    a run was cut into feeds."""
    full = [t for t in state.tags.values() if len(t.step) >= tail_points]
    oldest = min((int(t.step[0]) for t in full), default=None)
    behind = [k for k in state.kept if k.done and oldest is not None and _reach(k.finding) < oldest]
    if any(k.group == "grad" for k in behind):  # the open spikes, read only when one may lead them
        open_spikes = [k.finding.start_step for k in state.kept if k.group == "spike" and not k.done]
        open_spikes += [f.start_step for t in state.tags.values() for f in t.open.get("spike", [])]
        behind = [k for k in behind if not _leads(k, open_spikes, lead)]
    dropped = {id(k) for k in behind}
    keep = []
    for k in state.kept:
        if id(k) in dropped:
            _remember(state, k)
        else:
            keep.append(k)
    while len(keep) > MAX_KEPT and any(k.done for k in keep):
        i = next(i for i, k in enumerate(keep) if k.done)
        _remember(state, keep.pop(i))
    state.kept = keep


def _leads(k: Kept, spike_starts: list[int], lead: int) -> bool:
    """Whether a kept grad-norm explosion leads (or spans) the onset of one of these spikes."""
    f = k.finding
    if k.group != "grad" or f.kind is not Kind.GRAD_NORM_EXPLOSION:
        return False
    return any(f.start_step - lead <= s <= max(f.start_step + lead, f.end_step or f.start_step) for s in spike_starts)


def _remember(state: RunState, k: Kept) -> None:
    """What the cross-tag steps still need of a final finding dropped from `kept`: a
    spike's onset and outcome (a divergence may be explained by it), a warm restart's steps
    (a spike still kept may have followed it)."""
    if k.group == "warm_restart":
        state.past_restarts.append((k.finding.start_step, k.finding.end_step, k.finding.evidence["cycle"]))
        del state.past_restarts[:-MAX_PAST_RESTARTS]
    if k.group == "spike":
        past = state.past_spikes.setdefault(k.tag, [])
        f = k.finding
        past.append((f.start_step, f.classification is SpikeClass.FAST_RECOVERING, f.end_step))
        del past[:-MAX_PAST_SPIKES]


# -- health -----------------------------------------------------------------------------


def _loss_tags(state: RunState) -> set[str]:
    return {tag for tag, t in state.tags.items() if t.role in _LOSSES}


def _categories(f: Finding, losses: set[str]) -> list[str]:
    """Which of the health summary's "first such finding" a finding counts for."""
    out = []
    if f.tag in losses and f.ongoing and (
        f.kind is Kind.DIVERGENCE
        or (f.kind is Kind.LOSS_SPIKE and f.classification is SpikeClass.DIVERGENT)
        or (f.kind is Kind.NONFINITE and f.severity is Severity.CRITICAL)
    ):
        out.append("diverged")
    for kind, name in ((Kind.PLATEAU, "stalled"), (Kind.OVERFITTING, "overfitting")):
        if f.kind is kind and f.ongoing and f.severity >= Severity.WARNING:
            out.append(name)
    if unsettling(f):
        out.append(f"unstable{int(f.severity)}")
    return out


def _order(f: Finding) -> tuple:
    return (f.start_step, f.kind.value, f.tag)


def _tally(tally: HealthTally, f: Finding, state: RunState) -> None:
    losses = _loss_tags(state)
    for name in _categories(f, losses):
        said = told(f, "since" if name in ("diverged", "stalled", "overfitting") else "at")
        if name not in tally.first or _order(f) < tally.first[name][0]:
            tally.first[name] = (_order(f), said)
    if f.kind is not Kind.LOSS_SPIKE or f.tag not in losses:
        return
    tally.spikes += 1
    rank = (f.ratio if f.ratio is not None and math.isfinite(f.ratio) else -math.inf, f.peak_value or 0.0)
    if tally.largest is None or rank > tally.largest[0]:
        tally.largest = (rank, {"tag": f.tag, "step": f.start_step, "ratio": _finite(f.ratio),
                                "peak_value": _finite(f.peak_value), "baseline": _finite(f.baseline)})
    if f.end_step is not None:
        tally.above_band += max(0, f.end_step - f.start_step)
    else:
        up = tally.still_up.setdefault(f.tag, [0, 0])
        up[0] += 1
        up[1] += f.start_step


def _finite(x: float | None) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def run_health(state: RunState, open_findings: list[Finding], config: AnalysisConfig = AnalysisConfig()) -> RunHealth:
    """`analyzers.health.run_health` of the whole run: the tally of the final findings and
    the open ones."""
    tally = copy.deepcopy(state.tally)
    for f in open_findings:
        _tally(tally, f, state)
    losses = _loss_tags(state)
    last = {tag: t.fed for tag, t in state.tags.items() if t.points}
    above = tally.above_band + sum(n * last[tag] - onsets for tag, (n, onsets) in tally.still_up.items())
    span = [last[tag] - state.tags[tag].first_step for tag in losses if tag in last]
    steps = max(span, default=0)
    return RunHealth(
        status=(status := _status(state, tally, config))[0],
        reason=status[1],
        spikes=tally.spikes,
        spikes_per_1k_steps=round(1000 * tally.spikes / steps, 3) if steps else None,
        largest_spike=tally.largest[1] if tally.largest else None,
        steps_above_band=above,
        best_eval=_best(state),
        last_step=max(last.values(), default=None),
    )


def _status(state: RunState, tally: HealthTally, config: AnalysisConfig) -> tuple[Health, str]:
    for name, health in (("diverged", Health.DIVERGED), ("stalled", Health.STALLED), ("overfitting", Health.OVERFITTING)):
        if name in tally.first:
            return health, tally.first[name][1]
    for severity in sorted(Severity, reverse=True):
        if f"unstable{int(severity)}" in tally.first:
            return Health.UNSTABLE, tally.first[f"unstable{int(severity)}"][1]
    train = [tag for tag, t in state.tags.items() if t.role is Role.LOSS]
    if train:
        t = state.tags[train[0]]
        finite = np.isfinite(t.value)
        lrs = [x for x in state.tags.values() if x.role is Role.LEARNING_RATE]
        lr_tag = next((tag for tag, x in state.tags.items() if x.role is Role.LEARNING_RATE), None)
        lr = (lr_tag, lrs[0].last_finite, lrs[0].peak) if lrs and lrs[0].finite else None
        why = converged(train[0], t.head, t.finite, t.step[finite], t.value[finite], lr, config.plateau, config.health)
        if why:
            return Health.CONVERGED, why
    evals = [tag for tag, t in state.tags.items() if t.role is Role.EVAL_LOSS]
    return Health.HEALTHY, "nothing wrong seen" if train or evals else "no loss logged"


def _best(state: RunState) -> dict[str, Any] | None:
    for tag in sorted(tag for tag, t in state.tags.items() if t.role is Role.EVAL_LOSS):
        t = state.tags[tag]
        if t.finite:
            return {"tag": tag, "step": t.best_step, "value": t.best}
    return None


# -- at rest ----------------------------------------------------------------------------


def dumps(state: RunState) -> bytes:
    """The state at rest: zlib-compressed JSON, then the bytes of its arrays (`_Packer`)."""
    packer = _Packer()
    text = zlib.compress(json.dumps(_plain(state, packer), separators=(",", ":")).encode(), 1)
    return len(text).to_bytes(8, "little") + text + b"".join(packer.parts)


def loads(data: bytes) -> RunState:
    """The state `dumps` saved; StateOutdated if it was saved in another format."""
    size = int.from_bytes(data[:8], "little")
    arrays = memoryview(data)[8 + size :]
    plain = json.loads(zlib.decompress(data[8 : 8 + size]))
    if plain.get("format") not in READ_FORMATS:
        raise StateOutdated(f"state format {plain.get('format', 1)}, expected {STATE_FORMAT}")
    return _run_state(plain, lambda d: _unarray(d, arrays))


class _Packer:
    """Arrays as bytes after the JSON, each described by a short list: a state holds some
    fifty, packed on every save, and most of a run's state is its tails (4,096 steps and
    values per tag), so the common shapes are packed for what they are:

    * integers in one stride (a tail's steps, nearly always): [dtype, "s", first, stride, n],
      no bytes at all;
    * other integers: [dtype, "d", at, size], their differences zlib-compressed (a few
      bytes for mostly one stride), or raw [dtype, "r", at, size] when short;
    * floats that float32 holds exactly (TensorBoard stores scalars as float32, and so do
      most training loops before they log): [dtype, "f4", at, size], half the bytes; other
      floats, and short ones, raw (noisy values do not compress enough to pay for it on
      every save)."""

    RAW_BYTES = 64  # below this, packing an array another way costs more than it saves

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0

    def __call__(self, a: np.ndarray) -> list:
        dtype = a.dtype.str
        if not len(a):  # a fifth of a state's arrays
            return [dtype, "r", self.size, 0]
        if a.dtype.kind in "iu" and len(a) > 1:
            d = _differences(a)
            if len(a) > 2 and (d[2:] == d[1]).all():
                return [dtype, "s", int(a[0]), int(d[1]), len(a)]
            if a.nbytes > self.RAW_BYTES:
                return [dtype, "d", *self._add(zlib.compress(d.tobytes(), 1))]
        elif a.dtype == np.float64 and a.nbytes > self.RAW_BYTES and _float32_exact(float(a[-1])):  # the newest value tells most apart
            with np.errstate(over="ignore"):  # past float32's range: inf, not equal, kept raw
                narrow = a.astype(np.float32)
            same = narrow == a
            if same.all() or (same | np.isnan(a)).all():  # a NaN stays NaN in float32
                return [dtype, "f4", *self._add(narrow.tobytes())]
        return [dtype, "r", *self._add(np.ascontiguousarray(a).tobytes())]

    def _add(self, raw: bytes) -> tuple[int, int]:
        self.parts.append(raw)
        self.size += len(raw)
        return self.size - len(raw), len(raw)


def _float32_exact(x: float) -> bool:
    """Whether float32 holds x exactly (NaN and inf: yes), without a cast that overflows."""
    try:
        return struct.unpack("f", struct.pack("f", x))[0] == x or x != x
    except OverflowError:  # past float32's range
        return False


def _differences(a: np.ndarray) -> np.ndarray:
    """`np.diff(a, prepend=0)` without its general machinery (a state holds some fifty
    arrays, packed on every save)."""
    out = np.empty_like(a)
    out[0] = a[0]
    np.subtract(a[1:], a[:-1], out=out[1:])
    return out


def _unarray(d: list, arrays: memoryview) -> np.ndarray:
    """The array a `_Packer` description names."""
    dtype, how = _dtype(d[0]), d[1]
    if how == "s":
        first, stride, n = d[2:]
        return np.arange(n, dtype=dtype) * dtype.type(stride) + dtype.type(first)
    raw = arrays[d[2] : d[2] + d[3]]
    if how == "d":
        return np.frombuffer(zlib.decompress(raw), dtype=dtype).cumsum(dtype=dtype)
    if how == "f4":
        return np.frombuffer(raw, dtype=np.float32).astype(dtype)
    return np.frombuffer(raw, dtype=dtype).copy()


@functools.cache
def _dtype(name: str) -> np.dtype:
    """`np.dtype(name)`, parsed once per name (a load reads some fifty arrays of four dtypes)."""
    return np.dtype(name)


_SCALARS = frozenset({int, float, bool, str, type(None)})


def _detector_plain(x: Any, pack) -> Any:
    """A detector's state as `StreamState.to_dict` gives it, but its arrays packed as bytes
    (a spike detector's state holds a few hundred points).  Plain numbers, most of the
    fields, are answered first: a save walks some 150 fields."""
    if type(x) in _SCALARS:
        return x
    if isinstance(x, StreamState):
        return {name: _detector_plain(getattr(x, name), pack) for name, _, _ in _layout(type(x))}
    if isinstance(x, np.ndarray):
        return {"@": pack(x)}
    if isinstance(x, tuple):
        return [_detector_plain(v, pack) for v in x]
    return x.item() if isinstance(x, np.generic) else x


def _detector_state(cls: type, data: dict, unpack) -> Any:
    """The inverse of `_detector_plain`, typed by the state class's fields."""
    values = {}
    for name, nested, items in _layout(cls):
        raw = data[name]
        if raw is None:
            values[name] = None
        elif nested is not None:
            values[name] = _detector_state(nested, raw, unpack)
        elif isinstance(raw, dict) and "@" in raw:
            values[name] = unpack(raw["@"])
        elif isinstance(raw, list) and items is not None:
            values[name] = tuple(_detector_state(items, v, unpack) for v in raw)
        elif isinstance(raw, list):
            values[name] = tuple(raw)
        else:
            values[name] = raw
    return cls(**values)


@functools.cache
def _layout(cls: type) -> tuple[tuple[str, type | None, type | None], ...]:
    """A state class's fields as (name, the state class it nests, the state class of the
    incidents it holds in a tuple): worked out once per class, as every analysis loads and
    saves a state of some fifty nested ones."""
    hints = field_types(cls)
    out = []
    for f in fields(cls):
        hint = required(hints[f.name])
        nested = hint if isinstance(hint, type) and issubclass(hint, StreamState) else None
        out.append((f.name, nested, typing.get_args(hint)[0] if of_states(hint) else None))
    return tuple(out)


def _finding_plain(f: Finding) -> dict:
    return {
        "kind": f.kind.value, "tag": f.tag, "severity": int(f.severity), "start_step": f.start_step, "message": f.message,
        "remediation": f.remediation, "peak_step": f.peak_step, "end_step": f.end_step, "recovery_steps": f.recovery_steps,
        "peak_value": f.peak_value, "baseline": f.baseline, "ratio": f.ratio,
        "classification": f.classification.value if f.classification else None, "ongoing": f.ongoing,
        "evidence": _jsonable(f.evidence),
    }


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x


def _finding(d: dict) -> Finding:
    return Finding(**{**d, "kind": Kind(d["kind"]), "severity": Severity(d["severity"]),
                      "classification": SpikeClass(d["classification"]) if d["classification"] else None})


def _plain(state: RunState, _array) -> dict:
    tags = {}
    for tag, t in state.tags.items():
        tags[tag] = {
            "role": t.role.value, "detectors": {k: _detector_plain(s, _array) for k, s in t.detectors.items()},
            "open": {k: [_finding_plain(f) for f in fs] for k, fs in t.open.items()},
            "step": _array(t.step), "value": _array(t.value), "points": t.points, "last_step": t.last_step, "finite": t.finite,
            "first_step": t.first_step, "head": _array(t.head), "best": t.best, "best_step": t.best_step, "peak": t.peak,
            "last_finite": t.last_finite, "anchors": {k: [_array(s), _array(v)] for k, (s, v) in t.anchors.items()},
            "mean": None if t.mean is None else _detector_plain(t.mean, _array),
        }
    tally = state.tally
    return {
        "format": STATE_FORMAT,
        "tags": tags,
        "kept": [{"group": k.group, "tag": k.tag, "finding": _finding_plain(k.finding), "done": k.done} for k in state.kept],
        "resumes": [
            {"resume": [r.resume.from_step, r.resume.to_step, r.resume.segment, r.resume.wall_time, list(r.resume.tags)],
             "writes": {tag: [_array(w.step), _array(w.value), _array(w.segment)] for tag, w in r.writes.items()}}
            for r in state.resumes
        ],
        "past_spikes": state.past_spikes,
        "past_restarts": state.past_restarts,
        "finals": state.finals,
        "shown": state.shown,
        "tally": {"spikes": tally.spikes, "largest": tally.largest, "above_band": tally.above_band,
                  "still_up": tally.still_up, "first": tally.first},
        "points": state.points,
        "config": state.config,
    }


def _run_state(d: dict, _unarray) -> RunState:
    tags = {}
    for tag, x in d["tags"].items():
        tags[tag] = TagState(
            role=Role(x["role"]), detectors={k: _detector_state(_STATE_TYPES[k], s, _unarray) for k, s in x["detectors"].items()},
            open={k: [_finding(f) for f in fs] for k, fs in x["open"].items()},
            step=_unarray(x["step"]), value=_unarray(x["value"]), points=x["points"], last_step=x["last_step"],
            finite=x["finite"],
            first_step=x["first_step"], head=_unarray(x["head"]), best=x["best"], best_step=x["best_step"], peak=x["peak"],
            last_finite=x["last_finite"], anchors={k: (_unarray(s), _unarray(v)) for k, (s, v) in x["anchors"].items()},
            mean=None if x["mean"] is None else _detector_state(MeanState, x["mean"], _unarray),
        )
    resumes = []
    for r in d["resumes"]:
        f, to, seg, wall, only = r["resume"]
        writes = {tag: TagWrites(_unarray(s), _unarray(v), _unarray(g)) for tag, (s, v, g) in r["writes"].items()}
        resumes.append(ResumeRecord(Resume(f, to, seg, wall, tuple(only)), writes))
    t = d["tally"]
    largest = (tuple(t["largest"][0]), t["largest"][1]) if t["largest"] else None
    first = {k: (tuple(v[0]), v[1]) for k, v in t["first"].items()}
    return RunState(
        tags=tags,
        kept=[Kept(k["group"], k["tag"], _finding(k["finding"]), k["done"]) for k in d["kept"]],
        resumes=resumes,
        past_spikes={k: [tuple(x) for x in v] for k, v in d["past_spikes"].items()},
        past_restarts=[tuple(x) for x in d["past_restarts"]],
        finals=[tuple(x) for x in d["finals"]],
        shown=[tuple(x) for x in d["shown"]],
        tally=HealthTally(t["spikes"], largest, t["above_band"], {k: list(v) for k, v in t["still_up"].items()}, first),
        points=d["points"],
        config=d["config"],
    )

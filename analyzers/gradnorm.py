"""Grad-norm explosions, judged against a level the instability does not drag up, and grad
norms that are not really being logged (stuck at 0 or at one repeated value).

Level.  A point is judged against the median of the `window` (32) finite values before it,
which follows warmup and decay, except inside an unstable stretch.  A point `elevated` (3)
times over that median opens one, and the level stays frozen at the median just before it
while the stretch lasts.  A stretch closes once `window` points in a row are back under
`elevated` times the frozen level (the trailing window then holds calm values only), or after
`hold_points` (200) points if it never calms: an elevated norm that lasts that long is the
run's new level (a resume with a larger batch, a raised LR).  Why frozen: during a divergence
the norm stays up for hundreds of steps (the 104B run of the domain notes took ~200 iterations
to come down), a trailing median rises with it, and a further 10x jump on top is then no
longer 10x its baseline (issue 10, tests/curves.py `plant_unstable_explosions`).  3x is half
an order of magnitude: llm.c's healthy GPT-2 norm throws one-step 3-7x blips that fall back at
the next point, which open a stretch that changes nothing.  The cost is a sudden legitimate
shift: CPM-Ant's daily norm went 0.27 -> 0.75-1.0 at a resume (3.3x) and its level stayed
0.3 for the 58 days until the norm fell back, so a 3x blip on top would have counted (its
largest was 7.6x).  A norm that rises gradually (8x over a warmup) never opens a stretch
(tests/curves.py `move_grad_norm`).  No level before `min_points` (8) values.

Explosion.  A point at least `ratio` (10) times the level: an order of magnitude, the
smallest jump the logbooks call an explosion (BLOOM-176B: 0.24 -> 960 over five steps; 3-7x
blips are not).  A new one opens only at a point that also stands `elevated` times over the
trailing median: a jump, not a norm still elevated after an explosion and back over the
line (`charlm_lr_units_bug_j`, bench/labels trained: 13-27x at once, then down from about 20
to 1 over 250 points, its 2-3x blips crossing 10x its last calm level four times, each told
as an explosion of its own), nor one that drifted there (`sample_runs/fp16_overflow`: 1 ->
12 over the 200 steps its inputs grew).  Points over the line with fewer than `gap_points`
(3) points below between them are one explosion (a norm flickering around the line in one
incident); it closes after `gap_points` points below.  An explosion that has lasted
`settle_points` (8) points and then jumps `ratio` times over the median of its last
`settle_points` points starts a new one: the norm exploded again on top of an elevated
level.  Eight points keep BLOOM's climb one explosion (it rose 6-9x per step over its first
three points over the line).

An overflow (+Inf) stands over the line too: fp16 runs log Inf for the steps the scaler
skips, and an explosion under fp16 often opens with a few of them (the char-LMs' LR jumps,
bench/trained `charlm_fp16_lr_jump` and `charlm_fp16_collapse_b`: Inf at 4 steps, then
9-15x), so its onset is the first Inf.  An explosion of Inf points only (an overflow skip)
is left to the NaN/Inf detector; its peak and size are of its finite points.

An explosion is told once a second point stands over the line and one of them is finite,
or when it closes.  Once over, it is informational unless a loss spike follows it
(`analyzers.incidents.join_explosions`): a one-point jump back at the next point (a 12x
blip of a char-LM's fp16 grad norm, `charlm_fp16_lr_jump` at step 1736, with the loss
unmoved), and a few points of it too (public HF Trainer logs of two classifiers fine-tuned
to a loss near 0, a CodeBERT run among them, whose norm near 0.03-0.05 jumps to 1-70 for a
few points every few hundred steps: eight warnings in the two, the loss never moving).  While
it lasts it is a warning: told early, as an explosion usually leads a loss spike; until the
loss has gone on `quiet_points` (8) points and `incident_steps` steps with nothing starting
on it (`analyzers.incidents.unfelt`): a regression fine-tune's norm grew 10-20x as its LR
warmed up and stayed there, the loss still falling, a warning to the end of its run.

Stuck.  `stuck_points` (50) identical finite values in a row: a norm that is not measured,
or steps that are skipped.  Unless the values already repeated by their rounding before the
run began: a norm printed to 2 decimals near 0.02 repeats 0.01 or 0.02 for 50-150 points at
a time (6-10 warnings a run), where a norm logged at full precision never repeats.  At
least `rounding_share` (10%) of the `rounding_pairs` (128) consecutive pairs before the run
equal: its repeats are the printer's.  A norm stuck from its first point, or after values
that never repeated, still is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import bottleneck as bn
import numpy as np

from analyzers.baseline import row_medians
from analyzers.findings import Finding, Kind, Severity
from analyzers.series import Series
from analyzers.stream import StreamState, detect_at_once, finite_points, points_where, run_lengths


@dataclass(frozen=True)
class GradNormConfig:
    ratio: float = 10.0  # an explosion is at least this many times the level
    elevated: float = 3.0  # this many times the trailing median opens an unstable stretch
    window: int = 32  # points in the trailing median
    min_points: int = 8  # no level before this many values
    hold_points: int = 200  # longest the level stays frozen in an unstable stretch
    gap_points: int = 3  # this many points below the line end an explosion
    settle_points: int = 8  # an explosion this long that jumps again is a new one
    quiet_points: int = 8  # one this long and `incident_steps` old, nothing starting on a loss: info
    stuck_points: int = 50  # this many identical values in a row: not really logged ...
    rounding_pairs: int = 128  # ... unless, of the last this many values before the run,
    rounding_share: float = 0.1  # ... this share already equalled the one before them: repeats of rounding


@dataclass(frozen=True)
class Explosion(StreamState):
    """One explosion, open or just closed."""

    onset_step: int
    base: float  # the level it is measured against
    calm: float  # the last calm level (the base, unless it exploded again on top)
    recent: float  # the trailing median at onset: what a baseline that follows would say
    again: bool  # exploded on top of an elevated norm
    peak_step: int
    peak_value: float  # the largest finite value over the line (-inf: none yet)
    last_over_step: int
    back_step: int | None  # the first point under the line after the last one over it
    points: int  # points over the line
    overflows: int  # of which +Inf
    length: int  # points from the onset to the last one seen
    below: int  # points under the line since the last one over it


@dataclass(frozen=True)
class ExplosionState(StreamState):
    tail: np.ndarray  # the last `window` finite values
    frozen: float | None  # the level while an unstable stretch lasts
    stretch: int  # points since the stretch opened
    calm_run: int  # points in a row back under `elevated` times the frozen level
    open: Explosion | None


@dataclass(frozen=True)
class StuckState(StreamState):
    value: float | None  # the last finite value
    start_step: int  # where the current run of equal values began
    last_step: int
    points: int
    rounded: bool  # the values repeated by their rounding before the current run began
    recent: np.ndarray  # whether each of the last `rounding_pairs` finite values equals the one before


@dataclass(frozen=True)
class GradNormState(StreamState):
    explosions: ExplosionState
    stuck: StuckState


class GradNormDetector:
    def __init__(self, config: GradNormConfig = GradNormConfig()) -> None:
        self.config = config

    def detect(self, series: Series) -> list[Finding]:
        return detect_at_once(self, series.step, series.value, series.tag)

    def start(self) -> GradNormState:
        return GradNormState(
            explosions=ExplosionState(tail=np.zeros(0), frozen=None, stretch=0, calm_run=0, open=None),
            stuck=StuckState(value=None, start_step=0, last_step=0, points=0, rounded=False, recent=np.zeros(0, bool)),
        )

    def feed(
        self, state: GradNormState, step: np.ndarray, value: np.ndarray, tag: str = ""
    ) -> tuple[GradNormState, list[Finding], list[Finding]]:
        t, x = _judged_points(step, value)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            explosions, closed = self._explosions(state.explosions, x, t)
        ft, fx = finite_points(step, value)
        stuck, done, ongoing = self._stuck(tag, state.stuck, fx, ft)
        # one point over the line so far: told once a second is, or once it closes (a
        # one-point blip that clipping absorbed is then only informational: incidents.join_explosions);
        # Inf alone is an overflow skip, the NaN/Inf detector's
        opened = [e for e in [explosions.open] if e and e.points > 1 and e.points > e.overflows]
        findings_open = [self._explosion_finding(tag, e, ongoing=True) for e in opened] + ongoing
        told = [e for e in closed if e.points > e.overflows]
        findings_closed = [self._explosion_finding(tag, e, ongoing=False) for e in told] + done
        return GradNormState(explosions, stuck), findings_closed, findings_open

    # -- explosions --------------------------------------------------------------------

    def _explosions(self, state: ExplosionState, x: np.ndarray, t: np.ndarray) -> tuple[ExplosionState, list[Explosion]]:
        c = self.config
        if not len(x):
            return state, []
        ext = np.concatenate([state.tail, x])
        k = len(state.tail)
        trailing = _medians_before(ext, k, c.window, min(c.min_points, c.window), c.elevated)
        level, frozen, stretch, calm_run = self._levels(x, trailing, state)
        over = (level > 0) & (x >= c.ratio * level)
        _fill_medians_before(trailing, ext, k, np.flatnonzero(over & np.isnan(trailing)), c.window, min(c.min_points, c.window))
        settled = _settled(ext, k, over, c.settle_points)
        current, closed = self._group(state.open, x, t, over, level, trailing, settled)
        tail = ext[-max(c.window, c.settle_points) :].copy()
        if frozen is None:
            stretch = calm_run = 0
        return ExplosionState(tail, frozen, stretch, calm_run, current), closed

    def _levels(self, x: np.ndarray, trailing: np.ndarray, state: ExplosionState) -> tuple[np.ndarray, float | None, int, int]:
        """The level of each point: the trailing median, frozen in unstable stretches (NaN
        where `_medians_before` left the median out: no point there can stand over it)."""
        c = self.config
        level = trailing.copy()
        starts = np.flatnonzero((trailing > 0) & (x >= c.elevated * trailing))
        frozen, stretch, calm_run = state.frozen, state.stretch, state.calm_run
        pos, n = 0, len(x)
        while pos < n:
            if frozen is None:
                i = int(np.searchsorted(starts, pos))
                if i == len(starts):
                    break
                pos = int(starts[i])
                frozen, stretch, calm_run = float(trailing[pos]), 0, 0
            span = min(n - pos, c.hold_points - stretch)
            runs = run_lengths(x[pos : pos + span] < c.elevated * frozen, calm_run)
            calmed = np.flatnonzero(runs >= c.window)
            end = int(calmed[0]) + 1 if len(calmed) else span
            level[pos : pos + end] = frozen
            stretch, calm_run, pos = stretch + end, int(runs[end - 1]), pos + end
            if len(calmed) or stretch >= c.hold_points:
                frozen = None
        return level, frozen, stretch, calm_run

    def _group(
        self,
        current: Explosion | None,
        x: np.ndarray,
        t: np.ndarray,
        over: np.ndarray,
        level: np.ndarray,
        trailing: np.ndarray,
        settled: np.ndarray,
    ) -> tuple[Explosion | None, list[Explosion]]:
        """Points over the line into explosions: joined across short gaps, split where the
        norm jumps again on top of a settled explosion, closed after `gap_points` below."""
        c = self.config
        closed: list[Explosion] = []
        n = len(x)
        # the open explosion's onset and last point over the line, as indices into this feed
        onset = -current.length if current else 0
        last = -1 - current.below if current else -1
        jumps = over & np.isfinite(x) & (settled > 0) & (x >= c.ratio * settled)
        jumped = ~(x < c.elevated * trailing)  # over the recent median too (NaN: no median yet)
        o = np.flatnonzero(over)
        for group in np.split(o, np.flatnonzero(np.diff(o) > c.gap_points) + 1) if len(o) else []:
            if current is None or int(group[0]) - last - 1 >= c.gap_points:
                if current is not None:
                    closed.append(self._back(current, t, last))
                    current = None
                group = group[np.argmax(jumped[group]) :] if jumped[group].any() else group[:0]
                if not len(group):  # a norm still elevated after an explosion, back over the line
                    continue
                first = int(group[0])
                current, onset = self._new(first, x, t, level, trailing, settled, again=False), first
                rest = group[1:]
            else:
                rest = group
            counted = 0  # points of `rest` already in an explosion
            for i in rest[jumps[rest]].tolist():
                if i - onset < c.settle_points:
                    continue
                k = int(np.searchsorted(rest, i))
                current = self._add(current, rest[counted:k], x, t)
                closed.append(replace(current, back_step=int(t[i])))
                current, onset = self._new(i, x, t, level, trailing, settled, again=True), i
                counted = k + 1
            current = self._add(current, rest[counted:], x, t)
            last = int(group[-1])
        if current is None:
            return None, closed
        current = replace(current, length=n - onset, below=n - 1 - last)
        if current.back_step is None and 0 <= last + 1 < n:
            current = replace(current, back_step=int(t[last + 1]))
        if current.below >= c.gap_points:
            return None, [*closed, current]
        return current, closed

    @staticmethod
    def _new(
        i: int, x: np.ndarray, t: np.ndarray, level: np.ndarray, trailing: np.ndarray, settled: np.ndarray, *, again: bool
    ) -> Explosion:
        base = float(settled[i]) if again else float(level[i])
        finite = bool(np.isfinite(x[i]))
        return Explosion(
            onset_step=int(t[i]), base=base, calm=float(level[i]), recent=float(trailing[i]), again=again,
            peak_step=int(t[i]), peak_value=float(x[i]) if finite else -math.inf, last_over_step=int(t[i]),
            back_step=None, points=1, overflows=0 if finite else 1, length=1, below=0,
        )

    @staticmethod
    def _add(e: Explosion, members: np.ndarray, x: np.ndarray, t: np.ndarray) -> Explosion:
        """`e` with more points over the line (indices into this feed, in order)."""
        if not len(members):
            return e
        finite = members[np.isfinite(x[members])]
        peak = (e.peak_step, e.peak_value)
        if len(finite):
            top = int(finite[np.argmax(x[finite])])
            peak = (int(t[top]), float(x[top])) if x[top] > e.peak_value else peak
        return replace(
            e, peak_step=peak[0], peak_value=peak[1], last_over_step=int(t[members[-1]]), back_step=None,
            points=e.points + len(members), overflows=e.overflows + len(members) - len(finite),
        )

    @staticmethod
    def _back(e: Explosion, t: np.ndarray, last: int) -> Explosion:
        """`e` closed: back under the line at the point after `last` (index into this feed)."""
        if e.back_step is not None or last + 1 < 0:
            return e
        return replace(e, back_step=int(t[last + 1]))

    def _explosion_finding(self, tag: str, e: Explosion, *, ongoing: bool) -> Finding:
        ratio = e.peak_value / e.base
        orders = math.log10(ratio)
        size = f"{e.base:.3g} -> {e.peak_value:.3g} ({ratio:.3g}x, {orders:.1f} orders of magnitude"
        if e.again:
            message = (
                f"{tag} exploded again at step {e.onset_step}, on top of an elevated norm: {size}; "
                f"{e.peak_value / e.calm:.3g}x its last calm level {e.calm:.3g})"
            )
        else:
            message = f"{tag} exploded at step {e.onset_step}: {size})"
            if e.recent >= self.config.elevated * e.base:
                message += f"; measured against its last calm level, its recent median had risen to {e.recent:.3g}"
        if e.overflows:
            message += f"; Inf at {e.overflows} of its points"
        return Finding(
            kind=Kind.GRAD_NORM_EXPLOSION,
            tag=tag,
            severity=Severity.WARNING,
            start_step=e.onset_step,
            peak_step=e.peak_step,
            end_step=e.back_step if e.back_step is not None else e.last_over_step,
            peak_value=e.peak_value,
            baseline=e.base,
            ratio=ratio,
            ongoing=ongoing,
            message=message,
            remediation=(
                "Look at the loss over the next steps: an explosion usually leads a loss spike. "
                "If it recurs, clip gradients (max norm about 1.0) or lower the learning rate, "
                f"and inspect the batches just before step {e.onset_step}."
            ),
            evidence={
                "orders_of_magnitude": orders,
                "points": e.points,
                **({"length": e.length} if ongoing else {}),  # points seen since the onset, while it lasts
                "overflows": e.overflows,
                "calm_level": e.calm,
                "recent_median": e.recent,
                "again": e.again,
            },
        )

    # -- stuck -------------------------------------------------------------------------

    def _stuck(self, tag: str, state: StuckState, x: np.ndarray, t: np.ndarray) -> tuple[StuckState, list[Finding], list[Finding]]:
        """Runs of one repeated value, those the values' rounding explains apart; the one still
        going on is open."""
        n = len(x)
        if not n:
            return state, [], self._told(tag, state, ongoing=True)
        same = np.empty(n, bool)
        same[0] = state.value is not None and x[0] == state.value
        same[1:] = x[1:] == x[:-1]
        flags = np.concatenate([state.recent, same])  # the kept pairs, then this feed's
        kept, recent = len(state.recent), flags[-self.config.rounding_pairs :]
        starts = np.flatnonzero(~same)  # where a new value begins
        closed = []
        if same[0]:  # the run that was going on goes on up to the first new value
            end = int(starts[0]) - 1 if len(starts) else n - 1
            state = replace(state, last_step=int(t[end]), points=state.points + end + 1, recent=recent)
            if not len(starts):
                return state, [], self._told(tag, state, ongoing=True)
        closed += self._told(tag, state, ongoing=False)
        lengths = np.diff(np.append(starts, n))
        for j in np.flatnonzero(lengths[:-1] >= self.config.stuck_points).tolist():
            a, b = int(starts[j]), int(starts[j]) + int(lengths[j]) - 1
            run = StuckState(float(x[a]), int(t[a]), int(t[b]), int(lengths[j]), self._rounded(flags, kept + a), recent)
            closed += self._told(tag, run, ongoing=False)
        a = int(starts[-1])
        current = StuckState(float(x[a]), int(t[a]), int(t[-1]), n - a, self._rounded(flags, kept + a), recent)
        return current, closed, self._told(tag, current, ongoing=True)

    def _rounded(self, flags: np.ndarray, at: int) -> bool:
        """Whether at least `rounding_share` of the `rounding_pairs` values before `flags[at]`
        equalled the one before them: repeats the values' rounding explains."""
        before = flags[max(0, at - self.config.rounding_pairs) : at]
        return bool(len(before)) and float(before.mean()) >= self.config.rounding_share

    def _told(self, tag: str, run: StuckState, *, ongoing: bool) -> list[Finding]:
        """The run's finding, if it is long enough and not explained by rounding."""
        if run.points < self.config.stuck_points or run.rounded:
            return []
        return [self._stuck_finding(tag, run, ongoing=ongoing)]

    @staticmethod
    def _stuck_finding(tag: str, run: StuckState, *, ongoing: bool) -> Finding:
        value = float(run.value) if run.value is not None else math.nan
        what = "0" if value == 0 else f"{value:.6g}"
        return Finding(
            kind=Kind.GRAD_NORM_STUCK,
            tag=tag,
            severity=Severity.WARNING,
            start_step=run.start_step,
            end_step=run.last_step,
            peak_value=value,
            ongoing=ongoing,
            message=f"{tag} is stuck at {what} for {run.points} points (steps {run.start_step}-{run.last_step})",
            remediation=(
                "A grad norm that never changes is not being measured, or the optimizer is skipping "
                "steps: check where it is logged (before clipping, after the backward pass) and the "
                "skipped-step counter."
            ),
            evidence={"points": run.points},
        )


def _judged_points(step: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The points explosions are judged on: the finite ones and +Inf (an overflow)."""
    return points_where(step, value, ~np.isnan(value) & (value != -np.inf))


def _settled(ext: np.ndarray, k: int, over: np.ndarray, size: int) -> np.ndarray:
    """The median of the `size` values before each point over the line (NaN elsewhere, and
    where fewer are known); `ext` is the kept tail then this feed's values from index `k`."""
    settled = np.full(len(over), np.nan)
    at = np.flatnonzero(over)
    at = at[at + k >= size]
    if len(at):
        settled[at] = row_medians(ext[(at + k)[:, None] + np.arange(-size, 0)])
    return settled


def _medians_before(ext: np.ndarray, k: int, window: int, min_count: int, factor: float) -> np.ndarray:
    """The median of the `window` values before each point of `ext[k:]` (NaN values
    skipped, NaN with fewer than `min_count`), worked out only where the point stands
    `factor` times over the smallest of those values or more: elsewhere it cannot stand
    `factor` times over their median, which is never below it, and is left NaN.  A healthy
    norm then costs a moving minimum, not a moving median (bench/analyze.py); a norm where
    most points could qualify (stuck at 0) gets the moving median whole."""
    x = ext[k:]
    out = np.full(len(x), np.nan)
    if len(ext) <= min_count or not len(x):
        return out
    smallest = np.full(len(ext), np.nan)
    smallest[1:] = bn.move_min(ext, min(window, len(ext)), min_count=1)[:-1]
    at = np.flatnonzero(x >= factor * smallest[k:])
    if len(at) > len(x) // 8:
        whole = np.full(len(ext), np.nan)
        whole[1:] = bn.move_median(ext, min(window, len(ext)), min_count=min_count)[:-1]
        return whole[k:]
    _fill_medians_before(out, ext, k, at, window, min_count)
    return out


def _fill_medians_before(out: np.ndarray, ext: np.ndarray, k: int, at: np.ndarray, window: int, min_count: int) -> None:
    """Set `out[at]` to the median of the `window` values before `ext[k + at]`, as
    `bn.move_median` would give it (NaN values skipped, NaN with fewer than `min_count`)."""
    if not len(at):
        return
    idx = (at + k)[:, None] + np.arange(-window, 0)
    rows = np.where(idx >= 0, ext[np.maximum(idx, 0)], np.nan)
    rows.sort(axis=1)  # NaN last
    count = np.count_nonzero(~np.isnan(rows), axis=1)
    r = np.arange(len(at))
    lo, hi = rows[r, np.maximum(count - 1, 0) // 2], rows[r, count // 2]
    medians = (lo + hi) / 2
    medians[count < min_count] = np.nan
    out[at] = medians

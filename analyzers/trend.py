"""Slow patterns, judged on a trend rather than point by point: divergence without a spike
(the loss turns upward and keeps rising, or settles higher) on a training loss.

The trend is the median of each block of `block_points` logged points (16: the median of 16
minibatch losses of 2-5% noise moves by under 1.5%, a hundredth of a 20% rise), cut from
the first finite point on, so a series fed in pieces is cut where it is cut whole.  A
coarse log takes fewer: the points of `block_steps` (64) steps at the interval of its first
16 points, but at least `min_block_points` (8).  At 16 points a block, a loss logged every
10 steps moved in blocks of 160 steps, and `charlm_lr_ramp_interval_g`'s creep (bench/labels
trained tuning) was told 1,009 steps after it began; at 8, after 529.  Fewer than 8 points
are too noisy a level: on 20 flat losses of 3% noise, 20,000 points each, 4 false
divergences at 6 points a block, 49 at 5, none at 8 (tests/test_trend.py).  The
noise of one block level is taken from second differences of block levels (they cancel a
straight trend: a steep warm-up is not noise), as the median over the `noise_blocks`
blocks before it.  The state a detector keeps is the partial block, the last two levels,
those `noise_blocks` differences and a few numbers: bounded whatever the run's length.

A divergence opens when the trend stands, `confirm_blocks` blocks in a row, at least
`divergence_rise` (20%) above its lowest level so far and `divergence_z` (6) noise sigmas
above it; its onset is the last block that was still within `onset_z` (3) sigmas or
`onset_share` (2%) of that lowest level (where the curve left its floor: roll back to before
it).  It closes, once and for good, when the trend is back within half that margin
for `confirm_blocks` blocks in a row (a loss that came back after a rise).  The curves:
tests/test_trend.py's cosine runs (2-5% noise, bf16, heavy tails) never reach 20% above
their running minimum; `sample_runs/lr_too_high` (best 1.23 at step 38, then above 2.0
from step 88) and the generated divergences of tests/curves.py (+60% over 40% of the run)
do, within a few blocks of crossing it.

A **creep** opens one too: `creep_blocks` (4) blocks in a row at least `creep_rise` (5%)
and `creep_z` (4) sigmas above the floor, the lowest median of 3 blocks in a row.  An LR
that grows a little every step lifts the loss slowly: `charlm_lr_ramp_clip_g` (bench/labels
trained tuning; the LR doubling every 100 steps from step 700) was +5% by 850-899, +10% by
1000-1049 and +21% only by 1250-1299, before it blew up at 1648; the 20% rule told it at
1299, the creep at 929.  The floor, not the lowest block: a healthy loss wanders, and its
luckiest block lies far below where it settles (the 1.5B speedrun's loss, with its clusters
of one-step spikes, `ext_speedrun_scaleup_1p5b`, stood 5-10% over its lowest block for 4
blocks in a row from half of the 222 points it can be watched from; `sample_runs/
stalled_lr`, flat with 10% noise, 14% over it).  Over the floor, no window of the six LLM
pretraining logs (2,514 starting points) nor of the healthy train losses of the trained
tuning runs and public logs (1,110) creeps (bench/labels).  Its onset is the knee of the
hinge (flat, then a straight climb) that best fits the levels since the floor
(`_creep_onset`): the last block near the floor comes late on a noisy loss, since a creep's
first blocks stay within its noise.  A creep is a warning until it stands as far up as the
rule above asks, then critical, and it closes back within half the creep margin.  The
rises after an SGDR warm restart creep too (5-13% for 3-8 blocks), and are left out as the
eval losses' are (`analyzers.incidents.rise_after_warm_restart`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import bottleneck as bn
import numpy as np

from analyzers.baseline import DIFF_MAD_TO_SIGMA
from analyzers.findings import Finding, Kind, Severity
from analyzers.series import Series
from analyzers.stream import StreamState, detect_at_once, finite_points

# median(|d2|) of white noise of sd s: d2 = x[i] - 2x[i-1] + x[i-2] has sd sqrt(6) s
D2_MAD_TO_SIGMA = 1.0 / (0.6744897501960817 * np.sqrt(6.0))


@dataclass(frozen=True)
class TrendConfig:
    block_points: int = 16  # the trend is the median of each 16 logged points ...
    block_steps: int = 64  # ... or of the points in 64 steps, if fewer ...
    min_block_points: int = 8  # ... but at least 8
    noise_blocks: int = 32  # a level's noise: the median over the 32 blocks before it
    confirm_blocks: int = 3  # a rise (or a return) holds this many blocks in a row
    divergence_rise: float = 0.2  # 20% above the trend's lowest level ...
    divergence_z: float = 6.0  # ... and 6 noise sigmas above it
    rising_share: float = 0.6  # of the last 8 block moves, this share upward: "keeps climbing"
    onset_z: float = 3.0  # the onset is the last block within 3 noise sigmas ...
    onset_share: float = 0.02  # ... or 2% of the low: where the rise left the floor
    creep_rise: float = 0.05  # or a creep: 5% ...
    creep_z: float = 4.0  # ... and 4 noise sigmas above the floor (the lowest median of 3 blocks) ...
    creep_blocks: int = 4  # ... this many blocks in a row


# -- the block trend, shared by the trend detectors -----------------------------------------


@dataclass(frozen=True)
class BlockState(StreamState):
    """What cutting a series into blocks carries from one feed to the next."""

    pending_step: np.ndarray  # finite points not yet in a full block
    pending_value: np.ndarray
    last: np.ndarray  # the last two block levels, oldest first
    d2: np.ndarray  # |second differences| of the last `noise_blocks` levels
    spread: np.ndarray  # point noise sigma of each of the last `noise_blocks` blocks
    tail: float  # the last point of the last full block
    blocks: int  # full blocks so far
    points: int  # finite points so far
    first_step: int  # of the first finite point (-1 before any)
    last_step: int  # of the latest finite point


def empty_blocks() -> BlockState:
    return BlockState(np.zeros(0, np.int64), np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0), np.nan, 0, 0, -1, -1)


@dataclass(frozen=True, eq=False)
class Blocks:
    """The blocks a feed completed: level, middle step, last step, and as known before each
    block the noise sigma of a level (from second differences of levels; 0 until 3 of them,
    and 8 for single-point blocks, are known) and of one point (from first differences of
    points; 0 until 8 are known)."""

    level: np.ndarray
    step: np.ndarray
    last_step: np.ndarray
    sigma: np.ndarray
    point_sigma: np.ndarray
    first: int  # index of the first of them in the whole series' blocks


def cut_blocks(
    state: BlockState, step: np.ndarray, value: np.ndarray, size: int, history: int, levels: bool = True, points: bool = True
) -> tuple[BlockState, Blocks]:
    """Add a piece of a series (sorted, after what was fed) and return the blocks it
    completes, with the noise of levels and of points (each only when asked for: a detector
    always asks for the same)."""
    step, value = finite_points(step, value)
    first_step = state.first_step if state.first_step >= 0 or not len(step) else int(step[0])
    s = np.concatenate([state.pending_step, step])
    v = np.concatenate([state.pending_value, value])
    count = len(v) // size
    full = count * size
    if count:
        level = bn.median(v[:full].reshape(count, size), axis=1) if size > 1 else v[:full].copy()
        mid = s[size // 2 : full : size]
        end = s[size - 1 : full : size]
    else:
        level, mid, end = np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64)
    chain = np.concatenate([state.last, level])
    sigma, d2 = np.zeros(count), state.d2
    if levels:
        new_d2 = np.abs(chain[2:] - 2 * chain[1:-1] + chain[:-2])  # the run's first two blocks have none
        # a few second differences of a curved start say more about the curve than the
        # noise: none is used before there are 3, and 8 evaluations' worth for small blocks
        sigma, d2 = _before_each(state.d2, new_d2, count, history, max(3, -(-8 // size)))
        sigma *= D2_MAD_TO_SIGMA
    kept = v[:full]
    point_sigma, spread = np.zeros(count), state.spread
    if points:
        # each block's median |difference| of its points with the point before
        gaps = np.abs(kept - np.concatenate([[state.tail], kept[:-1]])).reshape(count, size)
        point_sigma, spread = _before_each(state.spread, bn.nanmedian(gaps, axis=1) * DIFF_MAD_TO_SIGMA, count, history,
                                           max(1, -(-8 // size)))
    new_state = BlockState(
        pending_step=s[full:].copy(),
        pending_value=v[full:].copy(),
        last=chain[-2:].copy(),
        d2=d2,
        spread=spread,
        tail=float(kept[-1]) if full else state.tail,
        blocks=state.blocks + count,
        points=state.points + len(value),
        first_step=first_step,
        last_step=int(step[-1]) if len(step) else state.last_step,
    )
    return new_state, Blocks(level, mid, end, sigma, point_sigma, state.blocks)


def _before_each(ring: np.ndarray, new: np.ndarray, count: int, history: int, need: int) -> tuple[np.ndarray, np.ndarray]:
    """For each of `count` new blocks, the median of the last `history` values known before
    it (0 until `need` are known); the new values belong to the last len(new) blocks, one
    each.  Also the ring of the last `history` values to keep."""
    hist = np.concatenate([ring, new])
    keep = hist[-history:].copy()
    if len(hist) < need or not count:
        return np.zeros(count), keep
    at = len(ring) + np.maximum(np.arange(count) - (count - len(new)), 0) - 1
    med = bn.move_median(hist, min(history, len(hist)), min_count=need)
    out = np.where(at >= 0, med[np.maximum(at, 0)], 0.0)
    out[np.isnan(out)] = 0.0
    return out, keep


# -- divergence ------------------------------------------------------------------------------

ONSET_BLOCKS = 64  # block levels kept to find where a creep began


@dataclass(frozen=True)
class DivergenceState(StreamState):
    blocks: BlockState
    size: int  # points per block, set by the first `block_points` points' interval (0 before)
    low: float  # the trend's lowest level so far (inf before any block)
    near_step: int  # the last block within noise of the low: where a rise starts
    floor: float  # the lowest median of 3 blocks in a row: the level a creep is measured from
    recent: np.ndarray  # the last `ONSET_BLOCKS` levels ("keeps climbing"; where a creep began) ...
    recent_step: np.ndarray  # ... and their steps
    streak: int  # blocks in a row above the margin (closed) or back within half of it (open)
    streak_step: int  # where that streak began
    crept: int  # closed: blocks in a row above the creep margin; open: 1 if a creep opened it
    open: bool
    onset: int  # the open incident's onset step (where it left its floor)
    base: float  # the open incident's low
    top: float  # highest level since onset, and where
    top_step: int
    level: float  # the latest level, and where
    level_step: int
    noise: float  # the latest level's noise sigma
    above: int  # blocks above the margin in the open incident
    opened: int  # the last step of the block that opened it: where it was first told
    rose: int  # the last step of its first block over the rise margin (-1 before): from there it stood on its own


class _Incident:
    """The incident part of a divergence state, changed in place while a feed walks its
    blocks (one state is built at the end, not one per block)."""

    NAMES = ("streak", "streak_step", "crept", "open", "onset", "base", "top", "top_step", "above", "opened", "rose")

    def __init__(self, **values) -> None:
        self.__dict__.update(values)

    @classmethod
    def of(cls, s: DivergenceState) -> _Incident:
        return cls(**{k: getattr(s, k) for k in cls.NAMES})

    def fields(self) -> dict:
        return {k: getattr(self, k) for k in self.NAMES}

    def hold(self, new: Blocks, counted: np.ndarray, above: np.ndarray, a: int, b: int) -> None:
        """Blocks [a, b) of an open incident that stay up: `counted` (over the margin it
        opened by) and `above` (over the rise margin) flag them."""
        top = a + int(np.argmax(new.level[a:b]))
        self.above += int(counted[a:b].sum())
        first = np.flatnonzero(above[a:b])
        if self.rose < 0 and len(first):
            self.rose = int(new.last_step[a + first[0]])
        if new.level[top] > self.top:
            self.top, self.top_step = float(new.level[top]), int(new.step[top])

    def step(
        self, j: int, new: Blocks, lows: tuple[float, float], onset: int, above: bool, creep: bool, back: bool, c: TrendConfig
    ) -> dict | None:
        """One block through the state machine; the incident's fields when it closes here.
        `lows`: what a rise and a creep are measured from; `onset`: where a rise started
        (a creep's is worked out by the caller); `above` and `creep`: over the margin and
        over the creep margin; `back`: within half of the margin the incident opened by."""
        level, at = float(new.level[j]), int(new.step[j])
        if not self.open:
            if not creep:
                self.streak, self.crept, self.top, self.top_step, self.rose = 0, 0, np.nan, -1, -1
                return None
            if above and self.rose < 0:
                self.rose = int(new.last_step[j])
            if self.crept == 0 or level > self.top:  # the streak's highest level, and where
                self.top, self.top_step = level, at
            self.streak = self.streak + 1 if above else 0
            self.crept += 1
            if self.streak >= c.confirm_blocks or self.crept >= c.creep_blocks:
                by_creep = self.streak < c.confirm_blocks
                self.above = self.crept if by_creep else self.streak
                self.open, self.onset, self.base, self.streak = True, onset, lows[by_creep], 0
                self.opened = int(new.last_step[j])
                self.crept = int(by_creep)
            return None
        self.above += creep if self.crept else above
        if above and self.rose < 0:
            self.rose = int(new.last_step[j])
        if level > self.top:
            self.top, self.top_step = level, at
        if back and self.streak == 0:
            self.streak_step = at
        self.streak = self.streak + 1 if back else 0
        if self.streak < c.confirm_blocks:
            return None
        done = {**self.fields(), "end": self.streak_step}
        self.streak, self.crept, self.open, self.onset, self.base = 0, 0, False, -1, np.nan
        self.top, self.top_step, self.above, self.opened, self.rose = np.nan, -1, 0, -1, -1
        return done


class DivergenceDetector:
    """The trend rose well above its lowest point and has not come back: still rising, or
    settled at a higher level (the loss "starts to come down but settles higher")."""

    def __init__(self, config: TrendConfig = TrendConfig()) -> None:
        self.config = config

    def start(self) -> DivergenceState:
        return DivergenceState(empty_blocks(), 0, np.inf, -1, np.inf, np.zeros(0), np.zeros(0, np.int64), 0, -1, 0, False, -1, np.nan, np.nan, -1, np.nan, -1, 0.0, 0, -1, -1)

    def detect(self, series: Series) -> list[Finding]:
        return detect_at_once(self, series.step, series.value, series.tag)

    def feed(
        self, state: DivergenceState, step: np.ndarray, value: np.ndarray, tag: str = ""
    ) -> tuple[DivergenceState, list[Finding], list[Finding]]:
        c = self.config
        if not state.size:
            state = replace(state, size=self._size(state.blocks, step, value))
        blocks, new = cut_blocks(state.blocks, step, value, state.size or c.block_points, c.noise_blocks, points=False)
        state = replace(state, blocks=blocks)
        n = len(new.level)
        if not n:
            return state, [], self._open(state, tag)
        low = np.minimum.accumulate(np.concatenate([[state.low], new.level]))[1:]
        margin = np.maximum(c.divergence_rise * np.abs(low), c.divergence_z * new.sigma)
        rise = new.level - low
        med3 = _medians_of_3(state.recent, new.level)
        floor = np.minimum.accumulate(np.concatenate([[state.floor], med3]))[1:]
        over_floor = new.level - floor
        creep_margin = np.maximum(c.creep_rise * np.abs(floor), c.creep_z * new.sigma)
        above, creep = (rise > 0) & (rise >= margin), (over_floor > 0) & (over_floor >= creep_margin)
        back, back_creep = rise <= margin / 2, over_floor <= creep_margin / 2
        near = rise <= np.maximum(c.onset_z * new.sigma, c.onset_share * np.abs(low))
        near_step = np.maximum.accumulate(np.where(near, new.step, state.near_step))
        closed: list[Finding] = []
        inc = _Incident.of(state)
        creeps, backs = np.flatnonzero(creep), (np.flatnonzero(back), np.flatnonzero(back_creep))
        j = 0
        # Only blocks where the incident can change are visited one by one: the loop is
        # over events, not points.
        while j < n:
            if not inc.open and inc.crept == 0:
                k = int(np.searchsorted(creeps, j))
                if k == len(creeps):
                    break
                j = int(creeps[k])
            elif inc.open and inc.streak == 0:
                mine = backs[inc.crept]
                k = int(np.searchsorted(mine, j))
                stop = int(mine[k]) if k < len(mine) else n
                if stop > j:  # blocks still up: only the top and the count move
                    inc.hold(new, creep if inc.crept else above, above, j, stop)
                    j = stop
                    continue
            came_back = bool(back_creep[j] if inc.open and inc.crept else back[j])
            was_open = inc.open
            done = inc.step(j, new, (float(low[j]), float(floor[j])), int(near_step[j]), bool(above[j]), bool(creep[j]), came_back, c)
            if inc.open and not was_open and inc.crept:
                levels = np.concatenate([state.recent, new.level[: j + 1]])[-ONSET_BLOCKS:]
                steps = np.concatenate([state.recent_step, new.step[: j + 1]])[-ONSET_BLOCKS:]
                inc.onset = _creep_onset(levels, steps, float(floor[j]))
            if done is not None:
                end = done.pop("end")
                # judged by this block's noise: the state's latest values depend on how the
                # series was cut into feeds
                at_close = replace(state, **done, noise=float(new.sigma[j]))
                closed.append(self._finding(at_close, tag, end=end, now=float(new.level[j])))
            j += 1
        s = replace(
            state, **inc.fields(), low=float(low[-1]), near_step=int(near_step[-1]), floor=float(floor[-1]),
            recent=np.concatenate([state.recent, new.level])[-ONSET_BLOCKS:],
            recent_step=np.concatenate([state.recent_step, new.step])[-ONSET_BLOCKS:], level=float(new.level[-1]),
            level_step=int(new.step[-1]), noise=float(new.sigma[-1]),
        )
        return s, closed, self._open(s, tag)

    def _size(self, blocks: BlockState, step: np.ndarray, value: np.ndarray) -> int:
        """Points per block, from the interval of the series' first `block_points` finite
        points (0 until there are that many): the same however the series is cut into feeds."""
        c = self.config
        first = np.concatenate([blocks.pending_step, finite_points(step, value)[0]])[: c.block_points]
        if len(first) < c.block_points:
            return 0
        interval = max(float(first[-1] - first[0]) / (len(first) - 1), 1.0)
        return int(np.clip(round(c.block_steps / interval), c.min_block_points, c.block_points))

    def _open(self, s: DivergenceState, tag: str) -> list[Finding]:
        return [self._finding(s, tag, end=None, now=s.level)] if s.open else []

    def _finding(self, s: DivergenceState, tag: str, end: int | None, now: float) -> Finding:
        c = self.config
        base, top = s.base, s.top
        moves = np.diff(s.recent[-9:])
        rising = bool(
            end is None and len(moves) and float(np.mean(moves > 0)) >= c.rising_share and now >= top - 0.1 * (top - base)
        )
        crept = bool(s.crept) and top - base < max(c.divergence_rise * abs(base), c.divergence_z * s.noise)
        if end is None:
            how = "keeps climbing" if rising else "has stayed up"
            if crept:
                up = f"+{(now / base - 1) * 100:.0f}%" if base > 0 else "up"
                message = f"{tag} has been creeping up since step {s.onset}: its trend went {base:.4g} -> {now:.4g} ({up}) and {how} (divergence)"
            else:
                message = f"{tag} has been rising since step {s.onset}: its trend went {base:.4g} -> {now:.4g} and {how} (divergence)"
        else:
            message = f"{tag} rose from step {s.onset}: its trend went {base:.4g} -> {top:.4g}, and was back by step {end} (divergence, over)"
        return Finding(
            kind=Kind.DIVERGENCE,
            tag=tag,
            severity=Severity.CRITICAL if end is None and not crept else Severity.WARNING,
            start_step=s.onset,
            peak_step=s.top_step,
            end_step=end,
            peak_value=top,
            baseline=base,
            ratio=top / base if base > 0 else None,
            ongoing=end is None,
            message=message,
            remediation=(
                f"Roll back to a checkpoint from before step {s.onset} and change the recipe, not just the "
                "seed: lower the learning rate, check the init std, use bf16 rather than fp16, Adam "
                "beta2 = 0.95, and the data mixture at that point. Restarts alone only delay it."
            ),
            evidence={"still_rising": rising, "noise": s.noise, "level_now": now, "blocks_above": s.above, "told_at": s.opened, "risen_by": s.rose,
                      "block_steps": _block_steps(s.blocks, s.size or c.block_points)},
        )


def _block_steps(blocks: BlockState, size: int) -> int:
    """How many steps a block of `size` points spans, at the series' mean interval."""
    if blocks.points < 2:
        return size
    return round(size * (blocks.last_step - blocks.first_step) / (blocks.points - 1))


def _medians_of_3(recent: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """For each new block level, the median of it and the two before (inf until there are
    three): a floor the luck of one block does not set."""
    chain = np.concatenate([recent[-2:], levels])
    if len(chain) < 3:
        return np.full(len(levels), np.inf)
    med = bn.move_median(chain, 3)[len(chain) - len(levels) :]
    med[np.isnan(med)] = np.inf
    return med


def _creep_onset(levels: np.ndarray, steps: np.ndarray, floor: float) -> int:
    """Where a creep began: the knee of the hinge (flat, then a straight climb) that best
    fits, by least squares, the block levels since its `floor` (from the first of the 3
    blocks whose median it is, or all those given if it is older).  A creep's first blocks
    stand within a noisy series' noise of its floor, so the last block near the floor comes
    hundreds of steps late (`charlm_lr_ramp_g`), and the floor itself may lie far back on a
    flat stretch (a cosine run's tail)."""
    med3 = _medians_of_3(np.zeros(0), levels)
    at = np.flatnonzero(med3 == floor)
    y, steps = (levels[at[-1] - 2 :], steps[at[-1] - 2 :]) if len(at) else (levels, steps)
    if len(y) < 3:
        return int(steps[0])
    x = np.arange(len(y), dtype=float)
    h = np.maximum(x[None, :] - x[: len(y) - 2, None], 0.0)  # one hinge per knee
    hc = h - h.mean(axis=1, keepdims=True)
    yc = y - y.mean()
    slope = (hc @ yc) / (hc * hc).sum(axis=1)
    sse = ((yc[None, :] - slope[:, None] * hc) ** 2).sum(axis=1)
    return int(steps[int(np.argmin(sse))])

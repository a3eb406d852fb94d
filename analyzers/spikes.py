"""Loss spikes on train and eval losses: where they start and peak, and how they end.
Streaming (`analyzers/stream.py`): `feed` takes a tag's next points and returns the spikes
now final and those still open, so a live run hears of a spike a few points after its
onset; `detect` is one feed of the whole series, and any split finds the same.

**A threshold from the run's own residuals.**  Each point's excess over the trailing level
is measured in the run's robust sigmas (`analyzers/baseline.py`): z.  A point starts a
spike when z exceeds max(`z`, `tail_margin` x the `tail_quantile` of the maxima of z over
the last `tail_blocks` blocks of `tail_block` points): 6 sigmas, which Gaussian noise does
not reach in a run's life, and 1.4x the height this run's own blips reach once every five
blocks of 64 points (the 80th percentile of the last 32 block maxima, 2,048 points).  A blip
the run throws every few hundred points sets its own bar, and one real spike moves only one
block, so a run's rare real spikes do not hide the next (ten +25-35% jumps in 6,000 steps
are all found).  A block counts at most `tail_cap` (2) x the median block's height, so
spikes in more than a fifth of the blocks do not hide the next either: Megatron's Mixtral
8x7B (bf16, loss every 5 iterations) threw 28-108 sigma spikes in three of its first ten
blocks, which set the bar at 42 sigmas and hid a +36% point at 37 (and later a +15% one at
23, under a bar of 52); capped, the bar stays at 14-23, and nothing else moves on any
labelled corpus.  The curves behind the defaults:

* speedrun 1.5B (`ext_speedrun_scaleup_1p5b`, bench/labels tuning): one-step blips of 6-10
  sigma every ~160 steps put its bar at 8-11 sigma, under all 13 of its labelled 1.6-1.9x
  spikes (its 1.8x jump at step 20133, late in the run where its noise is widest, stands
  10.0 sigmas out: a margin of 1.5 sets the bar at 10.3); a margin of 2 loses half of
  them, the 90th percentile a third.
* Megatron GPT-3 15B (bf16, loss every 5 iterations): the bar stays at 6 and its one +18%
  point stands 14 sigmas out, its only alert; llm.c GPT-2 124M, a healthy run: no warning.
* a small regression's minibatch MSE (tests/curves.py `regression_curve`): hundreds of
  2-3x blips, at most two reported in 4,000 steps, as info (with a few of its rarer 3-50x
  ones); a margin of 1.25 reports many of the 2-3x ones, 1.5 one at most.

A jump that stays starts a spike too: `confirm_points` (3) points in a row whose median
stands `held_z` (4) sigmas up, and past 1.4x what the run's own 3-point medians reach (the
same tail rule), the first of them at least half as high; 4 is 6 sigmas of such a median
of Gaussian noise (two of three points past 4 sigmas: a few in 10^9), and before
`held_after_blocks` (4) tail blocks are known the bar is 6 (a sigma from 16 points is rough: a fp16 DeepSpeed
fine-tune's validation loss, climbing smoothly, stood 4.2 out at its 41st point).  An LR
jump on a char-LM (`charlm_lr_jump_a`, bench/labels trained tuning) lifts the loss +0.5
nats, 5.7-6 sigmas at each point and never past 6, for 40 steps before it slowly comes
back: a slow-recovering spike the point rule alone misses.  A smaller jump that stays is
found on the median of `long_points` (16) points: `long_z` (2.5) sigmas above where the
level was heading, most of it gained at the first point, and holding rather than climbing
(`_long_onsets`; an LR x5 on the char-LM, `charlm_lr_jump_c`, lifts the loss +25% for 250
steps, 3.2 sigmas for its 3-point medians and 3.1 for the 16-point one, which no healthy
stretch of the tuning runs brings past 1.4).  Each point is judged once the points its
rule needs after it are known (the one-point rule: at the point itself), and onsets are
taken in the order they are decided, after where the newest spike came back and no sooner
than that was known, so every rule sees the same points however a series is cut.  A spike
called divergent (below) because it settled higher, or because it is still rising but
within 2x (`far_rise`) of the level it left, has given the loss a new level: the next onset
may come from where that was known, and ends it there, so a further jump of a wrecked loss
is told as its own spike, not as a new peak of the old one (`charlm_lr_ramp_f`,
bench/labels trained, retired: a loss that jumped 1.8x at 1480 and sat near 3.1 was blown
up 300x from 1838, which waited for the slow horizon, 1,000 steps, before).  Past 2x the run
is blown up, and its further jumps are the same disaster.

**Where it starts.**  A spike is reported from where its rise began: its onset, or the
first of up to `rise_points` points just before it that already stood out, each
`recovery_z` sigmas (or `recovery_tolerance`) over the level (Megatron's Mixtral 8x7B
climbed +5-10% from 1625, each point under its bar, to one 7 sigmas out at 1640: the spike
starts at 1625, "spiked at step 1640 (rising from step 1625)").  A point's sigmas, not the
recovery band's, which is a median's: half of a noisy loss's points stand over that, and a
bad batch on a loss of 5% noise (`charlm_bad_batch_i`, bench/labels trained, retired: 9.41
at 1300 after 1.31 and 1.35) was "rising from step 1298".  Its horizons still count from
the onset.

**Down a falling curve** the one-point rule measures against the baseline's following level
(the median of the last 16 points, lagging 8 where the level lags 16), in a sigma at most
`local_margin` (1.5) x the spread of second differences.  Early in a run both the level and
the spread are thrown by the fall: a pretraining loss logged every 5 steps, still falling
fast at its 80th point, had its level 0.4 nats above the curve and a sigma of 0.85 against a
true 0.05, so a +25% point stood 0.6 sigma up (17.5 by the labels' rule).  On such curves
(`bench/falling_spikes.py`: 32 synthetic speedrun-like losses, per step and every 5 steps,
fp32 and bf16, heavy-tailed noise, each clean and with one point raised 25% at one of five
places) 256 of the 259 stretches the labels' rule requires are found, where 205 were (of
the planted jumps, 132 of 133 where 85 were), and alerts away from any 6-sigma candidate
went from 19 to 14; the tuning logs' scores did not move.  A rising or flat curve keeps the
level and sigma (a smoothly climbing validation loss has almost no second differences), and
so does a fall that has turned up, the median of its last 8 points back over the level
(`Baseline.turned_up`): `charlm_lr_ramp_coarse_k` (bench/labels trained, retired), smooth
and logged every 20 steps, climbing 1.5% a point from its floor, stood 6.7 sigmas of its
second differences over the following level ten points into its climb, a critical spike.

**An eval loss before its sigma is known.**  The baseline measures nothing before a tag's
~40th point, which is most of a fine-tune's eval loss (it evaluates a few dozen times).
There, an evaluation starts a spike when it rises over the one before by `early_margin` (5)
x the largest such rise so far and by at least `early_rise` (10%), standing half that over
each of the three before (`_early_onsets`): a char-LM's eval loss, falling smoothly, jumped
+11% at its 14th evaluation when its LR went x5.  Before its 8th evaluation only a rise of
`first_rise` (a doubling) counts: an eval loss turning up by a third as a fine-tune
overfits is the overfitting detector's.  Train losses are noisier, and a rule
that blind reported 2-3x blips in the first 40 steps of the char-LMs; but a fine-tune logged
every 10-50 steps has fewer than 40 train points in all (27 of the first 91 users' runs of
bench/wild.py).  There, a jump that stays starts a spike (`_young_onsets`): three points in
a row each above the highest of the `young_points` (8) before, their median `young_rise`
(25%) over those points' median and `young_z` (4) x the loss's typical change from one
point to the next (a classifier's loss fell to 0.31-0.47 and jumped to chance, 0.65-0.76,
at its 31st point of 50: 1.8x, 12x its typical change).

There is no ratio floor (+0.6 nats on a 3.9-nat loss is a large event): only `min_quanta`
steps of the values' rounding (representable steps of the stored precision, or the decimals
a logger printed), so a bf16 loss, or one printed to 3 decimals, never alerts on rounding.  The
rise must be sudden, most of its height gained within `rise_points` points; one not yet
reported that keeps making new highs past that and past the fast horizon is a climb (an
eval loss rising for 15 evaluations), left to the trend detectors.

**Alert early, then refine.**  A spike whose first `confirm_points` (3) points all stand
above its recovery band is reported at once as `pending` (a warning, critical while the
median of 3 points in a row stands `far_rise` over the level: 2x, "a loss that jumped and
stayed"), as is one found on the median of `long_points` that stands above the band (as the
rule decides, 16 points after its onset: an LR x4 on a char-LM, `charlm_lr_jump_l`,
bench/labels trained, retired, +13-16% in 6% noise, had a point back at the level among its
first 3 and was told only at the fast horizon, 104 steps after its onset), and one not back
within the fast horizon; its class then changes as data arrives.  A one-point spike back at
the next point is reported only once its class is known, as fast-recovering (info), so LLM
runs with frequent small spikes stay quiet.  Where the points after the onset span more
than `prompt_steps` (50) steps, waiting costs more than the 60 steps a sudden event may
take to be told: a word-LM logged every 200 batches (`ext2_wordlm_gru_b`) was told 600
steps after its spike, a char-LM's eval loss every 100 steps 200-400 after its jump
(`charlm_lr_jump_c`, `charlm_interval_lr_jump`).  There a spike is reported at its onset,
`pending` as info (a receiver hears of it only if it asks for info), a warning once
confirmed; one that then keeps climbing is a trend's and is withdrawn (the service
resolves its alert, saying so).

**Recovery and class, in the run's own time.**  A spike is back when the loss is within
its band (the level plus `recovery_z` sigmas of a median, or `recovery_tolerance` of the
level): the median of the next `recovery_window` steps' points (a noisy minibatch loss dips
into the band long before its mean is back), or with coarse logging `recovery_points`
points in a row; a spike already back by its `confirm_points`-th point needs only the
median of `quick_points` (5), so a one-point spike in a per-step log is reported as
fast-recovering 5 steps after its onset, not 25.  Two sigmas, not three: the LR burst of sample_runs/lr_burst has its
50-step mean back within 5% 161 steps after the burst (slow), where three called it back
at 87.  The sigma of the band, and of the calls below, is the point sigma at the onset but at most
`local_margin` x the spread of second differences, which a trend does not widen: a coarse
log's 150 points are mostly trend, and over the 128 before a jump the residuals' spread is
the early fall's lag (`charlm_lr_ramp_interval_n`, bench/labels trained, retired, logged every
20 steps: 0.245 against 0.019 at a level of 1.72, so a loss that jumped to 4.4 and sat at
3.0 for 300 steps was neither settled nor rising until it blew up 92x, which it swallowed).
How long that took, in training steps, classifies it:

* fast_recovering: back within max(`fast_steps`, `fast_points` logged points).  BLOOM-176B
  came back in ~36 steps; a run logging every 500 steps shows a fast spike as one point.
* slow_recovering: back later.  IDEFICS-80B took ~200 steps, a 13B run ~500.
* divergent: not back within the slow horizon (max(`slow_steps`, `slow_points` points,
  `slow_share` of the run's age at the onset)), settled higher (no progress back over
  `settle_steps` / `settle_points`: the 104B run, 14 -> 7 and flat; 6 points, not 10, so
  that an eval loss every 100 steps lifted 53% by an LR burst and coming down by 2-4% an
  evaluation, `charlm_lr_burst_p`, bench/labels trained, retired, is judged within the slow
  horizon rather than left pending at its run's end), still rising, blown up
  (every median of `settle_points` points since its onset, or of the points the fast
  horizon spans where fewer, `far_rise` over its level, past the fast horizon: `_blown_up`),
  or turned non-finite.  This is a live call: if the loss
  comes back within the watch horizon (max(`watch_steps`, `watch_points` points,
  `watch_share` of the run's age)) the spike becomes slow_recovering, so over a finished
  curve the class is the outcome (the word-LM GRU logged every 200 batches,
  `ext2_wordlm_gru_b`, was back ~30 points after its spike: slow, where "not back within
  1000 steps" called it divergent).  Past the watch horizon, divergent is final.
* pending: none of the above can be told yet.

The state holds the last `memory` points, twice 32 block maxima and the spikes being
followed (at most `MAX_FOLLOWED`), whatever the run's length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import bottleneck as bn
import numpy as np

from analyzers.baseline import MAD_TO_SIGMA, Baseline, BaselineConfig, median, memory, row_medians, trailing_baseline
from analyzers.findings import Finding, Kind, Severity, SpikeClass
from analyzers.series import Series
from analyzers.stream import StreamState

MAX_FOLLOWED = 16  # spikes followed at once; past that the oldest is final as divergent
FEW_ROWS = 8  # blocks judged in one feed up to which their thresholds are worked out in Python
_NEVER = 2**62  # an index no run reaches


@dataclass(frozen=True)
class SpikeConfig:
    z: float = 6.0  # never below 6 robust sigmas ...
    tail_margin: float = 1.4  # ... nor below 1.4x the blips the run throws ...
    tail_quantile: float = 0.8  # ... once every 5 blocks ...
    tail_block: int = 64  # ... of 64 points ...
    tail_blocks: int = 32  # ... over the last 32 blocks ...
    tail_cap: float = 2.0  # ... each counted at most 2x the median block's height
    held_z: float = 4.0  # or the median of confirm_points points in a row 4 sigmas up (and past its own tail) ...
    held_after_blocks: int = 4  # ... once 4 tail blocks are known (6 before)
    long_points: int = 16  # or the median of 16 points in a row ...
    long_z: float = 2.5  # ... 2.5 sigmas up: a jump that stays, each point within the noise
    min_quanta: float = 2.0  # at least 2 representable steps above the level (bf16 rounding)
    early_margin: float = 5.0  # an eval loss before its sigma is known: a rise 5x the largest so far ...
    early_rise: float = 0.1  # ... and at least 10% over the evaluation before
    first_rise: float = 1.0  # before the baseline's 8th point, from the 5th: at least doubling the evaluation before
    young_points: int = 8  # a train loss from its 16th point until its sigma is known: 3 points in a row above the 8 before ...
    young_rise: float = 0.25  # ... their median 25% over those 8's ...
    young_z: float = 4.0  # ... and 4x the loss's typical change from one point to the next
    local_margin: float = 1.5  # down a falling curve, sigma at most 1.5x the spread of second differences
    rise_points: int = 5  # a spike gains most of its height within this many points; slower is a trend
    confirm_points: int = 3  # still above the band at its 3rd point: fires as pending
    prompt_steps: int = 50  # ... or at its onset, as info, where those points span more steps
    far_rise: float = 1.0  # pending is critical while 3 points in a row stand 2x the level
    recovery_z: float = 2.0  # back within 2 sigmas (of a median) of the pre-spike level ...
    recovery_tolerance: float = 0.05  # ... or within 5% of it
    recovery_window: int = 25  # steps whose median must be back (at most this many points)
    recovery_points: int = 2  # coarse logging: that many points in a row
    quick_points: int = 5  # one back by its confirm_points-th point: the median of 5 points is enough
    fast_steps: int = 100
    fast_points: int = 2
    slow_steps: int = 1000
    slow_points: int = 10
    slow_share: float = 0.01  # of the run's age at the onset
    watch_steps: int = 10000  # a divergent call stands if not back within this
    watch_points: int = 100
    watch_share: float = 0.1
    settle_steps: int = 300  # no progress back over this long: settled higher
    settle_points: int = 6  # ... at least this many points; every median of this many since the onset far_rise up: blown up
    baseline: BaselineConfig = BaselineConfig()


@dataclass(frozen=True)
class Followed(StreamState):
    """One spike being followed.  Indices count the tag's finite points from the first."""

    onset: int
    onset_step: int
    rise_step: int  # where its rise began: the onset, or the first of the points just before it above the band
    level: float
    sigma: float
    band: float  # back when at or below this
    z: float
    threshold: float
    interval: int
    width: int  # recovery: median of `width` points; 1: `recovery_points` in a row
    fast: int  # horizons, in steps
    slow: int
    watch: int
    settle: int  # points
    searched: int  # first index not yet tried as the start of the recovery
    summed: int  # first index not yet in `area` and the peak
    area: float  # excess over the level x steps since the point before, over [onset, summed)
    peak: int
    peak_step: int
    peak_value: float
    seen: int  # last index the live calls were made at
    seen_step: int
    top_value: float  # the highest value up to `seen`
    confirmed: bool | None  # its first `confirm_points` points all above the band (None: not seen yet)
    alerted: bool
    critical: bool
    why: str  # why it was called divergent; "" until it is
    new_level: int | None  # index where its first divergent call gave the loss a new level ...
    judged: int  # ... judged up to this index (_NEVER: that call gave none)
    nonfinite_step: int | None
    recovered: bool
    climb: bool  # kept climbing past its rise before it was reported: a trend, followed but never reported
    end: int | None  # last index it spans, once final
    end_step: int | None


@dataclass(frozen=True)
class SpikeState(StreamState):
    count: int  # finite points fed
    first_step: int | None
    steps: np.ndarray  # the last `memory` finite points
    values: np.ndarray
    tail: np.ndarray  # maxima of z of the last complete tail blocks, oldest first
    block_max: float  # max z so far in the current tail block
    held_tail: np.ndarray  # the same for z of the medians of `confirm_points` points
    held_block_max: float
    resume: int  # the next onset is at this index or later, decided at `resume_known` or later ...
    resume_known: int  # (the newest spike's recovery is known there: a live run knew no sooner)
    resume_step: int  # ... or past this step (the newest spike's slow horizon)
    followed: tuple[Followed, ...]


@dataclass(frozen=True, eq=False)
class _Window:
    """The points a feed works on: the state's last points, then the new finite ones."""

    step: np.ndarray
    value: np.ndarray
    first: int  # index of step[0]
    new: int  # position of the first new point
    bad: np.ndarray  # steps of the non-finite points fed

    def at(self, index: int) -> int:
        return index - self.first


@dataclass(frozen=True, eq=False)
class _Held:
    """At each point of a window: the median of it and the `confirm_points - 1` points
    before it, that median's z against the level before the first of them, and (for the
    new points) the threshold of that z."""

    value: np.ndarray
    z: np.ndarray
    bar: np.ndarray


class _Onsets(NamedTuple):
    index: np.ndarray
    z: np.ndarray
    threshold: np.ndarray
    level: np.ndarray  # NaN: the baseline's level and sigma at the onset
    sigma: np.ndarray
    span: np.ndarray  # the points from the onset on that the rule judged: 1, or a median's


def _no_onsets() -> _Onsets:
    return _Onsets(np.zeros(0, np.int64), *(np.zeros(0) for _ in range(4)), np.zeros(0, np.int64))


_SEVERITY = {
    SpikeClass.FAST_RECOVERING: Severity.INFO,
    SpikeClass.SLOW_RECOVERING: Severity.WARNING,
    SpikeClass.DIVERGENT: Severity.CRITICAL,
    SpikeClass.PENDING: Severity.WARNING,
}


class LossSpikeDetector:
    def __init__(self, config: SpikeConfig = SpikeConfig(), evaluations: bool = False) -> None:
        """`evaluations`: the tag is an eval loss, whose first points the early rule judges."""
        self.config = config
        self.evaluations = evaluations
        c = config
        settle = max(c.settle_steps, c.settle_points)
        needed = max(memory(c.baseline), settle + 1, c.recovery_window + c.recovery_points, c.rise_points + 1)
        # the last points are judged in the next feeds
        self.memory = needed + max(c.confirm_points, c.long_points) - 1

    def detect(self, series: Series) -> list[Finding]:
        """Every spike of one tag's current view: one feed of all of it."""
        _, closed, still = self.feed(self.start(), series.step, series.value, series.tag)
        return sorted(closed + still, key=lambda f: f.start_step)

    def start(self) -> SpikeState:
        nothing = np.zeros(0)
        return SpikeState(0, None, np.zeros(0, np.int64), nothing, nothing, -np.inf, nothing, -np.inf, 0, 0, -1, ())

    def feed(
        self, state: SpikeState, step: np.ndarray, value: np.ndarray, tag: str = ""
    ) -> tuple[SpikeState, list[Finding], list[Finding]]:
        """The next points of a tag (sorted by step, after those fed before): the new state,
        the findings now final, and those still open (`tag` names them)."""
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return self._feed(state, np.asarray(step, np.int64), np.asarray(value, np.float64), tag)

    def _feed(
        self, state: SpikeState, step: np.ndarray, value: np.ndarray, tag: str
    ) -> tuple[SpikeState, list[Finding], list[Finding]]:
        c = self.config
        finite = np.isfinite(value)
        if finite.all():  # no copies of a whole series fed at once
            new_steps, new_values, bad = step, value, step[:0]
        else:
            new_steps, new_values, bad = step[finite], value[finite], step[~finite]
        w = _Window(
            np.concatenate([state.steps, new_steps]) if len(state.steps) else new_steps,
            np.concatenate([state.values, new_values]) if len(state.values) else new_values,
            state.count - len(state.steps),
            len(state.steps),
            bad,
        )
        first_step = state.first_step if state.first_step is not None or not len(step) else int(step[0])
        base = trailing_baseline(w.value, c.baseline)
        z = _point_z(w.value, base, c.local_margin)
        bar, tail, block_max = self._thresholds(state.count, state.tail, state.block_max, z[w.new :], c.z)
        held_value = _move_median(w.value, c.confirm_points)
        held_z = _lagged_z(held_value, base.level, base.sigma, c.confirm_points - 1)
        held_bar, held_tail, held_block_max = self._thresholds(
            state.count, state.held_tail, state.held_block_max, held_z[w.new :], c.held_z
        )
        held = _Held(held_value, held_z, held_bar)

        closed: list[Followed] = []
        followed: list[Followed] = []
        resume, resume_known, resume_step = state.resume, state.resume_known, state.resume_step
        for spike in state.followed:
            spike = self._advance(spike, w)
            (closed if spike.end is not None else followed).append(spike)
            if spike.onset_step + spike.slow == resume_step:  # the newest spike
                if spike.recovered:  # is back
                    resume, resume_known = min(resume, spike.end or 0, _after_level(spike)), self._known(spike)
                elif spike.new_level is not None:  # has given the loss a new level
                    resume, resume_known = min(resume, spike.new_level + 1), min(resume_known, spike.new_level)
        onsets, decided = self._onsets(w, base, z, bar, held)
        steps = w.step[onsets.index - w.first]
        while len(onsets.index):
            # the next onset, in the order they are decided, after where the newest spike
            # came back or gave the loss a new level, or past its slow horizon
            free = np.flatnonzero(((onsets.index >= resume) & (decided >= resume_known)) | (steps > resume_step))
            if not len(free):
                break
            k = int(free[0])
            begun = self._begin(w, base, _Onsets(*(a[k] for a in onsets)), first_step, resume)
            for before in [f for f in followed if f.new_level is not None]:  # it ends where this begins
                followed.remove(before)
                closed.append(_evolve(before, end=begun.onset - 1, end_step=int(w.step[w.at(begun.onset) - 1])))
            spike = self._advance(begun, w)
            (closed if spike.end is not None else followed).append(spike)
            if len(followed) > MAX_FOLLOWED:
                closed.append(self._give_up(followed.pop(0), w))
            if spike.recovered and spike.end is not None:
                resume, resume_known = min(max(spike.end, spike.onset + 1), _after_level(spike)), self._known(spike)
            elif spike.new_level is not None:
                resume, resume_known = spike.new_level + 1, spike.new_level
            else:
                resume, resume_known = _NEVER, _NEVER
            resume_step = spike.onset_step + spike.slow
            onsets, decided, steps = _Onsets(*(a[k + 1 :] for a in onsets)), decided[k + 1 :], steps[k + 1 :]
        # area and peak once every spike's end in this feed is known (a later onset may end
        # one), up to the points that can no longer be its end
        closed = [self._sum(f, w, w.at(f.end) + 1) for f in closed]
        followed = [self._sum(f, w, min(w.at(f.searched) + self._recovery_window(f)[1], len(w.value))) for f in followed]
        new_state = SpikeState(
            count=state.count + int(finite.sum()),
            first_step=first_step,
            steps=w.step[-self.memory :].copy(),
            values=w.value[-self.memory :].copy(),
            tail=tail,
            block_max=block_max,
            held_tail=held_tail,
            held_block_max=held_block_max,
            resume=int(resume),
            resume_known=int(resume_known),
            resume_step=int(resume_step),
            followed=tuple(followed),
        )
        done = [self._finding(tag, s, w) for s in closed if not s.climb]
        still = [self._finding(tag, s, w) for s in followed if (s.alerted or self._prompt(s)) and not s.climb]
        return new_state, done, still

    # -- onsets -------------------------------------------------------------------------

    def _thresholds(
        self, count: int, tail: np.ndarray, block_max: float, z: np.ndarray, floor: float
    ) -> tuple[np.ndarray, np.ndarray, float]:
        """The threshold of each new point (`count` fed before it), from the maxima of z
        over the `tail_blocks` complete tail blocks before its own, never below `floor`
        (nor below `z` before `held_after_blocks` blocks are known); and the block maxima
        to keep.  A point at or below `floor` is below its threshold whatever the tail, so
        the tail's percentile is taken only for blocks with a point past `floor`: the
        other blocks' points get +inf, which nothing reads but `z > threshold`."""
        c = self.config
        size, kept = c.tail_block, c.tail_blocks
        if not len(z):
            return np.zeros(0), tail, block_max
        first = count // size
        blocks = (count + len(z) - 1) // size - first + 1  # blocks this feed's points fall in
        starts = np.maximum((first + np.arange(blocks)) * size - count, 0)
        peaks = np.fmax.reduceat(z, starts)  # NaN ignored; -inf for a block of NaN only
        peaks[np.isnan(peaks)] = -np.inf
        peaks[0] = max(peaks[0], block_max)
        done = (count + len(z)) // size - first  # blocks of this feed now complete
        history = np.concatenate([tail, np.where(np.isfinite(peaks[:done]), peaks[:done], 0.0)])
        rows = np.flatnonzero(peaks > floor)
        if len(rows) <= FEW_ROWS:
            bar = np.array(self._few_bars(history.tolist(), len(tail), rows.tolist(), blocks, floor))
        else:
            # block first + k is judged by the `kept` complete blocks before it (fewer in the
            # run's first blocks): padded[ends[k] : ends[k] + kept]
            padded = np.concatenate([np.full(kept, np.nan), history])
            windows = padded[(len(tail) + rows)[:, None] + np.arange(kept)]
            known = np.sum(~np.isnan(windows), axis=1)
            floor_now = np.where(known >= c.held_after_blocks, floor, max(floor, c.z))
            bar = np.full(blocks, np.inf)
            bar[rows] = np.maximum(floor_now, c.tail_margin * _percentile(windows, c.tail_quantile, c.tail_cap))
        block_max = float(peaks[-1]) if done < blocks else -np.inf
        offset = count - first * size  # of the first new point in its block
        return np.repeat(bar, size)[offset : offset + len(z)], history[-kept:].copy(), block_max

    def _few_bars(self, history: list[float], before: int, rows: list[int], blocks: int, floor: float) -> list[float]:
        """`_thresholds`' bars when only a few blocks are judged (a live feed's one to three),
        in Python's arithmetic: the same numbers as numpy's (`_percentile`'s interpolation,
        in the same order), without the two dozen numpy calls that cost more than the
        numbers on a few rows of 32.  `history`: the tail's block maxima (`before` of them)
        then this feed's complete blocks', all finite."""
        c = self.config
        bar = [math.inf] * blocks
        for k in rows:
            window = sorted(history[max(before + k - c.tail_blocks, 0) : before + k])
            n = len(window)
            floor_now = floor if n >= c.held_after_blocks else max(floor, c.z)
            if not n:  # no tail yet: the floor alone
                bar[k] = floor_now
                continue
            middle = window[(n - 1) // 2] if n % 2 else (window[n // 2 - 1] + window[n // 2]) / 2
            window = [min(v, c.tail_cap * middle) for v in window]
            at = c.tail_quantile * (n - 1)
            lo = math.floor(at)
            below, above = window[lo], window[min(lo + 1, n - 1)]
            bar[k] = max(floor_now, c.tail_margin * (below + (above - below) * (at - lo)))
        return bar

    def _onsets(
        self, w: _Window, base: Baseline, z: np.ndarray, bar: np.ndarray, held: _Held
    ) -> tuple[_Onsets, np.ndarray]:
        """The points that could start a spike, by every rule, in the order they are decided,
        and where each is decided: a point by its own height at once, by the median of it
        and the `confirm_points - 1` after it once those are known, by the long rule once
        `long_points - 1` are, so the same onsets come out however the series is cut.
        `bar`: the new points' thresholds."""
        c = self.config
        lag = c.confirm_points - 1
        rules = (  # each rule's onsets, and the points after an onset it waits for
            (self._point_onsets(w, base, z, bar), 0),
            (self._early_onsets(w, base), 0),
            (self._young_onsets(w, base, held), lag),
            (self._held_onsets(w, base, held), lag),
            (self._long_onsets(w, base, held), c.long_points - 1),
        )
        found = [(onsets, wait) for onsets, wait in rules if len(onsets.index)]
        if len(found) <= 1:  # one rule's onsets are in the order of their points
            onsets, wait = found[0] if found else (_no_onsets(), 0)
            return onsets, onsets.index + wait
        decided = np.concatenate([onsets.index + wait for onsets, wait in found])
        order = np.lexsort((np.concatenate([onsets.index for onsets, _ in found]), decided))
        return _Onsets(*(np.concatenate(field)[order] for field in zip(*(onsets for onsets, _ in found)))), decided[order]

    def _point_onsets(self, w: _Window, base: Baseline, z: np.ndarray, bar: np.ndarray) -> _Onsets:
        """The new points far enough above the level, in sigmas and in representable steps,
        and sudden: decided at the point itself, so a coarsely logged spike is known at its
        onset.  `bar`: the new points' thresholds."""
        c = self.config
        at = np.flatnonzero(z[w.new :] > bar)  # past a threshold is rare: the rest is judged there only
        if not len(at):
            return _no_onsets()
        p = w.new + at  # window positions
        turned = _turned_up(base, p)  # measured as off a falling curve, but the curve had turned to climb
        if turned.any():
            t = p[turned]
            plain = _rising_z(w.value[t], base, t)
            keep = ~turned
            keep[turned] = plain > bar[at[turned]]
            at, p, z = at[keep], p[keep], z.copy()
            z[t] = plain
            if not len(at):
                return _no_onsets()
        lowest = _lowest_since(w.value, p, c.rise_points)
        hit = np.flatnonzero(_sudden(w.value[p], base.level[p], lowest, base.quantum[p], c.min_quanta))
        unset = np.full(len(hit), np.nan)
        return _Onsets(w.first + p[hit], z[p[hit]], bar[at[hit]], unset, unset, np.ones(len(hit), np.int64))

    def _held_onsets(self, w: _Window, base: Baseline, held: _Held) -> _Onsets:
        """The points that start a jump that stays: the median of the point and the
        `confirm_points - 1` after it far enough above the level (and sudden), the point
        itself at least half that high.  Decided once those points are known; `held.bar`
        ends at the window's last point."""
        c = self.config
        lag = c.confirm_points - 1
        lo, hi = max(w.new - lag, 0), len(w.value) - lag  # the points judged now: [lo, hi)
        if hi <= lo:
            return _no_onsets()
        held_z, held_bar = held.z[lo + lag :], held.bar[len(held.bar) - (hi - lo) :]
        at = np.flatnonzero(held_z > held_bar)  # rare: the rest is judged there only
        if not len(at):
            return _no_onsets()
        p = lo + at  # window positions
        value, level, held_value = w.value[p], base.level[p], held.value[p + lag]
        lowest = _lowest_since(w.value, p, c.rise_points)
        first_half = value - level >= 0.5 * (held_value - level)  # the jump starts at the point, not after it
        hit = np.flatnonzero(_sudden(held_value, level, lowest, base.quantum[p], c.min_quanta) & first_half)
        unset = np.full(len(hit), np.nan)
        return _Onsets(w.first + p[hit], held_z[at[hit]], held_bar[at[hit]], unset, unset, np.full(len(hit), c.confirm_points))

    def _early_onsets(self, w: _Window, base: Baseline) -> _Onsets:
        """An eval loss's new points before the baseline knows a sigma (its first ~40
        evaluations: most of a fine-tune's, which evaluates a few dozen times): one starts a
        spike when it rises over the evaluation before by `early_margin` (5) x the largest
        rise from one evaluation to the next so far and by at least `early_rise` (10%), stands
        half that over each of the three before (a rebound from a one-point dip is no rise),
        on a loss above zero (a rise from exactly 0, or of an objective below 0, has no
        scale).  From the 5th evaluation, but before the baseline's `min_points`-th (8th)
        only a rise of `first_rise` (100%, a doubling) or more: there a fine-tune's eval
        loss often turns up by a third an evaluation as it overfits, which is the overfitting
        detector's to tell, while a char-LM's went 1.417 -> 114.7 at its 8th evaluation every
        200 steps when its LR went 300x (`charlm_interval_diverge`), and waiting for the
        divergence alert took 3 more.  Its level is the evaluation
        before; its sigma, the spread of the changes so far (rough: it only widens the band).
        A char-LM's eval loss, falling smoothly to 1.414 by its 13th evaluation, jumped to
        1.567 (+11%) when the LR went x5 and was back two evaluations later
        (`charlm_lr_jump_c`, bench/labels trained tuning); 10% is the overfitting detector's
        `sure_rise`, 5 sigmas of the noisiest eval loss in the tuning logs.  The run's own
        largest rise sets the bar, as its blips do later, with a wide margin because it is
        the largest of a few: under noise as heavy-tailed as Student's t with 4 degrees of
        freedom, a rise m times the largest of n comes by chance about m^-4 / (n + 1) of the
        time.  On 500 flat eval losses of 40 evaluations with 3% such noise, 4 warned at 5x,
        8 at 3x and 19 at 2x (tests/test_spikes.py).  Train losses are not judged so: their
        noise is too wild for a rule this blind (2x reported blips in the first 40 steps of
        two char-LM runs, 3x in one); `_young_onsets` judges them."""
        c = self.config
        hi = len(w.value)
        start = max(w.new, c.confirm_points + 1)  # the three before it, and a change before those
        if not self.evaluations or w.first or hi <= start:
            return _no_onsets()
        p = start + np.flatnonzero(np.isnan(base.sigma[start:hi]))
        if not len(p):
            return _no_onsets()
        v = w.value[: p[-1] + 1]
        positive = np.minimum.accumulate(v) > 0
        change = np.where(positive[:-1], v[1:] / np.where(positive[:-1], v[:-1], 1.0) - 1, np.inf)
        largest = np.maximum.accumulate(change)  # largest[j - 1]: of the changes into points 1..j
        level = v[p - 1]
        least = np.where(p < c.baseline.min_points, c.first_rise, c.early_rise)
        bar = np.maximum(c.early_margin * np.maximum(largest[p - 2], 0.0), least) * level
        lowest = _lowest_since(v, p, c.rise_points)
        sudden = _sudden(v[p], level, lowest, base.quantum[p], c.min_quanta)
        recent = v[p[:, None] - np.arange(1, c.confirm_points + 1)].max(axis=1)
        not_rebound = v[p] - recent > 0.5 * bar  # half of it over each of the last 3: no rebound from a dip
        hit = np.flatnonzero(positive[p] & (v[p] - level > bar) & not_rebound & sudden)
        if not len(hit):
            return _no_onsets()
        p, level, bar = p[hit], level[hit], bar[hit]
        sigma = np.array([_change_spread(v[:k], float(base.quantum[k])) for k in p])
        return _Onsets(w.first + p, (v[p] - level) / sigma, bar / sigma, level, sigma, np.ones(len(p), np.int64))

    def _young_onsets(self, w: _Window, base: Baseline, held: _Held) -> _Onsets:
        """A train loss's jump that stays before the baseline knows a sigma (its first ~40
        points: all of many fine-tunes logged every 10-50 steps): the point and the
        `confirm_points - 1` after it each above the highest of the `young_points` (8)
        before, their median `young_rise` (25%) over those points' median and `young_z` (4)
        x the loss's typical change so far (the median of |log| of each point over the one
        before), the point at least half that high, and the 8 not climbing (the median of
        their later half at most half of `young_rise` over their earlier half's: a climb is
        a trend's); on a loss above zero, from its `2 * young_points`-th (16th) point: the
        typical change is read off 15 changes at least, and a run's first points move with
        its warm-up (an SGDR-like run whose loss rose 30% over its steps 6-10 with the LR at
        its peak from step 0 and came back: tests/test_schedule.py).  Its level is the median
        of the 8, its sigma that typical change at that level (never below the values'
        rounding).
        A subjectivity classifier's loss (`JakubMroz4__subjectivity-detection`, bench/wild.py
        tuning), logged every 10 steps, fell 0.67 -> 0.31-0.47 and at its 31st point jumped
        to 0.76 and stayed at chance (0.65-0.74, ln 2) to the end: 1.8x, 12x its typical
        change of 5%.  A LoRA adapter's loss of 0.03-0.06, whose points change by 25% one to
        the next, went to 0.06-0.08: 2.5x, noise.  A Whisper fine-tune's loss climbed 0.15 ->
        0.23 over 8 points, then 0.28-0.33 with its eval loss: a climb (+26% from the first
        half of the 8 to the second)."""
        c = self.config
        lag, n = c.confirm_points - 1, c.young_points
        lo, hi = max(w.new - lag, 2 * n), len(w.value) - lag  # the points judged now, from the 16th
        if self.evaluations or w.first or hi <= lo or not np.isnan(base.sigma[lo]):
            return _no_onsets()
        young = np.isnan(base.sigma[lo:hi])
        p = lo + np.flatnonzero(young[: len(young) if young[-1] else young.argmin()])  # the stretch before a sigma
        v = w.value[: (p[-1] if len(p) else lo) + lag + 1]
        if not len(p) or not np.all(v > 0):
            return _no_onsets()
        # nearly always no point clears the highest of the 8 before three times in a row:
        # the rest is worked out only where one does
        p = p[bn.move_min(v, c.confirm_points)[p + lag] > bn.move_max(v, n)[p - 1]]
        if not len(p):
            return _no_onsets()
        before = np.lib.stride_tricks.sliding_window_view(v, n)[p - n]  # the n points before each
        level = row_medians(before)
        rise = held.value[p + lag]  # the median of the point and those after it
        half = n // 2
        flat = row_medians(before[:, half:]) <= (1 + c.young_rise / 2) * row_medians(before[:, :half])
        maybe = np.flatnonzero((rise >= (1 + c.young_rise) * level) & (v[p] - level >= 0.5 * (rise - level)) & flat)
        if not len(maybe):
            return _no_onsets()
        p, level, up = p[maybe], level[maybe], np.log(rise[maybe] / level[maybe])
        change = np.abs(np.diff(np.log(v)))  # change[k]: into point k + 1
        typical = np.array([median(change[: k - 1]) for k in p])  # the changes into points 1 .. k - 1
        typical = np.fmax(typical, base.quantum[p] / level)  # a loss repeating one value moves by its rounding
        hit = np.flatnonzero(up > c.young_z * typical)
        if not len(hit):
            return _no_onsets()
        p, level, typical, up = p[hit], level[hit], typical[hit], up[hit]
        return _Onsets(w.first + p, up / typical, np.full(len(p), c.young_z), level, level * typical, np.full(len(p), c.confirm_points))

    def _long_onsets(self, w: _Window, base: Baseline, held: _Held) -> _Onsets:
        """Points that start a jump that stays while each point stays within the noise: the
        median of the point and the `long_points - 1` after it `long_z` sigmas up (6 before
        `held_after_blocks` tail blocks), sudden, the point at least half that high, three
        quarters of the rise gained over the median of the `long_points // 2` points before
        it, and the second half of them not half the rise above the first.  The level is
        carried along its rise over the `long_points` before, to the middle of the points
        judged: a steady climb is a trend's, not a jump.
        `charlm_lr_jump_c` (bench/labels trained tuning): an LR x5 lifts the loss +25% for
        250 steps, its 3-point medians 3.2 sigmas up, under the held rule's 4; its 16-point
        median stands 3.1 up, where no stretch of the 23 tuning runs' train losses reaches
        1.4 outside a labelled event.  A median of 16 points past a value has 8 of them past
        it, so some 3-point median among them is too: the 16-point medians are taken only
        where the highest 3-point median within reaches the bar."""
        c = self.config
        lag, n = c.long_points - 1, c.long_points
        lo, hi = max(w.new - lag, 0), len(w.value) - lag  # the points judged now: [lo, hi)
        if hi <= lo or n <= c.confirm_points:
            return _no_onsets()
        p = np.arange(lo, hi)
        bar = np.where(w.first + p >= c.held_after_blocks * c.tail_block, c.long_z, c.z)
        level, sigma = base.level[lo:hi], base.sigma[lo:hi]
        within = bn.move_max(held.value, n - c.confirm_points + 1)[lo + lag : hi + lag]
        maybe = np.flatnonzero(within > level + bar * sigma)
        if not len(maybe):
            return _no_onsets()
        p, bar, sigma = p[maybe], bar[maybe], sigma[maybe]
        # where the curve was heading: a rising level carried to the middle of the points
        heading = np.maximum(base.level[p] - base.level[np.maximum(p - n, 0)], 0) / n
        level = base.level[p] + heading * (n - 1) / 2
        after = w.value[p[:, None] + np.arange(n)]
        median = row_medians(after)
        z = (median - level) / sigma
        value, quantum = w.value[p], base.quantum[p]
        lowest = _lowest_since(w.value, p, c.rise_points)
        rise = median - level
        first_half = value - level >= 0.5 * rise
        # a jump at the point that stays, not a climb the trailing level lags: most of the
        # rise gained over the points just before it, and its second half not half the rise
        # above its first
        before = row_medians(w.value[np.maximum(p[:, None] - 1 - np.arange(n // 2), 0)])
        jumped = median - before >= 0.75 * rise
        stays = row_medians(after[:, n // 2 :]) - row_medians(after[:, : n // 2]) <= 0.5 * rise
        sudden = _sudden(median, level, lowest, quantum, c.min_quanta) & first_half & jumped & stays
        hit = np.flatnonzero((z > bar) & sudden)
        unset = np.full(len(hit), np.nan)
        return _Onsets(w.first + p[hit], z[hit], bar[hit], unset, unset, np.full(len(hit), n))

    def _begin(self, w: _Window, base: Baseline, found: _Onsets, first_step: int | None, since: int) -> Followed:
        """A spike at the onset `found` (one of each field): its level, band and horizons in
        the run's own time, and where its rise began: up to `rise_points` points before the
        onset, from index `since` (after the spike before), all above the band (Mixtral
        8x7B climbed from 1625 to the point at 1640 that stood 7 sigmas out)."""
        c = self.config
        onset, z, threshold = int(found.index), float(found.z), float(found.threshold)
        i = w.at(onset)
        s = w.step
        gaps = np.sort(np.diff(s[max(0, i - c.baseline.window) : i + 1]))  # the median gap: the logging interval
        interval = max(1, int((gaps[(len(gaps) - 1) // 2] + gaps[len(gaps) // 2]) / 2)) if len(gaps) else 1
        age = int(s[i]) - (first_step if first_step is not None else int(s[i]))
        if not math.isnan(found.level):  # the early rule's own
            level, sigma = float(found.level), float(found.sigma)
            point_sigma = sigma
        else:
            level, point_sigma = float(base.level[i]), float(base.sigma[i])
            # the noise its band and class are judged in: at most `local_margin` x the spread
            # of second differences, which a trend does not widen (module docstring)
            sigma = min(point_sigma, c.local_margin * float(base.local_sigma[i]))
            if not _turned_up(base, np.array([i])).any() and base.following[i] < level:
                point_sigma = sigma  # down a falling curve, the sigma the one-point rule measured it in
        width = max(1, min(c.recovery_window, c.recovery_window // interval))

        def over(spread: float) -> float:  # `recovery_z` such spreads, `recovery_tolerance` or 2 quanta over the level
            return level + max(c.recovery_z * spread, c.recovery_tolerance * abs(level), 2 * float(base.quantum[i]))

        # the noise of a median of `width` points is sigma * sqrt(pi / 2 / width)
        band = over(sigma * np.sqrt(np.pi / 2 / width))
        fast = max(c.fast_points * interval, c.fast_steps)
        slow = max(fast, c.slow_points * interval, c.slow_steps, int(c.slow_share * age))
        watch = max(slow, c.watch_points * interval, c.watch_steps, int(c.watch_share * age))
        # a point before the onset is part of the rise when it stands out as one point (the
        # band is a median's: half of a noisy loss's points stand over it)
        risen = over(point_sigma)
        rise = i
        while rise > max(0, w.at(since), i - c.rise_points) and w.value[rise - 1] > risen:
            rise -= 1
        span = int(found.span)
        # a jump that stays, judged on the median of more points than confirm one, is told as
        # the rule decides if that median is over the band (all of them are known by then)
        alerted = span > c.confirm_points and bool(np.median(w.value[i : i + span]) > band)
        return Followed(
            onset=onset, onset_step=int(s[i]), rise_step=int(s[rise]), level=level, sigma=sigma, band=band, z=z,
            threshold=threshold, interval=interval, width=width, fast=fast, slow=slow,
            watch=watch, settle=max(c.settle_points, c.settle_steps // interval), searched=onset + 1, summed=onset,
            area=0.0, peak=onset, peak_step=int(s[i]), peak_value=float(w.value[i]), seen=onset - 1,
            seen_step=int(s[i]), top_value=float(w.value[i]), confirmed=None, alerted=alerted, critical=False,
            why="", new_level=None, judged=onset - 1, nonfinite_step=None, recovered=False, climb=False, end=None, end_step=None,
        )

    # -- following a spike ---------------------------------------------------------------

    def _advance(self, spike: Followed, w: _Window) -> Followed:
        """Follow a spike over the points of a feed: non-finite values, the recovery,
        whether it is final, and the live calls up to where it ends."""
        if spike.nonfinite_step is None:
            later = w.bad[w.bad > spike.onset_step]
            if len(later):
                at = int(later[0])
                spike = _evolve(spike, nonfinite_step=at, why=spike.why or f"turned non-finite at step {at}")
        o, n = w.at(spike.onset), self.config.confirm_points
        if spike.confirmed is None and o + n <= len(w.value):
            spike = _evolve(spike, confirmed=bool(np.all(w.value[o : o + n] > spike.band)))
        spike = self._rebase(self._search(spike, w), w)
        if spike.recovered and spike.end_step is not None and spike.end_step - spike.onset_step <= spike.fast:
            return spike  # back within the fast horizon: nothing a live run is told changes its class
        return self._live_calls(spike, w, w.at(spike.end) if spike.end is not None else len(w.value) - 1)

    def _prompt(self, spike: Followed) -> bool:
        """Logged so coarsely that the points that confirm it span over `prompt_steps`:
        reported from its onset, as info until alerted."""
        c = self.config
        return (c.confirm_points - 1) * spike.interval > c.prompt_steps

    def _recovery_window(self, spike: Followed) -> tuple[int, int]:
        """The points a recovery is judged on, and where in them it stands: `recovery_points`
        in a row with coarse logging, else the median of `width` points (of `quick_points`
        for one already back by its `confirm_points`-th point: fewer points tell it)."""
        c = self.config
        if spike.width == 1:
            return c.recovery_points, 0
        span = spike.width if spike.confirmed else min(spike.width, c.quick_points)
        return span, span // 2  # a median stands in the middle of its window

    def _known(self, spike: Followed) -> int:
        """Where a recovered spike's recovery became known: its window's last point."""
        span, lead = self._recovery_window(spike)
        return (spike.end or 0) - lead + span - 1

    def _search(self, spike: Followed, w: _Window) -> Followed:
        """Try the recovery starts whose window is now complete: the first back within the
        watch horizon (and before any non-finite value) is the recovery; once none can be,
        the spike is final as divergent.  Tried in growing pieces, so a spike that is soon
        back costs only the points it spans."""
        s, v = w.step, w.value
        if spike.width > 1 and spike.confirmed is None:
            return spike
        span, lead = self._recovery_window(spike)
        limit = spike.onset_step + spike.watch
        if spike.nonfinite_step is not None:
            limit = min(limit, spike.nonfinite_step - 1)
        a, last = w.at(spike.searched), len(v) - span  # window starts to try
        piece = 64
        while a <= last:
            b = min(last, a + piece - 1)
            tried = v[a : b + span]
            if spike.width > 1:
                back = bn.move_median(tried, span)[span - 1 :] <= spike.band
            else:
                back = bn.move_max(tried, span)[span - 1 :] <= spike.band
            where = np.arange(a, b + 1) + lead
            valid = s[where] <= limit
            hits = np.flatnonzero(back & valid)
            beyond = np.flatnonzero(~valid)
            if len(hits) and (not len(beyond) or hits[0] < beyond[0]):
                end = int(where[hits[0]])
                return _evolve(spike, recovered=True, end=w.first + end, end_step=int(s[end]))
            if len(beyond):
                end = max(int(np.searchsorted(s, limit, side="right")) - 1, w.at(spike.summed) - 1)
                why = spike.why if spike.nonfinite_step is not None else f"not back within {spike.watch} steps"
                return _evolve(spike, why=why, end=w.first + end, end_step=int(s[end]))
            spike = _evolve(spike, searched=w.first + b + 1)
            a, piece = b + 1, piece * 4
        return spike

    def _give_up(self, spike: Followed, w: _Window) -> Followed:
        """Final as divergent without an outcome: too many later spikes are followed."""
        end = len(w.value) - 1
        why = spike.why or f"not back within {spike.slow} steps"
        return _evolve(spike, why=why, end=w.first + end, end_step=int(w.step[end]))

    def _sum(self, spike: Followed, w: _Window, upto: int) -> Followed:
        """Take the points before position `upto` of the window into the area and peak."""
        a = w.at(spike.summed)
        if upto <= a:
            return spike
        area, k, top = _excess(spike, w, a, upto)
        if top > spike.peak_value:
            spike = _evolve(spike, peak=w.first + k, peak_step=int(w.step[k]), peak_value=top)
        return _evolve(spike, summed=w.first + upto, area=area)

    def _live_calls(self, spike: Followed, w: _Window, last: int) -> Followed:
        """What a live run is told at each new point up to position `last`: alerted (still
        above the band at its `confirm_points`-th point, or not back within the fast
        horizon once its rise is over; found on a median that stood over the band, at once),
        critical (the median of `confirm_points` points in a row `far_rise` over the level),
        divergent (still rising, blown up, or settled higher at a pace that would not bring
        it back within the slow horizon).  One that is not yet reported
        and makes new highs past its rise (`rise_points` points and the fast horizon) is a
        climb, which the trend detectors judge: it is dropped there."""
        c = self.config
        s, v = w.step, w.value
        o, first = w.at(spike.onset), max(w.at(spike.seen) + 1, w.at(spike.onset))
        if last < first or spike.climb:
            return spike
        n = c.confirm_points
        critical = spike.critical
        if not critical and last >= o + n - 1:
            lo = max(first, o + n - 1)
            medians = bn.move_median(v[lo - n + 1 : last + 1], n)[n - 1 :]
            critical = bool(np.any(medians >= self._far(spike)))
        points = np.arange(first, last + 1)
        part = v[first : last + 1]
        before = np.maximum.accumulate(np.concatenate([[spike.top_value], part]))[:-1]  # highest before each
        top_value = max(spike.top_value, float(part.max()))
        why = spike.why or self._settled(spike, w, first, last)[0]
        if not spike.alerted:
            over = (points - o > c.rise_points) & (s[first : last + 1] - spike.onset_step > spike.fast)
            confirmed = (points == o + n - 1) & bool(spike.confirmed)
            climbs = np.flatnonzero(over & (part > before + spike.sigma))
            alerts = np.flatnonzero(confirmed | over)
            if len(climbs) and (not len(alerts) or climbs[0] <= alerts[0]):
                return _evolve(spike, climb=True)
            alerted = bool(len(alerts)) or bool(why)
        else:
            alerted = True
        return _evolve(
            spike, alerted=alerted, critical=critical, why=why, seen=w.first + last, seen_step=int(s[last]),
            top_value=top_value,
        )

    def _rebase(self, spike: Followed, w: _Window) -> Followed:
        """Where the spike's first divergent call gave the loss a new level, on which a
        further jump is a spike of its own: settled higher (charlm_lr_ramp_f: a loss that
        jumped 1.8x at 1480 and sat at 3.1 was wrecked 300x from 1838), or still rising
        but within `far_rise` of the level it left (charlm_lr_ramp_clip_g: +24% at 1369,
        climbing with its LR ramp, blown up from 1648).  Beyond that the run is blown up,
        and its further jumps are the same disaster.  Judged on the points that can no
        longer be the recovery's end, so that where a series is cut never changes it."""
        if spike.new_level is not None or spike.judged == _NEVER:
            return spike
        if spike.end is not None:
            last = w.at(spike.end)
        else:
            last = min(w.at(spike.searched) + self._recovery_window(spike)[1] - 1, len(w.value) - 1)
        first = max(w.at(spike.judged) + 1, w.at(spike.onset))
        if last < first:
            return spike
        why, at, median = self._settled(spike, w, first, last)
        if not why:
            return _evolve(spike, judged=w.first + last)
        if median >= self._far(spike):
            return _evolve(spike, judged=_NEVER)
        return _evolve(spike, new_level=w.first + at, judged=w.first + at)

    def _settled(self, spike: Followed, w: _Window, first: int, last: int) -> tuple[str, int, float]:
        """Why the spike is divergent at the first new point where it shows, or "": the
        median of the last `settle` points' newer half is above the band and higher than
        the older half's (still rising), or has come down too little to be back by the slow
        horizon at that pace (settled), or blown up (`_blown_up`) first; with the window
        position of that point and the newer half's median (or the blown-up median) there."""
        blown = self._blown_up(spike, w, first, last)
        s, v = w.step, w.value
        half = max(spike.settle // 2, 1)
        o = w.at(spike.onset)
        at = np.arange(max(first, o + 2 * half), last + 1)  # both halves after the onset
        if not len(at):
            return blown
        lo = at[0] - 2 * half + 1
        medians = bn.move_median(v[lo : last + 1], half)  # medians[k]: v[lo + k - half + 1 : lo + k + 1]
        later, earlier = medians[at - lo], medians[at - lo - half]
        remaining = later - spike.band
        progress = earlier - later
        noise = 3 * spike.sigma * np.sqrt(np.pi / half)  # 3 sd of the difference of two medians of `half` points
        left = np.maximum(spike.slow - (s[at] - spike.onset_step), half * spike.interval)
        rising = (remaining > 0) & (progress < -noise)
        settled = (remaining > 0) & (progress + noise < remaining * (half * spike.interval) / left)
        hits = np.flatnonzero(rising | settled)
        if not len(hits) or 0 <= blown[1] <= at[hits[0]]:
            return blown
        k = int(hits[0])
        why = "still rising" if rising[k] else f"settled at {later[k]:.4g}, above the {spike.band:.4g} it left"
        return why, int(at[k]), float(later[k])

    def _far(self, spike: Followed) -> float:
        """`far_rise` over the spike's level: critical while pending, blown up, no new level."""
        return spike.level + self.config.far_rise * abs(spike.level)

    def _blown_up(self, spike: Followed, w: _Window, first: int, last: int) -> tuple[str, int, float]:
        """Blown up, at the first new point where it shows, or "": the median of every
        `settle_points` points in a row since its onset still `far_rise` (2x) over the level,
        past the fast horizon and before the `settle` points the calls above compare are
        known.  Those compare medians of half the `settle_steps` (300) steps, so a loss 300x
        up for the last 160 steps of its run (`charlm_lr_ramp_f`, bench/labels trained,
        retired), or 54x and then 1.8x for 310 steps logged every 10
        (`charlm_lr_ramp_interval_m`), was left pending.  Every median since the onset: a
        +24% step of a climbing loss blown up 280 steps later (`charlm_lr_ramp_clip_g`) was
        not blown up itself, and the blow-up is a spike of its own.  A live call, taken back
        as the others are if the loss comes back within the watch horizon.  Medians of the
        points the fast horizon spans where those are fewer (at least `confirm_points`): on a
        log every 20 steps the 10 points it took were 200 steps, and `charlm_lr_ramp_interval_n`'s
        blow-up, 92-400x for the last 7 points of its run, was left pending."""
        c = self.config
        n = min(c.settle_points, max(c.confirm_points, spike.fast // spike.interval))
        o = w.at(spike.onset)
        a, b = o + n - 1, min(last, o + spike.settle)
        if b < max(a, first):
            return "", -1, math.nan
        medians = bn.move_median(w.value[o : b + 1], n)[n - 1 :]  # at positions a..b
        up = np.logical_and.accumulate(medians >= self._far(spike))
        at = np.arange(a, b + 1)
        hits = np.flatnonzero(up & (at >= first) & (w.step[at] - spike.onset_step >= spike.fast))
        if not len(hits):
            return "", -1, math.nan
        k = int(hits[0])
        why = f"blown up, its last {n} points at {medians[k]:.4g}, over {1 + c.far_rise:g}x the {spike.level:.4g} it left"
        return why, int(at[k]), float(medians[k])

    # -- findings ------------------------------------------------------------------------

    def _finding(self, tag: str, spike: Followed, w: _Window) -> Finding:
        """The finding of a spike, final or as it stands at the last point."""
        if spike.end is None:  # open: up to the last point
            last = len(w.value)
            area, k, top = _excess(spike, w, w.at(spike.summed), last)
            spike = _evolve(spike, area=area, end_step=None)
            if top > spike.peak_value:
                spike = _evolve(spike, peak=w.first + k, peak_step=int(w.step[k]), peak_value=top)
            end = w.first + last - 1
        else:
            end = spike.end
        if spike.recovered:
            recovery: int | None = int(spike.end_step or 0) - spike.onset_step
            kind = SpikeClass.FAST_RECOVERING if (recovery or 0) <= spike.fast else SpikeClass.SLOW_RECOVERING
            why = ""
        else:
            recovery = None
            past = spike.seen_step - spike.onset_step > spike.slow
            why = spike.why or (f"not back within {spike.slow} steps" if past else "")
            kind = SpikeClass.DIVERGENT if why else SpikeClass.PENDING
        severity = _SEVERITY[kind]
        if kind is SpikeClass.PENDING:
            severity = Severity.CRITICAL if spike.critical else severity if spike.alerted else Severity.INFO
        ratio = spike.peak_value / spike.level if spike.level > 0 else None
        return Finding(
            kind=Kind.LOSS_SPIKE,
            tag=tag,
            severity=severity,
            start_step=spike.rise_step,
            peak_step=spike.peak_step,
            end_step=spike.end_step if spike.recovered else None,
            recovery_steps=recovery,
            peak_value=spike.peak_value,
            baseline=spike.level,
            ratio=ratio,
            classification=kind,
            ongoing=not spike.recovered,
            message=_message(tag, spike, kind, ratio, recovery, why),
            remediation=_remediation(kind, spike.rise_step),
            evidence={
                "sigma": spike.sigma,
                "z": spike.z,
                "threshold": spike.threshold,
                "excess_area": spike.area,
                "points": int(end - spike.onset + 1),
                "rise": "instant" if spike.peak - spike.onset <= 2 else "gradual",
                "interval": spike.interval,
                "fast_steps": spike.fast,
                "slow_steps": spike.slow,
                **({"outcome": why} if why else {}),
            },
        )


def _evolve(spike: Followed, **changes: Any) -> Followed:
    """`dataclasses.replace` without re-running the dataclass `__init__`, which was most of
    the cost of following a spike through a feed."""
    new = object.__new__(Followed)
    new.__dict__.update(spike.__dict__, **changes)
    return new


def _change_spread(values: np.ndarray, quantum: float) -> float:
    """The robust spread of a noise that moves `values` from point to point: 1.4826 x the
    median absolute deviation of their differences from the median difference, over
    sqrt(2) (a difference holds two points' noise), never below the quantum."""
    steps = np.diff(values)
    spread = MAD_TO_SIGMA * float(np.median(np.abs(steps - np.median(steps)))) / math.sqrt(2)
    return max(spread, quantum)


def _percentile(rows: np.ndarray, q: float, cap: float) -> np.ndarray:
    """The q-quantile of each row's values (NaN: absent), each first lowered to at most
    `cap` x the row's median, interpolated as np.percentile does; -inf for a row with none."""
    ordered = np.sort(rows, axis=1)  # NaN last
    count = np.sum(~np.isnan(rows), axis=1)
    row = np.arange(len(rows))
    last = np.maximum(count - 1, 0)
    half = last // 2
    middle = np.where(count % 2 == 1, ordered[row, half], (ordered[row, half] + ordered[row, np.minimum(half + 1, last)]) / 2)
    ordered = np.minimum(ordered, cap * middle[:, None])  # NaN stays NaN, and last
    at = q * last
    lo = np.floor(at).astype(np.int64)
    hi = np.minimum(lo + 1, last)
    below, above = ordered[row, lo], ordered[row, hi]
    return np.where(count > 0, below + (above - below) * (at - lo), -np.inf)


def _lowest_since(values: np.ndarray, p: np.ndarray, points: int) -> np.ndarray:
    """The lowest of each point at `p` and the `points` before it (as many as there are)."""
    return values[np.maximum(p[:, None] - np.arange(points + 1), 0)].min(axis=1)


def _after_level(spike: Followed) -> int:
    """Just after where a spike gave the loss a new level (_NEVER if it gave none): from there
    a live run took onsets already, so one that came back later still resumes there, however
    the series was cut (a feed that saw the new level and the return at once took its end)."""
    return _NEVER if spike.new_level is None else spike.new_level + 1


def _sudden(value: np.ndarray, level: np.ndarray, lowest: np.ndarray, quantum: np.ndarray, quanta: float) -> np.ndarray:
    """Above the level by more than `quanta` representable steps, at least half of it gained
    over `lowest` (the lowest point of the last few)."""
    excess = value - level
    return (value - lowest >= 0.5 * excess) & (excess > quanta * quantum)


def _move_median(a: np.ndarray, window: int) -> np.ndarray:
    """Median of each point and the `window - 1` before it (NaN before `window` points).
    Three finite points (the default `confirm_points`; a feed's points are finite) take
    a min/max network: the same middle value, at a third of the cost of the heap."""
    if len(a) < window:
        return np.full(len(a), np.nan)
    if window != 3:
        return bn.move_median(a, window)
    x, y, z = a[:-2], a[1:-1], a[2:]
    out = np.empty(len(a))
    out[:2] = np.nan
    low = np.minimum(x, y)
    np.maximum(x, y, out=out[2:])
    np.minimum(out[2:], z, out=out[2:])
    np.maximum(out[2:], low, out=out[2:])  # max(min(x, y), min(max(x, y), z))
    return out


def _turned_up(base: Baseline, at: np.ndarray) -> np.ndarray:
    """Which points at `at` the one-point rule measured down a falling curve although the
    curve had turned to climb before them (`Baseline.turned_up`)."""
    falling = base.following[at] < base.level[at]
    out = np.zeros(len(at), bool)
    if falling.any():
        out[falling] = base.turned_up(at[falling])
    return out


def _point_z(value: np.ndarray, base: Baseline, local_margin: float) -> np.ndarray:
    """Each point's height over the level in sigmas, for the one-point rule.  Down a falling
    curve it stands over the following level, in a sigma at most `local_margin` x the
    spread of second differences: a steep early fall lifts the trailing level and widens
    the spread around its lag, so a +25% jump there stood under 1 sigma (module docstring).
    Elsewhere the level and sigma are the baseline's own, the point measured over the level
    plus the lag a climb typically shows over it (the center, where above zero): a convex
    climb without noise stood that lag over a sigma of float64 rounding, an info spike at
    every third point of an exponential."""
    falling = base.following < base.level
    if not falling.any():  # no copies on a curve that never falls (an eval loss climbing)
        return _rising_z(value, base, slice(None))
    lag = np.fmax(base.center, 0)
    sigma = np.where(falling, np.fmin(base.sigma, local_margin * base.local_sigma), base.sigma)
    sigma[np.isnan(base.sigma)] = np.nan  # nothing is measured before the baseline's sigma is
    return (value - np.where(falling, base.following, base.level + lag)) / sigma


def _rising_z(value: np.ndarray, base: Baseline, at: np.ndarray | slice) -> np.ndarray:
    """The height in sigmas of `value` (the points at `at`) over the level plus the lag a
    convex climb typically shows over it (the center, where above zero): the one-point
    rule's measure off a falling curve."""
    return (value - base.level[at] - np.fmax(base.center[at], 0)) / base.sigma[at]


def _lagged_z(value: np.ndarray, level: np.ndarray, sigma: np.ndarray, lag: int) -> np.ndarray:
    """(value[k] - level[k - lag]) / sigma[k - lag] at k (NaN before)."""
    out = np.full(len(value), np.nan)
    if lag < len(value):
        np.subtract(value[lag:], level[: len(value) - lag], out=out[lag:])
        out[lag:] /= sigma[: len(value) - lag]
    return out


def _excess(spike: Followed, w: _Window, a: int, upto: int) -> tuple[float, int, float]:
    """The area with the points at positions [a, upto) added (each point's excess over the
    level times the steps since the point before, summed in order, so that the same sum
    comes out however the points were fed), and the highest of them (position, value)."""
    if upto <= a:
        return spike.area, 0, -np.inf
    s, v = w.step, w.value
    part = v[a:upto]
    since = np.diff(s[a - 1 : upto]) if a > 0 else np.concatenate([[spike.interval], np.diff(s[a:upto])])
    excess = np.clip(part - spike.level, 0, None) * since
    area = float(np.add.accumulate(np.concatenate([[spike.area], excess]))[-1])
    k = int(np.argmax(part))
    return area, a + k, float(part[k])


def _message(tag: str, spike: Followed, kind: SpikeClass, ratio: float | None, recovery: int | None, why: str) -> str:
    level, peak = spike.level, spike.peak_value
    size = f"{ratio:.2g}x baseline" if ratio is not None else f"{peak - level:+.3g} over baseline"
    rising = f" (rising from step {spike.rise_step})" if spike.rise_step != spike.onset_step else ""
    head = f"{tag} spiked at step {spike.onset_step}{rising}: {level:.4g} -> {peak:.4g} ({size})"
    if kind is SpikeClass.FAST_RECOVERING:
        return f"{head}, back in {recovery} steps (fast-recovering)"
    if kind is SpikeClass.SLOW_RECOVERING:
        return f"{head}, back only after {recovery} steps (slow-recovering)"
    if kind is SpikeClass.DIVERGENT:
        return f"{head} and did not recover: {why} (divergent)"
    return f"{head}; not back yet (pending)"


def _remediation(kind: SpikeClass, onset: int) -> str:
    before = max(0, onset - 100)
    if kind is SpikeClass.FAST_RECOVERING:
        return (
            f"No action needed: training recovered. Note step {onset} and inspect the batches "
            "just before it if spikes recur."
        )
    if kind is SpikeClass.SLOW_RECOVERING:
        return (
            f"Keep a checkpoint from before step {onset} (step {before} or earlier) and watch the "
            "rolling mean; if spikes recur, lower the learning rate by 25%, then 50%."
        )
    if kind is SpikeClass.DIVERGENT:
        return (
            f"Roll back to a checkpoint from before the onset (PaLM went ~100 steps back: step "
            f"{before} or earlier), skip the next 200-500 batches, or lower the learning rate "
            "(OPT: -10%, then to 2/3). Rolling back too little is a common second failure."
        )
    return f"Keep the checkpoint from before step {onset} (step {before} or earlier) until the loss is back."

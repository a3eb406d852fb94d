"""The run-level streaming analysis (analyzers/runstream.py): any split of a run into
appends, one-point appends and rollbacks included, gives the findings and the health of a
one-shot analysis of the whole run, and the state it keeps stays bounded."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from analyzers.analyze import analyze_run
from analyzers.findings import SpikeClass
from analyzers.health import run_health as batch_health
from analyzers.runstream import NeedsReplay, RunState, dumps, feed_run, loads, run_health, start_run
from analyzers.series import Resume, TagWrites, prepare_run
from app.analysis import tag_writes
from app.ingest.sources import read_path
from tests.conftest import REPO
from tests.curves import clean_curve, labelled_corpus, plant_spike, plant_stalled_lr, resumed_mid_epoch, running_mean_curve

SAMPLES = {
    name: (tag_writes(run), tuple(Resume(r.from_step, r.to_step, r.segment, r.wall_time, r.tags) for r in run.rollbacks))
    for name, run in read_path(str(REPO / "sample_runs")).runs.items()
}
CORPUS = labelled_corpus(0)[::5]


def _norm(findings) -> list[tuple]:
    return sorted((f.start_step, f.kind.value, f.tag, f.message, f.remediation, f.severity, f.end_step, f.ongoing,
                   f.classification, repr(sorted(f.evidence.items()))) for f in findings)


def stream(writes: dict[str, TagWrites], resumes: tuple[Resume, ...], cuts: list[float], tail: int = 4096):
    """Feed a run cut at `cuts` (shares of each tag's writes), the state through its stored
    form between feeds; a feed that rewrites steps already analysed starts again from the
    newest earlier state that had not reached them, as the store does.  Returns the last
    state, every finding returned (the final ones once, the open ones of the last feed) and
    the open ones."""
    state, saved, shown, open_ = start_run(), [(start_run(), {})], {}, []
    done = dict.fromkeys(writes, 0)
    for share in [*cuts, 1.0]:
        upto = {t: int(round(share * len(w.step))) for t, w in writes.items()}
        new = {t: _part(w, done[t], upto[t]) for t, w in writes.items() if upto[t] > done[t]}
        segment = max((int(w.segment[: upto[t]].max()) for t, w in writes.items() if upto[t]), default=0)
        known = tuple(r for r in resumes if r.segment <= segment)
        try:
            state, closed, open_ = feed_run(state, new, known, tail_points=tail)
        except NeedsReplay as e:
            state, closed, open_, shown = _replay(writes, upto, known, saved, e.rewrites, tail)
        state = loads(dumps(state))
        shown.update({(f.tag, f.kind.value, f.start_step): f for f in closed})
        saved.append((state, dict(shown)))
        done = upto
    return state, list(shown.values()) + open_, open_


def _replay(writes, upto, known, saved, rewrites: dict[str, int], tail: int):
    """Feed the writes up to `upto` again from the newest saved state that had not reached
    the rewritten steps (a feed from it may call for an older one); the findings returned
    since that state are returned again."""
    while True:
        base, shown = next((s, dict(seen)) for s, seen in reversed(saved)
                           if all(t not in s.tags or s.tags[t].fed < at for t, at in rewrites.items()))
        fed = base.fed()
        again = {t: _after(w, upto[t], fed.get(t, -1)) for t, w in writes.items()}
        try:
            return *feed_run(base, {t: w for t, w in again.items() if len(w.step)}, known, tail_points=tail), shown
        except NeedsReplay as e:
            for tag, at in e.rewrites.items():
                rewrites[tag] = min(rewrites.get(tag, at), at)


def _part(w: TagWrites, a: int, b: int) -> TagWrites:
    return TagWrites(w.step[a:b], w.value[a:b], w.segment[a:b])


def _after(w: TagWrites, upto: int, fed: int) -> TagWrites:
    keep = w.step[:upto] > fed
    return TagWrites(w.step[:upto][keep], w.value[:upto][keep], w.segment[:upto][keep])


def _one_shot(writes, resumes, name="", tail=4096):
    state, found, open_ = stream(writes, resumes, [], tail)
    return _norm(found), run_health(state, open_).to_dict()


def _batch(writes, resumes, name=""):
    prepared = prepare_run(writes, resumes, None, name)
    findings = analyze_run(prepared)
    return _norm(findings), batch_health(prepared, findings).to_dict()


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_one_shot_stream_is_the_batch_analysis_of_each_sample_run(name):
    writes, resumes = SAMPLES[name]
    assert _one_shot(writes, resumes, name) == _batch(writes, resumes, name)


cuts = st.lists(st.floats(0.001, 0.999), min_size=1, max_size=12).map(sorted)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(SAMPLES)), cuts)
def test_any_split_of_a_sample_run_finds_what_one_shot_finds(name, shares):
    writes, resumes = SAMPLES[name]
    state, found, open_ = stream(writes, resumes, shares)
    assert (_norm(found), run_health(state, open_).to_dict()) == _batch(writes, resumes, name)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(CORPUS) - 1), cuts)
def test_any_split_of_a_generated_curve_finds_what_one_shot_finds(i, shares):
    curve = CORPUS[i]
    writes = curve.writes()
    state, found, open_ = stream(writes, curve.resumes, shares)
    assert (_norm(found), run_health(state, open_).to_dict()) == _batch(writes, curve.resumes)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(CORPUS) - 1), cuts)
# a grad-norm explosion at 2297 leads a loss spike at 2298 that never recovers: once the
# tails left the explosion behind, it was dropped in the feed where something next became
# final, so a cut decided whether the open spike's evidence still named it
@example(37, [0.63671875])
def test_a_short_tail_settles_findings_the_same_in_any_split(i, shares):
    """With a tail of 256 points, findings become final (and anchors carry the onsets)
    many times over a run: still the same in any split."""
    curve = CORPUS[i]
    writes = curve.writes()
    state, found, open_ = stream(writes, curve.resumes, shares, tail=256)
    one_state, one_found, one_open = stream(writes, curve.resumes, [], tail=256)
    assert _norm(found) == _norm(one_found)
    assert run_health(state, open_).to_dict() == run_health(one_state, one_open).to_dict()


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(CORPUS) - 1))
def test_a_first_feed_finds_what_appends_of_one_window_find(i):
    """A big feed hands each detector whole quiet stretches at once and goes window by
    window only around findings: it finds what appends of at most one window each (a tail
    of 256 points: windows of 64) find, which feed every detector window by window."""
    curve = CORPUS[i]
    writes = curve.writes()
    n = max(len(w.step) for w in writes.values())
    shares = [k / n for k in range(64, n, 64)]
    state, found, open_ = stream(writes, curve.resumes, shares, tail=256)
    one_state, one_found, one_open = stream(writes, curve.resumes, [], tail=256)
    assert _norm(one_found) == _norm(found)
    assert run_health(one_state, one_open).to_dict() == run_health(state, open_).to_dict()


RUNNING_MEANS = [running_mean_curve(11, 200, spike_at=1500)[0], running_mean_curve(12, 250, every=5)[0],
                 running_mean_curve(13, 150, points=2000, epoch_after=(1200, 250))[0]]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(RUNNING_MEANS) - 1), cuts)
def test_any_split_of_a_loss_logged_as_running_means_finds_what_one_shot_finds(i, shares):
    """The feed that learns the epochs, or gives them up, has the run fed again from a
    state before the steps it changes: it ends where one shot ends."""
    curve = RUNNING_MEANS[i]
    writes = curve.writes()
    state, found, open_ = stream(writes, (), shares)
    assert (_norm(found), run_health(state, open_).to_dict()) == _batch(writes, ())


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cuts)
def test_any_split_of_running_means_resumed_mid_epoch_finds_what_one_shot_finds(shares):
    writes, resumes, _ = resumed_mid_epoch(4)
    state, found, open_ = stream(writes, resumes, shares)
    assert (_norm(found), run_health(state, open_).to_dict()) == _batch(writes, resumes)


def test_one_point_appends_find_what_one_shot_finds():
    curve = clean_curve(7, points=1200)
    plant_spike(curve, 1100, SpikeClass.FAST_RECOVERING, np.random.default_rng(7))
    writes = curve.writes()
    n = len(curve.steps)
    shares = [k / n for k in range(1000, n)]  # the last 200 points one at a time
    state, found, open_ = stream(writes, (), shares)
    assert (_norm(found), run_health(state, open_).to_dict()) == _batch(writes, ())


def test_a_zero_lr_found_after_the_tail_moved_on_is_judged_on_the_loss_it_began_with():
    """The plateau's "level then" is the loss at the LR's fall, kept as an anchor: with a
    tail of 512 points the cause is only confirmed 1000 steps later."""
    curve = clean_curve(3, points=3000)
    plant_stalled_lr(curve, 1200)
    writes = curve.writes()
    found = _norm(stream(writes, (), [0.3, 0.5, 0.8], tail=512)[1])
    plateau = [f for f in found if f[1] == "plateau"]
    assert plateau and plateau == [f for f in _batch(writes, ())[0] if f[1] == "plateau"]


def test_a_rollback_replays_from_a_saved_state_not_from_zero():
    writes, resumes = SAMPLES["resume"]
    [resume] = resumes
    split = {t: int(np.searchsorted(w.segment, resume.segment)) for t, w in writes.items()}
    state, _, _ = feed_run(start_run(), {t: _part(w, 0, split[t]) for t, w in writes.items()}, ())
    with pytest.raises(NeedsReplay) as caught:
        feed_run(state, {t: _part(w, split[t], len(w.step)) for t, w in writes.items()}, resumes)
    assert set(caught.value.rewrites.values()) == {resume.to_step}
    # fed again from a state saved before the resume's step, the run reads as one-shot
    found = stream(writes, resumes, [0.3, 0.6, 0.9])[1]
    assert _norm(found) == _batch(writes, resumes, "resume")[0]


def test_state_stays_bounded_as_the_run_grows():
    curve = clean_curve(11, points=40000)
    writes = curve.writes()
    sizes = []
    state: RunState = start_run()
    for a in range(0, 40000, 10000):
        state, _, _ = feed_run(state, {t: _part(w, a, a + 10000) for t, w in writes.items()})
        sizes.append(len(dumps(state)))
    assert max(sizes[1:]) < 1.2 * min(sizes[1:]), sizes


def _bumped_with_evals(seed: int):
    """A healthy run whose train loss is bumped 8% three times (decaying over 200 steps),
    with an eval loss every 20 steps that follows it: each bump is an eval rise whose
    train loss rose with it (a divergence, over)."""
    curve = clean_curve(seed, points=6000, noise=0.01)
    steps, loss = curve.steps, curve.tags["train/loss"]
    for at in (1500, 3000, 4500):
        bump = (steps >= at) & (steps < at + 600)
        loss[bump] *= 1 + 0.08 * np.exp(-(steps[bump] - at) / 200)
    at = np.arange(19, 6000, 20)
    recent = np.array([loss[max(0, k - 24) : k + 1].mean() for k in at])
    curve.evals["eval/loss"] = (steps[at], 1.05 * recent * (1 + 0.003 * np.random.default_rng(seed).standard_normal(len(at))))
    return curve


@pytest.mark.parametrize("seed", [2, 8])
def test_an_eval_rise_judged_again_after_the_tail_left_its_highest_point_keeps_its_verdict(seed):
    """`judge` reads the train loss at a rise's highest evaluation each time it is judged
    again; once the 4,096-point tail had moved past that point it read the level at the
    best instead, and the same rise came out a second time, as overfitting ("train/loss
    stayed flat"), beside its divergence."""
    writes = _bumped_with_evals(seed).writes()
    state, found, open_ = stream(writes, (), [0.5])
    assert (_norm(found), run_health(state, open_).to_dict()) == _batch(writes, ())


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cuts)
def test_an_early_eval_spike_is_found_in_any_split(shares):
    """A young eval loss's jump (the early rule of analyzers/spikes.py), fed with its train
    loss in any split, is found as one shot finds it."""
    steps = np.arange(1, 2001, dtype=np.int64)
    train = 1.3 + 1.3 * np.exp(-steps / 450) * (1 + 0.02 * np.random.default_rng(3).standard_normal(2000))
    evals = steps[99::100]
    value = 1.3 + 1.3 * np.exp(-np.arange(20) / 4.5)
    value[13:16] *= [1.14, 1.08, 1.02]
    zero = np.zeros(2000, np.int32)
    writes = {"train/loss": TagWrites(steps, train, zero), "eval/loss": TagWrites(evals, value, zero[:20])}
    batch = _batch(writes, ())
    assert [f[:3] for f in batch[0] if f[1] == "loss_spike"] == [(1400, "loss_spike", "eval/loss")]
    state, found, open_ = stream(writes, (), shares)
    assert (_norm(found), run_health(state, open_).to_dict()) == batch


def test_a_grad_norm_rise_the_loss_never_felt_is_a_warning_first_then_info_in_any_split():
    """Live, an explosion is a warning from its second point; once the loss has gone on for
    8 points with nothing starting on it, the same alert is info, as one pass tells it."""
    curve = clean_curve(7, points=3000, noise=0.01)
    curve.tags["train/grad_norm"][-100:] *= 15
    writes = curve.writes()
    early = {t: TagWrites(w.step[:2904], w.value[:2904], w.segment[:2904]) for t, w in writes.items()}
    _, _, open_ = stream(early, (), [0.9])
    assert [(f.start_step, str(f.severity)) for f in open_ if f.kind.value == "grad_norm_explosion"] == [(2900, "warning")]
    for cuts in ([0.967], [0.9668, 0.967, 0.9672, 0.99]):
        state, found, open_ = stream(writes, (), cuts)
        assert (_norm(found), run_health(state, open_).to_dict()) == _batch(writes, ())
    assert [str(f.severity) for f in open_ if f.kind.value == "grad_norm_explosion"] == ["info"]


@pytest.mark.parametrize("shares", [[], [0.5], [0.66, 0.7, 0.9], [0.8, 0.95]])
def test_a_slow_spike_forgotten_before_the_rise_it_made_ends_still_explains_it(shares):
    """An LR burst's spike back only after 430 steps, whose way back the trend's blocks take
    for a rise (charlm_lr_burst_b): with a tail of 256 points the spike is dropped from the
    kept findings long before the rise ends, and where the loss came back is what is left
    of it to explain the rise by (state format 15)."""
    steps = np.arange(3000)
    loss = (1.1 + 2 * np.exp(-steps / 400)) * (1 + 0.02 * np.random.default_rng(0).standard_normal(3000))
    loss[1300:] *= 1 + 0.5 * np.exp(-np.arange(1700) / 350)
    writes = {"train/loss": TagWrites(steps, loss, np.zeros(3000, np.int32))}
    state, found, _ = stream(writes, (), shares, tail=256)
    assert [(f.kind.value, f.start_step, f.classification) for f in found] == [("loss_spike", 1300, SpikeClass.SLOW_RECOVERING)]
    assert state.past_spikes["train/loss"] == [(1300, False, found[0].end_step)]


@pytest.mark.parametrize("shares", [[], [0.62], [0.6, 0.61, 0.8]])
@pytest.mark.parametrize(("name", "spike"), [
    ("charlm_lr_burst_m", SpikeClass.DIVERGENT),  # 1.465 at its best, 3.038 at the evaluation after
    ("charlm_lr_burst_o", SpikeClass.SLOW_RECOVERING),  # 1.453 at its best, 1.479 (+1.8%), then 2.352
])
def test_an_eval_loss_that_jumped_after_its_best_is_told_once_in_any_split(name, spike, shares):
    """charlm_lr_burst_m and charlm_lr_burst_o (bench/labels trained, retired): an LR burst
    lifted the eval loss 59-107% at the first or second evaluation after its best, the one
    between within its margin, and it never came all the way back.  Its spike tells it; the
    rise past the best it made is not told again as a divergence (analyzers/incidents.py
    `spike_tells_eval_rise`), in one pass or fed in pieces."""
    [run] = read_path(str(REPO / "bench" / "trained" / "runs" / name)).runs.values()
    writes = tag_writes(run)
    batch = _batch(writes, ())
    assert [(f[0], f[1], f[8]) for f in batch[0] if f[2] == "eval/loss"] == [(1249, "loss_spike", spike)]
    state, found, open_ = stream(writes, (), shares)
    assert (_norm(found), run_health(state, open_).to_dict()) == batch

"""The trend detectors fed in pieces say exactly what they say fed at once: for any split of
a series into appends (random sizes, one-point appends), with the state passed through JSON
between them, every closed finding plus the last open ones equal `detect` on the whole
series; and the state stays the same size however long the run."""

from __future__ import annotations

import json
from functools import cache

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzers.overfitting import EvalRiseDetector, OverfittingConfig
from analyzers.plateau import InitialLevelDetector, ZeroLRDetector
from analyzers.roles import Role
from analyzers.series import Series, TagWrites, prepare_run
from analyzers.stream import feed_in_pieces
from analyzers.trend import DivergenceDetector
from app.analysis import tag_writes
from app.ingest.sources import read_path
from tests.conftest import REPO
from tests.curves import chance_curve, clean_curve, epoch_curve, eval_corpus, labelled_corpus


@cache
def series_by_role() -> dict[Role, list[Series]]:
    """Series of every role the trend detectors read: generated curves whose truth is known
    (divergent, rising, stalled, at chance, overfitting, clean) and the sample runs."""
    curves = [c for c in labelled_corpus() if c.name.startswith(("rising", "divergent", "nan"))][::4]
    curves += eval_corpus()[::3] + [chance_curve(3, 4), epoch_curve(5, 20, overfit_at=6), clean_curve(9, points=3000)]
    runs = [prepare_run(c.writes()) for c in curves] + [prepare_run(closing())]
    samples = read_path(str(REPO / "sample_runs")).runs
    samples.update(read_path(str(REPO / "sample_runs" / "hf_trainer" / "trainer_state.json")).runs)
    runs += [prepare_run(tag_writes(r), (), None, name) for name, r in sorted(samples.items())]
    out: dict[Role, list[Series]] = {}
    for run in runs:
        for s in run.series.values():
            out.setdefault(s.role, []).append(s)
    return out


def closing() -> dict[str, TagWrites]:
    """Incidents that close: a rise that comes back, a loss flat then learning, an LR at 0
    for a while, an eval loss rising and coming back."""
    n, rng = 8000, np.random.default_rng(7)
    step = np.arange(n, dtype=np.int64)
    loss = (1.8 + 4 * np.exp(-step / 600)) * (1 + 0.02 * rng.standard_normal(n))
    loss *= 1 + 0.5 * np.clip(1 - np.abs(step - 3600) / 600, 0, None)
    flat = np.where(step < 5000, 2.9, 2.9 * np.exp(-(step - 5000) / 1000)) * (1 + 0.01 * rng.standard_normal(n))
    lr = np.where((step >= 2000) & (step < 4000), 0.0, 1e-3)
    evals = np.arange(99, n, 100)
    val = 2 - 0.2 * evals / n
    val[30:40] *= 1 + 0.04 * np.arange(1, 11)
    zero = np.zeros(n, np.int32)
    return {"train/loss": TagWrites(step, loss, zero), "aux/loss": TagWrites(step, flat, zero),
            "train/lr": TagWrites(step, lr, zero), "val/loss": TagWrites(evals, val, np.zeros(len(evals), np.int32))}


@st.composite
def splits(draw, role: Role):
    """A series of `role` and where to cut it: random cuts, plus a stretch fed one point at
    a time."""
    series = draw(st.sampled_from(series_by_role()[role]))
    n = len(series)
    cuts = draw(st.lists(st.integers(1, max(1, n - 1)), max_size=40))
    if n > 2 and draw(st.booleans()):
        a = draw(st.integers(0, n - 2))
        cuts += list(range(a, min(n, a + draw(st.integers(1, 300)))))
    return series, cuts


def same_in_pieces(detector, series: Series, cuts: list[int]) -> None:
    whole = detector.detect(series)
    assert feed_in_pieces(detector, series.step, series.value, cuts, series.tag) == whole


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(splits(Role.LOSS))
def test_divergence_in_pieces(case):
    same_in_pieces(DivergenceDetector(), *case)


@SETTINGS
@given(splits(Role.LOSS))
def test_initial_level_in_pieces(case):
    same_in_pieces(InitialLevelDetector(), *case)


@SETTINGS
@given(splits(Role.EVAL_LOSS))
def test_eval_initial_level_in_pieces(case):
    same_in_pieces(InitialLevelDetector(evaluations=True), *case)


@SETTINGS
@given(splits(Role.EVAL_LOSS))
def test_eval_rise_in_pieces(case):
    same_in_pieces(EvalRiseDetector(), *case)


@SETTINGS
@given(splits(Role.EVAL_LOSS))
def test_eval_rise_with_a_growing_patience_in_pieces(case):
    """Past `dense_pool` evaluations patience grows with the count: with a small one, these
    short series take that path."""
    same_in_pieces(EvalRiseDetector(OverfittingConfig(dense_pool=4)), *case)


@SETTINGS
@given(splits(Role.LEARNING_RATE))
def test_zero_lr_in_pieces(case):
    same_in_pieces(ZeroLRDetector(), *case)


def test_the_corpus_has_what_the_properties_need():
    """The drawn series include ones where each detector finds something, open and closed,
    so the property compares findings, not only empty lists."""
    closed = {
        "divergence": DivergenceDetector(), "initial level": InitialLevelDetector(), "eval rise": EvalRiseDetector(),
        "zero lr": ZeroLRDetector(),
    }
    for name, detector in closed.items():
        role = {"eval rise": Role.EVAL_LOSS, "zero lr": Role.LEARNING_RATE}.get(name, Role.LOSS)
        assert any(not f.ongoing for s in series_by_role()[role] for f in detector.detect(s)), name
    found = {
        "divergence": any(DivergenceDetector().detect(s) for s in series_by_role()[Role.LOSS]),
        "initial level": any(InitialLevelDetector().detect(s) for s in series_by_role()[Role.LOSS]),
        "eval initial level": any(InitialLevelDetector(evaluations=True).detect(s) for s in series_by_role()[Role.EVAL_LOSS]),
        "eval rise": any(EvalRiseDetector().detect(s) for s in series_by_role()[Role.EVAL_LOSS]),
        "zero lr": any(ZeroLRDetector().detect(s) for s in series_by_role()[Role.LEARNING_RATE]),
    }
    assert all(found.values()), found


def test_states_stay_the_same_size_however_long_the_run():
    """O(window), never O(run): the JSON state after 5k and after 500k points is as large."""
    rng = np.random.default_rng(0)

    def size(detector, n: int) -> int:
        step = np.arange(n, dtype=np.int64)
        value = 2 + 0.02 * rng.standard_normal(n)
        state, _, _ = detector.feed(detector.start(), step, value, "x")
        return len(json.dumps(state.to_dict()))

    for detector in (DivergenceDetector(), InitialLevelDetector(), EvalRiseDetector(), ZeroLRDetector()):
        small, large = size(detector, 5_000), size(detector, 500_000)
        assert large <= small * 1.1 + 200, (type(detector).__name__, small, large)


def test_a_state_survives_json_as_the_store_keeps_it():
    s = next(s for s in series_by_role()[Role.EVAL_LOSS] if EvalRiseDetector().detect(s))
    detector = EvalRiseDetector()
    state, _, _ = detector.feed(detector.start(), s.step[:5], s.value[:5], s.tag)
    text = json.dumps(state.to_dict(), allow_nan=False)
    again = type(state).from_dict(json.loads(text))
    assert json.dumps(again.to_dict(), allow_nan=False) == text
    assert detector.feed(again, s.step[5:], s.value[5:], s.tag)[1:] == detector.feed(state, s.step[5:], s.value[5:], s.tag)[1:]


def test_a_divergence_that_closes_says_the_same_in_any_split():
    """A closed incident is built mid-feed: nothing in it may come from where the feed began."""
    n = 6000
    loss = (1.8 + 4 * np.exp(-np.arange(n) / 600)) * (1 + 0.02 * np.random.default_rng(0).standard_normal(n))
    loss *= 1 + 0.5 * np.clip(1 - np.abs(np.arange(n) - 3600) / 600, 0, None)
    series = prepare_run({"train/loss": TagWrites(
        np.arange(n, dtype=np.int64), loss, np.zeros(n, np.int32))}).series["train/loss"]
    [whole] = DivergenceDetector().detect(series)
    assert not whole.ongoing
    rng = np.random.default_rng(1)
    for _ in range(20):
        cuts = sorted(rng.integers(1, n, int(rng.integers(1, 60))).tolist())
        assert feed_in_pieces(DivergenceDetector(), series.step, series.value, cuts, series.tag) == [whole]

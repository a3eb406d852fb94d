"""No input crashes the analyzers: empty, one point, all NaN, constant, huge, negative,
unsorted, duplicated steps; and labelled curves keep their precision and recall."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from analyzers.analyze import analyze_run
from analyzers.findings import Kind, Severity
from analyzers.series import Resume, TagWrites, prepare_run
from tests.curves import labelled_corpus, score

TAGS = ["train/loss", "grad_norm", "lr", "loss_scale", "eval/loss", "accuracy"]
values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.sampled_from([0.0, -0.0, 1e308, -1e308, 5e-324, 1.0]),
)


@st.composite
def runs(draw):
    n = draw(st.integers(0, 300))
    steps = draw(arrays(np.int64, n, elements=st.integers(0, 10**6)))
    segment = np.sort(draw(arrays(np.int32, n, elements=st.integers(0, 3))))
    tags = draw(st.lists(st.sampled_from(TAGS), min_size=1, max_size=4, unique=True))
    writes = {tag: TagWrites(steps, draw(arrays(np.float64, n, elements=values)), segment) for tag in tags}
    resumes = tuple(Resume(10, 5, s) for s in range(1, int(segment.max(initial=0)) + 1))
    return prepare_run(writes, resumes)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_no_input_crashes_the_analyzers(run):
    for finding in analyze_run(run):
        assert isinstance(finding.message, str) and finding.message
        assert finding.remediation


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 400), st.floats(-1e6, 1e6, allow_nan=False))
def test_constant_series_raise_nothing(n, level):
    steps = np.arange(n, dtype=np.int64)
    run = prepare_run({"train/loss": TagWrites(steps, np.full(n, level), np.zeros(n, np.int32))})
    assert [f for f in analyze_run(run) if f.kind is not Kind.PLATEAU] == []


def test_shapes_that_hurt():
    cases = {
        "empty": np.array([]),
        "one point": np.array([2.0]),
        "all nan": np.full(100, np.nan),
        "huge": np.full(500, 1e300) * np.linspace(1, 1.5, 500),
        "negative": -np.linspace(5, 1, 500),
        "zeros": np.zeros(500),
    }
    for v in cases.values():
        steps = np.arange(len(v), dtype=np.int64)
        run = prepare_run({"train/loss": TagWrites(steps, v, np.zeros(len(v), np.int32))})
        analyze_run(run)  # must not raise
    unsorted = np.array([5, 3, 9, 1, 3, 3], np.int64)
    run = prepare_run({"train/loss": TagWrites(unsorted, np.arange(6.0), np.zeros(6, np.int32))})
    assert list(run.series["train/loss"].step) == [1, 3, 5, 9]
    assert list(run.series["train/loss"].value) == [3.0, 5.0, 0.0, 2.0]  # the later write of step 3 wins


def test_labelled_corpus_precision_recall_and_classification():
    scores, loud_clean = score(labelled_corpus())
    for kind in (Kind.LOSS_SPIKE, Kind.GRAD_NORM_EXPLOSION, Kind.NONFINITE):
        assert scores[kind].precision >= 0.95, scores[kind].false_alarms
        assert scores[kind].recall >= 0.95, scores[kind].misses
    assert scores[Kind.DIVERGENCE].recall >= 0.9, scores[Kind.DIVERGENCE].misses
    assert scores[Kind.LOSS_SPIKE].classification_accuracy >= 0.9, scores[Kind.LOSS_SPIKE].misses
    assert loud_clean == []


def test_clean_curves_raise_nothing_at_warning_or_above():
    from tests.curves import clean_curve

    for seed, shape in enumerate(
        [dict(), dict(noise=0.05), dict(bf16=True, noise=0.004), dict(interval=10), dict(schedule="step"), dict(schedule="constant")]
    ):
        loud = [f.message for f in clean_curve(100 + seed, **shape).findings() if f.severity >= Severity.WARNING]
        assert loud == [], shape

"""`analyzers.baseline.median` and `row_medians`: np.median's numbers, without the numpy.ma
import np.median pays on first use (a fresh process's first scan)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from analyzers.baseline import median, row_medians
from analyzers.findings import SpikeClass
from tests.conftest import REPO
from tests.curves import Curve, clean_curve, plant_overfitting, plant_spike, plant_stalled_lr, with_eval

floats = hnp.arrays(np.float64, st.integers(0, 40), elements=st.floats(allow_nan=True, allow_infinity=True))
ints = hnp.arrays(np.int64, st.integers(1, 40), elements=st.integers(-(2**40), 2**40))


@given(st.one_of(floats, ints))
def test_median_is_numpys(values):
    with np.errstate(all="ignore"):
        expected = np.median(values) if len(values) else np.float64(np.nan)
    got = median(values)
    assert type(got) is type(expected)
    assert (np.isnan(got) and np.isnan(expected)) or got == expected


@given(hnp.arrays(np.float64, st.tuples(st.integers(0, 6), st.integers(1, 17)), elements=st.floats(allow_nan=True, allow_infinity=True)))
def test_row_medians_are_numpys(rows):
    with np.errstate(all="ignore"):
        expected = np.median(rows, axis=1)
        got = row_medians(rows)
    assert got.shape == expected.shape
    assert np.array_equal(got, expected, equal_nan=True)


def test_a_streaming_analysis_with_findings_does_not_import_numpy_ma(tmp_path):
    curve = clean_curve(3, points=3000)
    plant_stalled_lr(curve, 1200)
    with_eval(curve, np.random.default_rng(3), every=50)
    plant_overfitting(curve, 40, 0.2, np.random.default_rng(3))
    assert _kinds_and_numpy_ma(curve, tmp_path) == "['overfitting', 'plateau'] False"


def test_a_streaming_analysis_of_a_jump_that_stays_does_not_import_numpy_ma(tmp_path):
    curve = clean_curve(5, points=3000)
    plant_spike(curve, 2000, SpikeClass.DIVERGENT, np.random.default_rng(5))
    assert _kinds_and_numpy_ma(curve, tmp_path) == "['loss_spike'] False"


def _kinds_and_numpy_ma(curve: Curve, tmp_path) -> str:
    """The kinds a streaming analysis of the curve finds, in a fresh process, and whether
    that process imported numpy.ma."""
    arrays = {f"{kind}:{tag}": getattr(w, kind) for tag, w in curve.writes().items() for kind in ("step", "value", "segment")}
    np.savez(tmp_path / "run.npz", **arrays)
    code = f"""
import sys
import numpy as np
from analyzers.runstream import feed_run, run_health, start_run
from analyzers.series import TagWrites
saved = np.load({str(tmp_path / "run.npz")!r})
tags = {{key.split(":", 1)[1] for key in saved.files}}
writes = {{tag: TagWrites(saved["step:" + tag], saved["value:" + tag], saved["segment:" + tag]) for tag in sorted(tags)}}
state, closed, still = feed_run(start_run(), writes)
run_health(state, still)
print(sorted({{f.kind.value for f in closed + still}}), "numpy.ma" in sys.modules)
"""
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()

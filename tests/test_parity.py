"""Parity with tensorboard's EventAccumulator (keep-all size guidance) on files nobody here
wrote and on files written by tensorboardX: the same points, bit for bit."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util
from tensorboardX import SummaryWriter

from app.ingest.logdir import find_runs, read_logdir

KEEP_ALL = {"scalars": 0, "tensors": 0, "histograms": 1, "images": 1, "audio": 1, "compressedHistograms": 1}


def accumulator_points(run_dir: str) -> list[tuple[str, int, float]]:
    """Every scalar EventAccumulator holds: simple_value scalars and scalar-plugin tensors."""
    acc = EventAccumulator(run_dir, size_guidance=KEEP_ALL)
    acc.Reload()
    rows = [(tag, e.step, e.value) for tag in acc.Tags()["scalars"] for e in acc.Scalars(tag)]
    for tag in acc.Tags()["tensors"]:
        if acc.SummaryMetadata(tag).plugin_data.plugin_name == "scalars":
            rows += [(tag, e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(tag)]
    return rows


def our_points(logdir: str, run: str) -> list[tuple[str, int, float]]:
    p = read_logdir(logdir).runs[run].points
    return [(p.tags[t], int(s), float(v)) for t, s, v in zip(p.tag, p.step, p.value)]


def same(a: list[tuple[str, int, float]], b: list[tuple[str, int, float]]) -> bool:
    key = lambda r: (r[0], r[1], np.float64(r[2]).tobytes())  # noqa: E731  NaN-safe, order-free
    return sorted(map(key, a)) == sorted(map(key, b))


def test_reference_runs_match_event_accumulator(reference_runs):
    runs, problems = find_runs(str(reference_runs))
    assert problems == []
    assert len(runs) >= 13
    for name in runs:
        ours = our_points(str(reference_runs), name)
        theirs = accumulator_points(str(reference_runs / name))
        assert ours, name
        assert same(ours, theirs), name


def test_tf2_keras_tensors_are_read(reference_runs):
    logdir = reference_runs / "TheCodeheadMT_TensorBoard-Tutorial/archive/logs/imdb-model-1690485351"
    p = read_logdir(str(logdir)).runs["train"].points
    loss = p.value[p.tag == p.tags.index("epoch_loss")]
    assert len(loss) == 20 and loss[0] > loss[-1]


def test_duplicate_steps_are_kept_as_a_second_segment(reference_runs):
    run = read_logdir(str(reference_runs / "janosh_tensorboard-reducer/tests/runs/duplicate_steps")).runs["run_1"]
    assert [(r.from_step, r.to_step) for r in run.rollbacks] == [(99, 90)]
    assert set(run.segment) == {0, 1}


def test_tensorboardx_file_matches_bit_for_bit(tmp_path):
    values = [2.0, float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1e-38, 3e-4]
    writer = SummaryWriter(str(tmp_path), filename_suffix=".tbx")
    for step in range(500):
        writer.add_scalar("train/loss", values[step % len(values)] if step < 16 else 1.0 / (step + 1), step)
        writer.add_scalar("train/lr", 3e-4 * min(1, step / 100), step)
    writer.close()
    ours = our_points(str(tmp_path), ".")
    assert len(ours) == 1000
    assert same(ours, accumulator_points(str(tmp_path)))
    nan_rows = [v for t, s, v in ours if t == "train/loss" and s == 1]
    assert math.isnan(nan_rows[0])


@pytest.mark.parametrize("case", ["tbx_simple", "torch_simple", "torch_new_style", "torch_double", "tf2_tensors"])
def test_real_writer_fixtures_match_event_accumulator(case):
    from tests.conftest import FIXTURES

    run_dir = FIXTURES / "events" / case
    if not run_dir.is_dir():
        pytest.fail(f"fixture {run_dir} missing: run tests/fixtures/make_event_fixtures.py")
    assert same(our_points(str(run_dir), "."), accumulator_points(str(run_dir)))

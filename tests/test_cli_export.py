"""`losswatch runs` and `losswatch export` as a user meets them: output, messages, exit codes."""

from __future__ import annotations

import io
import json
import math

import pandas as pd
import pytest
from click.testing import CliRunner

from app.cli import main
from app.export import read_scalars
from tests.eventfiles import file_version, loss_events, scalar_event, write_events


@pytest.fixture
def logdir(tmp_path):
    (tmp_path / "run_a").mkdir()
    write_events(tmp_path / "run_a" / "events.out.tfevents.1", [file_version(), *loss_events(range(3))])
    write_events(
        tmp_path / "run_a" / "events.out.tfevents.2",
        [scalar_event(1, "train/loss", float("nan")), scalar_event(2, "train/loss", float("inf"))],
    )
    return tmp_path


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_export_csv_has_every_point_with_its_segment(logdir):
    result = invoke("export", str(logdir))
    assert result.exit_code == 0
    frame = pd.read_csv(io.StringIO(result.stdout))
    assert list(frame.columns) == ["run", "tag", "step", "wall_time", "value", "segment"]
    assert frame.step.tolist() == [0, 1, 2, 1, 2]
    assert frame.segment.tolist() == [0, 0, 0, 1, 1]
    assert math.isnan(frame.value[3]) and frame.value[4] == math.inf


def test_export_current_view(logdir):
    result = invoke("export", str(logdir), "--current", "--format", "jsonl")
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["step"], r["value"], r["segment"]) for r in rows] == [(0, 1.0, 0), (1, "NaN", 1), (2, "Infinity", 1)]
    assert rows[0]["run"] == "run_a" and rows[0]["wall_time"] == 1.7e9


def test_export_parquet_round_trips(logdir, tmp_path):
    out = tmp_path / "points.parquet"
    assert invoke("export", str(logdir), "--format", "parquet", "-o", str(out)).exit_code == 0
    back = pd.read_parquet(out)
    assert back.step.tolist() == read_scalars(str(logdir)).step.tolist()


def test_bad_records_are_reported_on_stderr_and_the_rest_exported(logdir):
    path = logdir / "run_a" / "events.out.tfevents.1"
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF  # inside the last record's payload
    path.write_bytes(bytes(data))
    result = invoke("export", str(logdir))
    assert result.exit_code == 0
    assert len(pd.read_csv(io.StringIO(result.stdout))) == 4
    assert result.stderr.startswith(f"losswatch: {path}: byte ")
    assert "payload CRC mismatch" in result.stderr


def test_strict_fails_on_a_bad_record(logdir):
    path = logdir / "run_a" / "events.out.tfevents.2"
    path.write_bytes(path.read_bytes()[:-3] + b"\x00\x00\x00")
    result = invoke("export", str(logdir), "--strict")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "payload CRC mismatch" in result.stderr


def test_missing_path_is_exit_2_with_a_message(tmp_path):
    result = invoke("export", str(tmp_path / "nope"))
    assert result.exit_code == 2
    assert result.stderr == f"losswatch: {tmp_path / 'nope'}: no such file or directory\n"


def test_runs_lists_runs_and_series(logdir):
    result = invoke("runs", str(logdir))
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == f"{logdir} :: run_a  (5 points, 1 rollbacks)  [TensorBoard event files (2 files)]"
    assert lines[1].split() == ["train/loss", "5", "points", "steps", "0..2"]


def test_single_event_file_is_its_directorys_run(logdir):
    frame = read_scalars(str(logdir / "run_a" / "events.out.tfevents.1"))
    assert set(frame.run) == {"run_a"} and len(frame) == 3

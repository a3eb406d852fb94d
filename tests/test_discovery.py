"""Discovery by walking and loud failure, as a user meets them: every trainer's output folder
is found and named from its folder, a file taken for a log that cannot be read is named with
its reason, and a PATH with no run to read is exit 2 naming what was looked for."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from app.cli import main
from app.ingest.discover import LOOKED_FOR
from app.ingest.sources import read_path
from tests.eventfiles import file_version, loss_events, write_events


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def trainer_state(last_step: int) -> str:
    history = [{"step": s, "loss": 2.0 - s / 1000, "grad_norm": 0.5, "epoch": s / 100} for s in range(10, last_step + 1, 10)]
    return json.dumps({"global_step": last_step, "log_history": history})


@pytest.fixture
def output_dirs(tmp_path):
    """An HF output_dir with two checkpoints, a Lightning tree, an NDJSON log, an event run
    and files that are not logs."""
    hf = tmp_path / "hf_out"
    for step in (100, 200):
        (hf / f"checkpoint-{step}").mkdir(parents=True)
        (hf / f"checkpoint-{step}" / "trainer_state.json").write_text(trainer_state(step))
        (hf / f"checkpoint-{step}" / "config.json").write_text('{"hidden_size": 64, "model_type": "gpt2"}')
    (hf / "checkpoint-200" / "tokenizer.json").write_text('{"version": "1.0", "model": {"vocab": {}}}')
    (hf / "all_results.json").write_text('{"epoch": 3.0, "train_loss": 1.2, "eval_loss": 1.3}')  # a summary, not a curve
    version = tmp_path / "lightning_logs" / "version_0"
    version.mkdir(parents=True)
    (version / "metrics.csv").write_text("epoch,step,train_loss\n0,0,2.5\n0,1,2.4\n0,2,2.3\n")
    (version / "hparams.yaml").write_text("lr: 0.1\n")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "pretrain.jsonl").write_text("".join(json.dumps({"step": s, "loss": 3.0}) + "\n" for s in range(4)))
    (tmp_path / "tb" / "run1").mkdir(parents=True)
    write_events(tmp_path / "tb" / "run1" / "events.out.tfevents.1", [file_version(), *loss_events(range(5))])
    (tmp_path / "labels.json").write_text('{"about": "x", "events": [{"run": "a", "step": 3}]}')
    return tmp_path


def test_a_walk_finds_every_trainers_output_and_says_how(output_dirs):
    result = invoke("runs", str(output_dirs))
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    heads = [line for line in result.stdout.splitlines() if not line.startswith(" ")]
    assert heads == [
        f"{output_dirs} :: hf_out  (40 points, 0 rollbacks)  [Hugging Face trainer_state.json (1 file)]",
        f"{output_dirs} :: lightning_logs/version_0  (3 points, 0 rollbacks)  [metrics.csv (Lightning CSV logger) (1 file)]",
        f"{output_dirs} :: logs/pretrain  (4 points, 0 rollbacks)  [JSON/CSV loss log (1 file)]",
        f"{output_dirs} :: tb/run1  (5 points, 0 rollbacks)  [TensorBoard event files (1 file)]",
    ]


def test_only_the_newest_checkpoints_trainer_state_is_read(output_dirs):
    run = read_path(str(output_dirs / "hf_out")).runs["hf_out"]
    loss = run.points.step[run.points.tag == run.points.tags.index("loss")]
    assert loss.tolist() == list(range(10, 201, 10))  # each step once: checkpoint-100's copy is not read too


def test_the_output_dirs_own_trainer_state_wins_over_its_checkpoints(output_dirs):
    (output_dirs / "hf_out" / "trainer_state.json").write_text(trainer_state(300))
    run = read_path(str(output_dirs / "hf_out")).runs["hf_out"]
    assert run.points.step.max() == 300


def test_a_run_folder_passed_directly_is_named_after_it(output_dirs):
    assert list(read_path(str(output_dirs / "tb" / "run1")).runs) == ["run1"]
    assert list(read_path(str(output_dirs / "lightning_logs" / "version_0")).runs) == ["version_0"]


def test_a_file_that_looks_like_a_log_but_cannot_be_read_is_named_with_its_reason(tmp_path):
    (tmp_path / "results.csv").write_text("epoch,train_loss\n0,2.5\n")
    result = invoke("analyze", str(tmp_path))
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"losswatch: {tmp_path / 'results.csv'}: line 1: no step column",
        f"losswatch: {tmp_path / 'results.csv'}: recognised as a JSON/CSV loss log but no point could be read from it",
        f"losswatch: {tmp_path}: no run to read: {LOOKED_FOR}; pass --allow-empty if it is empty on purpose",
    ]


@pytest.mark.parametrize("command", ["analyze", "runs", "export"])
def test_a_path_with_no_run_is_exit_2_naming_what_was_looked_for(tmp_path, command):
    (tmp_path / "notes.txt").write_text("nothing here")
    result = invoke(command, str(tmp_path))
    assert result.exit_code == 2
    assert result.stderr == (
        f"losswatch: {tmp_path}: no run to read: looked for TensorBoard event files (*tfevents*), Hugging Face "
        "trainer_state.json (in the output_dir or its newest checkpoint-*), Lightning metrics.csv, and *.json, "
        "*.jsonl, *.ndjson, *.csv loss logs with a step key; pass --allow-empty if it is empty on purpose\n"
    )
    allowed = invoke(command, str(tmp_path), "--allow-empty")
    assert allowed.exit_code == 0 and allowed.stderr == ""


def test_scan_of_an_empty_logdir_is_exit_2_unless_allowed(tmp_path):
    (tmp_path / "logs").mkdir()
    db = f"sqlite:///{tmp_path / 'lw.db'}"
    result = invoke("scan", str(tmp_path / "logs"), "--db", db)
    assert result.exit_code == 2
    assert result.stderr.endswith(f"losswatch: {tmp_path / 'logs'}: no run to read: {LOOKED_FOR}; "
                                  "pass --allow-empty if it is empty on purpose\n")
    assert invoke("scan", str(tmp_path / "logs"), "--db", db, "--allow-empty").exit_code == 0


def test_scan_stores_walked_text_logs_once_and_reads_them_again_only_when_they_change(output_dirs):
    db = f"sqlite:///{output_dirs / 'lw.db'}"
    first = invoke("scan", str(output_dirs), "--db", db, "--format", "json")
    assert first.exit_code == 0, first.stderr
    assert json.loads(first.stdout)["summary"] | {"deliveries": None} == {
        "runs": 4, "changed": 4, "points": 40 + 3 + 4 + 5, "deliveries": None}
    again = json.loads(invoke("scan", str(output_dirs), "--db", db, "--format", "json").stdout)["summary"]
    assert (again["changed"], again["points"]) == (0, 0)
    with open(output_dirs / "logs" / "pretrain.jsonl", "a") as f:
        f.write(json.dumps({"step": 4, "loss": 2.9}) + "\n")
    grown = json.loads(invoke("scan", str(output_dirs), "--db", db, "--format", "json").stdout)["summary"]
    assert (grown["changed"], grown["points"]) == (1, 5)  # a text log is re-read whole and replaces its run

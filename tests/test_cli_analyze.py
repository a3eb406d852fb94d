"""`losswatch analyze` end to end: what it prints, its JSON, its exit codes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from app.cli import main
from tests.conftest import REPO
from tests.eventfiles import scalar_event, write_events


def write_run(directory, loss: np.ndarray, grad: np.ndarray | None = None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    payloads = []
    for step, value in enumerate(loss):
        payloads.append(scalar_event(step, "train/loss", float(value)))
        if grad is not None:
            payloads.append(scalar_event(step, "train/grad_norm", float(grad[step])))
    write_events(directory / "events.out.tfevents.1", payloads)


@pytest.fixture
def logdir(tmp_path):
    rng = np.random.default_rng(0)
    clean = (2 + 3 * np.exp(-np.arange(2000) / 500)) * (1 + 0.01 * rng.standard_normal(2000))
    write_run(tmp_path / "clean", clean)
    spiky = clean.copy()
    spiky[1000:1030] *= np.linspace(3, 1, 30)
    diverged = clean.copy()
    diverged[1500:] = np.nan
    write_run(tmp_path / "spiky", spiky)
    write_run(tmp_path / "nan", diverged)
    return tmp_path


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_json_lists_runs_and_alerts_with_every_field(logdir):
    result = invoke("analyze", str(logdir), "--format", "json", "--fail-on", "never")
    assert result.exit_code == 0
    out = json.loads(result.stdout)
    assert sorted(r["run"] for r in out["runs"]) == ["clean", "nan", "spiky"]
    assert {r["run"]: r["points"] for r in out["runs"]}["clean"] == 2000
    by_run = {a["run"]: a for a in out["alerts"]}
    spike = by_run["spiky"]
    assert spike["kind"] == "loss_spike" and spike["classification"] == "fast_recovering"
    assert (spike["start_step"], spike["peak_step"], spike["severity"]) == (1000, 1000, "info")
    assert 20 <= spike["recovery_steps"] <= 30 and spike["ratio"] == pytest.approx(3, rel=0.05)
    for field in ("id", "run", "tag", "kind", "classification", "severity", "start_step", "peak_step",
                  "end_step", "recovery_steps", "peak_value", "baseline", "ratio", "message", "remediation"):
        assert field in spike
    nan = by_run["nan"]
    assert (nan["kind"], nan["severity"], nan["start_step"]) == ("nonfinite", "critical", 1500)


def test_ids_are_stable_across_runs_of_the_command(logdir):
    first = json.loads(invoke("analyze", str(logdir), "--format", "json").stdout)
    again = json.loads(invoke("analyze", str(logdir), "--format", "json").stdout)
    assert [a["id"] for a in first["alerts"]] == [a["id"] for a in again["alerts"]]
    assert len({a["id"] for a in first["alerts"]}) == len(first["alerts"])


@pytest.mark.parametrize(("fail_on", "code"), [("critical", 1), ("never", 0), ("warning", 1)])
def test_exit_code_follows_fail_on(logdir, fail_on, code):
    assert invoke("analyze", str(logdir), "--fail-on", fail_on).exit_code == code


def test_clean_run_exits_0_with_a_clear_line(logdir):
    result = invoke("analyze", str(logdir / "clean"))
    assert result.exit_code == 0
    assert result.stdout == "no alerts in 1 run\nhealth  clean  healthy  nothing wrong seen; 0 loss spikes; last step 1999\n"


def test_table_is_one_line_per_alert_worst_first_then_one_health_line_per_run(logdir):
    lines = invoke("analyze", str(logdir)).stdout.splitlines()
    assert lines[0] == "severity  run    kind                        steps      message"
    assert lines[1].startswith("CRIT      nan    nonfinite                   1500-1999  ")
    assert lines[2].startswith("info      spiky  loss_spike/fast_recovering  ")
    assert lines[3] == "2 alerts in 3 runs (1 critical, 1 info)"
    assert lines[4:] == [
        "health  clean  healthy   nothing wrong seen; 0 loss spikes; last step 1999",
        "health  nan    diverged  nonfinite on train/loss since step 1500; 0 loss spikes; last step 1999",
        "health  spiky  healthy   nothing wrong seen; 1 loss spike (0.5 per 1k steps, largest 3x its baseline at step 1000; "
        "29 steps above the band); last step 1999",
    ]


def test_json_gives_each_run_its_health(logdir):
    out = json.loads(invoke("analyze", str(logdir), "--format", "json", "--fail-on", "never").stdout)
    health = {r["run"]: r["health"] for r in out["runs"]}
    assert {run: h["status"] for run, h in health.items()} == {"clean": "healthy", "nan": "diverged", "spiky": "healthy"}
    spiky = health["spiky"]
    assert (spiky["spikes"], spiky["spikes_per_1k_steps"], spiky["last_step"], spiky["best_eval"]) == (1, 0.5, 1999, None)
    assert spiky["largest_spike"]["step"] == 1000 and spiky["largest_spike"]["ratio"] == pytest.approx(3, rel=0.05)
    assert 20 <= spiky["steps_above_band"] <= 30


def test_config_file_changes_thresholds(logdir, tmp_path):
    config = tmp_path / "lw.toml"
    config.write_text("[spikes]\nfast_steps = 10\n")
    out = json.loads(invoke("analyze", str(logdir / "spiky"), "--format", "json", "--config", str(config)).stdout)
    assert out["alerts"][0]["classification"] == "slow_recovering"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[spikes]\nfast_step = 10\n", "unknown setting 'spikes.fast_step'"),
        ("[spikes]\nfast_steps = 'ten'\n", "spikes.fast_steps must be an integer, got 'ten'"),
        ("[roles]\n'my/loss' = 'lossy'\n", "roles.my/loss: unknown role 'lossy'; one of eval_loss, grad_norm, learning_rate, loss, loss_scale, other"),
        ("spikes = 3\n", "spikes must be a table"),
    ],
)
def test_bad_config_is_exit_2_with_the_setting_named(logdir, tmp_path, text, message):
    config = tmp_path / "lw.toml"
    config.write_text(text)
    result = invoke("analyze", str(logdir), "--config", str(config))
    assert result.exit_code == 2
    assert result.stderr == f"losswatch: {config}: {message}\n"


def test_roles_override_makes_an_unnamed_tag_a_loss(tmp_path):
    rng = np.random.default_rng(1)
    v = (2 + 3 * np.exp(-np.arange(1000) / 300)) * (1 + 0.01 * rng.standard_normal(1000))
    v[500] = 8
    (tmp_path / "r").mkdir()
    write_events(tmp_path / "r" / "events.out.tfevents.1", [scalar_event(i, "objective", float(x)) for i, x in enumerate(v)])
    assert invoke("analyze", str(tmp_path)).stdout.startswith("no alerts in 1 run\nhealth  r  healthy  no loss logged; ")
    config = tmp_path / "lw.toml"
    config.write_text("[roles]\nobjective = 'loss'\n")
    assert "loss_spike" in invoke("analyze", str(tmp_path), "--config", str(config)).stdout


def test_missing_path_is_exit_2(tmp_path):
    result = invoke("analyze", str(tmp_path / "none"))
    assert result.exit_code == 2
    assert result.stderr == f"losswatch: {tmp_path / 'none'}: no such file or directory\n"


def test_json_stream_and_trainer_state_are_analysed(tmp_path):
    rng = np.random.default_rng(2)
    loss = (2 + 3 * np.exp(-np.arange(600) / 200)) * (1 + 0.01 * rng.standard_normal(600))
    loss[300] = float("nan")
    points = [{"step": i, "tag": "train/loss", "value": "NaN" if np.isnan(x) else x} for i, x in enumerate(loss)]
    (tmp_path / "run.json").write_text(json.dumps({"run": "streamed", "points": points}))
    out = json.loads(invoke("analyze", str(tmp_path / "run.json"), "--format", "json").stdout)
    [alert] = out["alerts"]
    assert (alert["run"], alert["kind"], alert["start_step"]) == ("streamed", "nonfinite", 300)


def test_the_count_line_says_1_alert_in_1_run():
    out = invoke("analyze", str(REPO / "sample_runs" / "lr_burst"), "--fail-on", "never").stdout.splitlines()
    assert out[2] == "1 alert in 1 run (1 warning)"

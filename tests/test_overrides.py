"""Per-run settings: `[[override]]` tables matched by run-name and source globs, checked when
the file is read, applied in file order over the top-level settings."""

from __future__ import annotations

import json
import tomllib

import numpy as np
import pytest
from click.testing import CliRunner

from analyzers.config import AnalysisConfig, ConfigError
from app.cli import main
from tests.eventfiles import scalar_event, write_events
from tests.service_helpers import service

SETTINGS = """
[spikes]
z = 7.0

[roles]
"my/objective" = "loss"

[[override]]
run = "rl-*"
spikes.z = 50.0
spikes.tail_margin = 4.0

[[override]]
run = "rl-big-*"
source = "http"
spikes.z = 60.0
roles = {"aux" = "other"}

[[override]]
source = "/data/pretrain/*"
stale.min_minutes = 30.0
"""


def config() -> AnalysisConfig:
    return AnalysisConfig.from_mapping(tomllib.loads(SETTINGS))


def test_overrides_apply_in_file_order_over_the_top_level():
    c = config()
    assert c.for_run("http", "pretrain-1").spikes.z == 7.0  # no override matches
    rl = c.for_run("http", "rl-small")
    assert (rl.spikes.z, rl.spikes.tail_margin) == (50.0, 4.0)
    big = c.for_run("http", "rl-big-7")
    assert (big.spikes.z, big.spikes.tail_margin) == (60.0, 4.0)  # the later override wins; the earlier's rest stays
    assert big.roles == {"my/objective": "loss", "aux": "other"}  # roles add to the top level's
    assert c.for_run("/data/rl", "rl-big-7").spikes.z == 50.0  # the second wants source http
    assert c.for_run("/data/pretrain/llama", "r").stale.min_minutes == 30.0
    assert [o.label for o in c.applied("http", "rl-big-7")] == ["override[0] run=rl-*", "override[1] run=rl-big-* source=http"]
    assert c.for_run("http", "rl-x").grad_norm == c.grad_norm  # untouched tables stay as they were


@pytest.mark.parametrize(("text", "message"), [
    ('[[override]]\nspikes.z = 3.0', 'override[0] matches every run: give run = "GLOB" and/or source = "GLOB"'),
    ('[[override]]\nrun = "a"\n[[override]]\nrun = "b"\nspikes.zz = 3.0', "unknown setting 'override[1].spikes.zz'"),
    ('[[override]]\nrun = "a"\nspikes.z = "high"', "override[0].spikes.z must be a number, got 'high'"),
    ('[[override]]\nrun = 3', "override[0].run must be a glob (a string), got 3"),
    ('[[override]]\nrun = "a"\nrunning_mean.enabled = 0', "override[0].running_mean.enabled must be true or false, got 0"),
    ('[[override]]\nrun = "a"\nrunning_mean.jump = true', "override[0].running_mean.jump must be a number, got True"),
    ('override = 3', "override must be an array of tables: [[override]]"),
])
def test_a_bad_override_is_an_error_naming_it_when_the_file_is_read(text, message):
    with pytest.raises(ConfigError) as e:
        AnalysisConfig.from_mapping(tomllib.loads(text))
    assert str(e.value) == message


def test_the_command_line_reports_a_bad_override_with_its_file(tmp_path):
    path = tmp_path / "settings.toml"
    path.write_text('[[override]]\nrun = "rl-*"\nspikes.bogus = 1\n')
    result = CliRunner().invoke(main, ["analyze", str(tmp_path), "--config", str(path)])
    assert result.exit_code == 2
    assert result.stderr == f"losswatch: {path}: unknown setting 'override[0].spikes.bogus'\n"


def spiky(n: int = 1000, at: int = 600) -> dict:
    """A falling loss with 2% minibatch noise (without any, its sigma would be its rounding,
    and no bar short of infinity would hold a jump), 4x at one point."""
    v = (2 + 3 * np.exp(-np.arange(n) / 200)) * (1 - 0.1 * np.arange(n) / n) * (1 + 0.02 * np.random.default_rng(0).standard_normal(n))
    v[at] *= 4
    return {"points": [{"step": i, "tag": "train/loss", "value": float(x)} for i, x in enumerate(v)]}


def test_a_noisy_run_gets_no_spike_alert_under_its_override_while_another_run_does(store_url):
    quiet_rl = AnalysisConfig.from_mapping({"override": [{"run": "rl-*", "spikes": {"z": 1000.0}}]})
    with service(store_url, analysis=quiet_rl) as client:
        for run in ("rl-ppo", "pretrain"):
            assert client.post(f"/v1/runs/{run}/points", json=spiky()).status_code == 200
        kinds = {run: [a["kind"] for a in client.get(f"/v1/runs/{run}/alerts").json()] for run in ("rl-ppo", "pretrain")}
        assert kinds == {"rl-ppo": [], "pretrain": ["loss_spike"]}
        assert client.get("/v1/runs/rl-ppo").json()["overrides"] == ["override[0] run=rl-*"]
        assert client.get("/v1/runs/pretrain").json()["overrides"] == []
        page = client.get("/run", params={"name": "rl-ppo"}).text
        assert 'Settings: <code class="override">override[0] run=rl-*</code> over the top-level ones.' in page
        assert "the top-level ones (no override matches)" in client.get("/run", params={"name": "pretrain"}).text


def test_scan_and_analyze_apply_overrides_by_source(tmp_path):
    values = spiky()["points"]
    for name in ("noisy", "calm"):
        (tmp_path / name).mkdir()
        write_events(tmp_path / name / "events.out.tfevents.1", [scalar_event(p["step"], "train/loss", p["value"]) for p in values])
    settings = tmp_path / "settings.toml"
    settings.write_text(f'[[override]]\nsource = "{tmp_path}"\nrun = "noisy"\nspikes.z = 1000.0\n')
    result = CliRunner().invoke(main, ["analyze", str(tmp_path), "--config", str(settings), "--format", "json"])
    assert {a["run"] for a in json.loads(result.stdout)["alerts"] if a["kind"] == "loss_spike"} == {"calm"}

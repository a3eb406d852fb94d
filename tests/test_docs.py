"""Every command, option, setting and alert kind a user can meet is documented in the README."""

from __future__ import annotations

import dataclasses
import re
import tomllib

from analyzers.config import AnalysisConfig
from analyzers.findings import Kind, SpikeClass
from app.cli import main
from tests.conftest import REPO

README = (REPO / "README.md").read_text()


def test_every_command_and_option_is_documented():
    for name, command in main.commands.items():
        assert f"### `losswatch {name}" in README, name
        subcommands = getattr(command, "commands", {})
        for sub in subcommands:
            assert f"`losswatch {name} {sub}" in README, f"{name} {sub}"
        for each in [command, *subcommands.values()]:
            for param in each.params:
                for opt in getattr(param, "opts", []):
                    if opt.startswith("--"):
                        assert opt in README, f"{name} {each.name} {opt}"


def test_every_alert_kind_and_spike_class_is_documented():
    for value in [k.value for k in Kind] + [c.value for c in SpikeClass]:
        assert f"`{value}`" in README, value


def leaves(obj, prefix: str = "") -> set[str]:
    out = set()
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            out |= leaves(value, f"{prefix}{f.name}.")
        else:
            out.add(prefix + f.name)
    return out


def test_the_settings_block_names_every_setting_with_its_default():
    block = re.search(r"## Settings.*?```toml\n(.*?)```", README, re.S).group(1)
    documented = tomllib.loads(block)
    AnalysisConfig.from_mapping(documented)  # the example is a valid settings file
    assert documented["override"], "the block shows an [[override]] table"
    for key in leaves(AnalysisConfig()) - {"roles", "overrides"}:
        head, _, name = key.rpartition(".")
        table = documented
        for part in filter(None, head.split(".")):
            table = table[part]
        default = AnalysisConfig()
        for part in key.split("."):
            default = getattr(default, part)
        assert table[name] == default, key


def test_every_http_route_is_documented():
    from fastapi.routing import APIRoute

    from app.service.app import create_app
    from app.service.settings import Settings

    for route in create_app(Settings(db_url="sqlite://")).routes:
        if isinstance(route, APIRoute) and route.include_in_schema:
            # the README writes {run} for a run and {id} for any other identifier
            path = re.sub(r"\{(\w+?)(:path)?\}", lambda m: "{run}" if m.group(1) == "run" else "{id}", route.path)
            for method in route.methods - {"HEAD"}:
                assert f"{method} {path}" in README, (method, path)


def test_the_receivers_example_is_a_valid_settings_file():
    from app.alerts import receivers

    block = re.search(r"\*\*Routing and grouping\.\*\*.*?```toml\n(.*?)```", README, re.S).group(1)
    listed = receivers.from_settings(tomllib.loads(block)["receivers"])
    assert [r.format for r in listed] == ["slack", "alertmanager"]


def test_every_metric_is_documented(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    from tests.service_helpers import service

    with service(f"sqlite:///{tmp_path / 'store.db'}") as client:
        client.post("/v1/runs/r/points", json={"points": [{"step": 1, "tag": "train/loss", "value": 1.0}]})
        families = {f.name for f in text_string_to_metric_families(client.get("/metrics").text)}
    assert "losswatch_run_last_step" in families
    for name in families - {f for f in families if f.endswith("_created")}:  # a counter's start time, not ours
        assert f"`{name}" in README, name


def test_the_training_loop_client_is_documented():
    import inspect

    from losswatch_client import DEFAULT_GUARD_ON, Watcher, settings
    from losswatch_client.alerts import GUARD_POLICIES

    section = README[README.index("## From your training loop") : README.index("## The HTTP API")]
    rows = dict(re.findall(r"^\| `(\w+)` \| (.*?) \|", section, re.M))
    for name, param in inspect.signature(Watcher).parameters.items():
        assert name in rows, f"Watcher({name}=...) is not in the README's table"
        default = param.default
        if isinstance(default, str):
            assert f'`"{default}"`' in rows[name], name
        elif isinstance(default, (int, float)) and not isinstance(default, bool):
            assert f"`{default}`" in rows[name], name
        elif isinstance(default, tuple):
            assert f"`{default!r}`".replace("'", '"') in rows[name], name
    assert str(tuple(DEFAULT_GUARD_ON)).replace("'", '"') in rows["guard_on"]
    for var in (settings.URL_VAR, settings.TOKEN_VAR, settings.RUN_VAR, settings.SPOOL_VAR, *settings.RANK_VARS):
        assert f"`{var}`" in section or f"{var}=" in section, var
    for policy in GUARD_POLICIES:
        assert f'`guard="{policy}"`' in section, policy
    for name in ("LosswatchCallback(", "LosswatchLogger(", "LosswatchGuard(", "`LossAlert`", "on_alert(", "w.alerts",
                 "should_stop", "w.decision", "losswatch scan", "bench/client.py"):
        assert name in section, name


def test_every_web_ui_page_is_documented():
    from fastapi.routing import APIRoute

    from app.service.app import create_app
    from app.service.settings import Settings

    section = README[README.index("## The web UI"):README.index("## The HTTP API")]
    for route in create_app(Settings(db_url="sqlite://")).routes:
        if isinstance(route, APIRoute) and not route.include_in_schema and route.path not in ("/docs", "/openapi.json"):
            path = re.sub(r"\{\w+\}", "{id}", route.path)
            for method in route.methods - {"HEAD"}:
                assert f"{method} {path}" in section, (method, path)


def test_the_readme_states_the_python_version_pyproject_requires():
    required = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    version = re.fullmatch(r">=(\d+\.\d+)", required).group(1)
    assert f"Python {version}+" in README

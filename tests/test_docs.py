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
        for param in command.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("--"):
                    assert opt in README, f"{name} {opt}"


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
    for key in leaves(AnalysisConfig()) - {"roles"}:
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

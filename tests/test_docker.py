"""docker/: the compose file and the Dockerfile, checked without a Docker engine.

The structure is read with PyYAML (anchors and merge keys resolved as Compose resolves them)
and interpolated with the defaults the file documents; the token init script is run for real
against a SQLite store, twice, since a rerun must be harmless.  `docker compose config` (or
Debian's `docker-compose config`) validates against the Compose specification when installed.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
COMPOSE = REPO / "docker" / "compose.yaml"
DOCKERFILE = REPO / "docker" / "Dockerfile"
_VARIABLE = re.compile(r"\$\$|\$\{(\w+)(?::?-([^}]*))?\}|\$(\w+)")


def interpolate(value, env: dict[str, str]):
    """`value` with Compose's interpolation applied: `${VAR:-default}`, `$VAR`, and `$$` for a
    literal `$` (what the container's shell sees)."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) or m.group(3)
        return env.get(name) or (m.group(2) or "")

    return _VARIABLE.sub(one, value)


@pytest.fixture(scope="module")
def services() -> dict[str, dict]:
    """The services as Compose sees them with no variable set: every default applies."""
    return interpolate(yaml.safe_load(COMPOSE.read_text()), {})["services"]


def argv(service: dict) -> list[str]:
    """What the container runs: the entrypoint (default: the image's `losswatch`) and command."""
    return _words(service.get("entrypoint", ["losswatch"])) + _words(service.get("command", []))


def _words(value: str | list[str]) -> list[str]:
    """Compose splits a string entrypoint or command as a shell would."""
    return shlex.split(value) if isinstance(value, str) else list(value)


def script(service: dict) -> str:
    """The shell script of a `/bin/sh -c` service."""
    words = argv(service)
    assert words[:2] == ["/bin/sh", "-c"], words
    return words[2]


def store_url(service: dict) -> str:
    """The store a losswatch service uses: `--db URL`, else LOSSWATCH_DB."""
    words = argv(service)
    if "--db" in words:
        return words[words.index("--db") + 1]
    return service.get("environment", {}).get("LOSSWATCH_DB", "")


def servers(services: dict[str, dict]) -> dict[str, dict]:
    return {name: s for name, s in services.items() if argv(s)[:2] == ["losswatch", "serve"]}


def one_service(services: dict[str, dict], needle: str) -> dict:
    """The only service whose argv mentions `needle`."""
    found = [s for s in services.values() if needle in " ".join(argv(s))]
    assert len(found) == 1, f"{len(found)} services run {needle!r}"
    return found[0]


def test_postgres_has_a_healthcheck_and_a_volume(services):
    pg = services["postgres"]
    assert pg["image"].startswith("postgres:16")
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])
    assert any(v.endswith(":/var/lib/postgresql/data") for v in pg["volumes"])
    assert pg["environment"]["POSTGRES_USER"] == "losswatch" and pg["environment"]["POSTGRES_DB"] == "losswatch"


def test_exactly_two_replicas_serve_on_the_postgres_store(services):
    replicas = servers(services)
    assert len(replicas) == 2
    password = services["postgres"]["environment"]["POSTGRES_PASSWORD"]
    for service in replicas.values():
        words = argv(service)
        assert words[words.index("--host") + 1] == "0.0.0.0" and words[words.index("--port") + 1] == "8000"
        assert words[words.index("--allow-root") + 1] == "/logs"
        url = urlsplit(store_url(service))
        assert (url.scheme, url.hostname, url.username, url.password, url.path) == (
            "postgresql", "postgres", "losswatch", password, "/losswatch")
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert "/healthz" in " ".join(service["healthcheck"]["test"])


def test_replicas_publish_different_host_ports_to_8000(services):
    published = [port.rsplit(":", 2) for s in servers(services).values() for port in s["ports"]]
    assert [container for *_, container in published] == ["8000", "8000"]
    assert len({host_port for _, host_port, _ in published}) == 2


def test_replicas_start_after_the_token_exists(services):
    """`serve --host 0.0.0.0` refuses to start with no token (and there is no --insecure)."""
    init = [name for name, s in services.items() if "token create" in " ".join(argv(s))]
    assert len(init) == 1
    for service in servers(services).values():
        assert "--insecure" not in argv(service)
        assert service["depends_on"][init[0]]["condition"] == "service_completed_successfully"


def test_the_logdir_is_mounted_read_only_where_it_is_read(services):
    readers = [*servers(services).values(), one_service(services, "losswatch scan")]
    for service in readers:
        assert "./logs:/logs:ro" in service["volumes"]


def test_scan_runs_every_300_seconds_in_a_loop_on_the_postgres_store(services):
    scan = one_service(services, "losswatch scan")
    text = script(scan)
    assert "while true" in text and "sleep 300" in text
    assert "losswatch scan /logs" in text and "--format json" in text
    assert store_url(scan) == store_url(next(iter(servers(services).values())))
    assert scan["restart"] == "unless-stopped"


def test_secrets_default_to_obvious_development_placeholders():
    """Only placeholders are committed; every real secret comes from the environment."""
    raw = COMPOSE.read_text()
    defaults = dict(re.findall(r"\$\{(POSTGRES_PASSWORD|LOSSWATCH_WRITE_TOKEN):-([^}]*)\}", raw))
    assert set(defaults) == {"POSTGRES_PASSWORD", "LOSSWATCH_WRITE_TOKEN"}
    assert all("dev" in value for value in defaults.values())
    assert len(defaults["LOSSWATCH_WRITE_TOKEN"]) >= 16  # `token create --value` refuses shorter


def test_token_init_registers_the_token_once_and_a_rerun_is_harmless(services, tmp_path):
    init = one_service(services, "token create")
    env = {**os.environ, **init["environment"], "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "LOSSWATCH_DB": f"sqlite:///{tmp_path / 'store.db'}"}
    runs = [subprocess.run(["/bin/sh", "-c", script(init)], env=env, capture_output=True, text=True, timeout=120)
            for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], [r.stderr for r in runs]
    assert "registered" in runs[0].stdout and "exists already" in runs[1].stdout
    assert env["LOSSWATCH_TOKEN_VALUE"] not in runs[0].stdout + runs[1].stdout  # the secret is not logged
    listed = subprocess.run(["losswatch", "token", "list"], env=env, capture_output=True, text=True, timeout=60)
    assert listed.stdout.splitlines() == ["trainer\tread write"]


def test_dockerfile_builds_the_wheel_on_slim_and_runs_as_non_root():
    lines = [line.strip() for line in DOCKERFILE.read_text().splitlines() if line.strip() and not line.startswith("#")]
    bases = [line.split()[1] for line in lines if line.startswith("FROM ")]
    assert len(bases) == 2 and all(base == "python:3.11-slim" for base in bases)
    build, runtime = "\n".join(lines).split("\nFROM ", 1)
    assert "gcc" in build and "pip wheel" in build
    for needed in ("pyproject.toml", "setup.py", "README.md", "app", "analyzers"):
        assert any(line.startswith("COPY ") and needed in line.split()[1:-1] for line in build.splitlines()), needed
    users = [line.split()[1] for line in runtime.splitlines() if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")
    assert 'ENTRYPOINT ["losswatch"]' in runtime and "gcc" not in runtime


def _unavailable(compose: list[str]) -> str | None:
    """Why `compose` cannot run here, or None when it can."""
    if shutil.which(compose[0]) is None:
        return f"{compose[0]} is not installed"
    probe = subprocess.run([*compose, "version"], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        return f"`{' '.join(compose)} version` fails (no Compose plugin?): {(probe.stderr or probe.stdout).strip().splitlines()[0]}"
    return None


@pytest.mark.parametrize("compose", [["docker", "compose"], ["docker-compose"]], ids=" ".join)
def test_compose_config_accepts_the_file(compose):
    """`config` validates the file against the Compose specification; it needs no engine."""
    reason = _unavailable(compose)
    if reason:
        pytest.skip(reason)
    result = subprocess.run([*compose, "-f", str(COMPOSE), "config", "--quiet"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr

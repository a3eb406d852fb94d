"""A real Prometheus Alertmanager for tests (Debian's `prometheus-alertmanager`): started on a
free loopback port with a temporary config and storage directory, routing every alert,
grouped by run, to a webhook receiver of the test's."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.service_helpers import free_port, wait_for

BINARIES = ("prometheus-alertmanager", "alertmanager")

CONFIG = """\
global:
  resolve_timeout: 1h
route:
  receiver: hook
  group_by: [run]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: {hook}
        send_resolved: true
"""


def binary() -> str:
    """The alertmanager program, or skip saying why there is none."""
    for name in BINARIES:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("Alertmanager is not installed (Debian: apt-get install prometheus-alertmanager; .ci/run does)")
    raise AssertionError("unreachable")


@contextlib.contextmanager
def alertmanager(directory: Path, hook: str) -> Iterator[str]:
    """A running Alertmanager; yields its base URL."""
    program = binary()
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "alertmanager.yml"
    config.write_text(CONFIG.format(hook=hook))
    port = free_port()
    process = subprocess.Popen(
        [program, f"--config.file={config}", f"--storage.path={directory / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if process.poll() is not None:
            return True
        try:
            return httpx.get(f"{base}/-/ready", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(ready, timeout=30)
        assert process.poll() is None, process.stderr.read().decode()
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

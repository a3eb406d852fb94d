"""Per-run series on /metrics: read from the store when scraped, capped to the runs that
advanced most recently, and scraped by a real Prometheus (Debian's `prometheus`)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.service_helpers import free_port, server_process, service, wait_for


def points(n: int, nan_from: int | None = None) -> dict:
    rows = []
    for s in range(n):
        loss = "NaN" if nan_from is not None and s >= nan_from else 3.0 - s / n
        rows += [{"step": s, "tag": "train/loss", "value": loss}, {"step": s, "tag": "learning_rate", "value": 3e-4}]
        if s % 10 == 9:
            rows.append({"step": s, "tag": "val/loss", "value": 3.1 - s / n})
    return {"points": rows}


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_per_run_series_and_the_cap_on_runs(store_url):
    with service(store_url, metrics_max_runs=2) as client:
        for run, body in (("old", points(10)), ("mid", points(100, nan_from=90)), ("new", points(50))):
            assert client.post(f"/v1/runs/{run}/points", json=body).status_code == 200
        got = samples(client.get("/metrics").text)
    label = lambda run, **more: tuple(sorted({"run": run, "source": "http", **more}.items()))  # noqa: E731
    assert got[("losswatch_runs", ())] == 3 and got[("losswatch_runs_exported", ())] == 2
    assert got[("losswatch_run_last_step", label("new"))] == 49
    assert got[("losswatch_run_last_step", label("mid"))] == 99
    assert ("losswatch_run_last_step", label("old")) not in got  # the cap: the two that advanced last
    assert got[("losswatch_run_open_alerts", label("mid", severity="critical"))] == 1
    assert got[("losswatch_run_open_alerts", label("new", severity="critical"))] == 0
    assert got[("losswatch_run_last_value", label("new", role="loss"))] == pytest.approx(3.0 - 49 / 50)
    assert got[("losswatch_run_last_value", label("new", role="eval_loss"))] == pytest.approx(3.1 - 49 / 50)
    assert got[("losswatch_run_last_value", label("new", role="learning_rate"))] == pytest.approx(3e-4)
    assert ("losswatch_run_last_value", label("mid", role="loss")) not in got  # NaN: left out
    seen = got[("losswatch_run_last_seen_timestamp_seconds", label("new"))]
    assert seen > 1.7e9


PROMETHEUS = shutil.which("prometheus")


@contextlib.contextmanager
def prometheus(tmp_path, target: str):
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"scrape_configs:\n  - job_name: losswatch\n    static_configs:\n      - targets: ['{target}']\n"
    )
    log = open(tmp_path / "prometheus.log", "wb")
    process = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _ready(base) or process.poll() is not None, timeout=30)
        assert process.poll() is None, (tmp_path / "prometheus.log").read_text()
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/-/ready", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.skipif(PROMETHEUS is None, reason="Debian's prometheus is not installed (apt-get install prometheus; .ci/run does)")
def test_a_real_prometheus_scrapes_the_per_run_series(tmp_path):
    with server_process(f"sqlite:///{tmp_path / 'store.db'}") as (base, _):
        assert httpx.post(f"{base}/v1/runs/gpt-small/points", json=points(300, nan_from=250)).status_code == 200
        with prometheus(tmp_path, base.removeprefix("http://")) as prom:

            def query(q: str):
                body = httpx.get(f"{prom}/api/v1/query", params={"query": q}, timeout=5).json()
                assert body["status"] == "success", body
                return body["data"]["result"]

            [step] = wait_for(lambda: query('losswatch_run_last_step{run="gpt-small"}'), timeout=60)
            assert step["metric"] == {"__name__": "losswatch_run_last_step", "run": "gpt-small", "source": "http",
                                      "job": "losswatch", "instance": base.removeprefix("http://")}
            assert step["value"][1] == "299"
            [critical] = query('losswatch_run_open_alerts{run="gpt-small",severity="critical"}')
            assert critical["value"][1] == "1"
            [eval_loss] = query('losswatch_run_last_value{run="gpt-small",role="eval_loss"}')
            assert float(eval_loss["value"][1]) == pytest.approx(3.1 - 299 / 300)

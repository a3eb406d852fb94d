"""The service as a real process on a real socket: it starts, serves, takes concurrent
clients posting interleaved points without losing or doubling one, and shuts down cleanly."""

from __future__ import annotations

import json
import signal
import threading

import httpx
import pytest

from tests.service_helpers import server_process


@pytest.fixture
def server(store_url):
    with server_process(store_url, "--analysis-interval", "0.5") as running:
        yield running


def test_concurrent_clients_posting_interleaved_points_store_each_exactly_once(server):
    base, _ = server
    clients, per_client, batch = 8, 200, 10
    errors = []

    def post(client_id: int) -> None:
        with httpx.Client(base_url=base, timeout=30) as http:
            for first in range(0, per_client, batch):
                # every client writes its own tag of one shared run, and re-sends its previous batch
                steps = list(range(max(0, first - batch), first + batch))
                body = {"points": [{"step": s, "tag": f"worker{client_id}/loss", "value": 1.0 + s} for s in steps]}
                r = http.post("/v1/runs/shared/points", json=body)
                if r.status_code != 200:
                    errors.append(r.text)

    threads = [threading.Thread(target=post, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    run = httpx.get(f"{base}/v1/runs/shared").json()
    assert run["points"] == clients * per_client
    assert {t["points"] for t in run["tags"]} == {per_client}


def test_sigterm_shuts_down_cleanly_and_logs_json(server):
    base, process = server
    httpx.post(f"{base}/v1/runs/a/points", json={"points": [{"step": 1, "tag": "loss", "value": 1.0}]})
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once done
    lines = process.stderr.read().decode().splitlines()
    records = [json.loads(line) for line in lines if line.startswith("{")]
    messages = [r["message"] for r in records]
    assert "Application shutdown complete." in messages  # drained, then the lifespan closed the store
    requests = [r for r in records if r.get("message") == "request" and r.get("path") == "/v1/runs/a/points"]
    assert requests and requests[0]["status"] == 200 and requests[0]["method"] == "POST"

"""Heavy requests (large posts, series reads over many points) each hold one of
--max-heavy-requests slots; when all are taken the answer is 503 with Retry-After at once,
and small requests still go through."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from app.service.errors import ApiError
from app.service.limits import HEAVY_SERIES_WRITES, Slots
from tests.service_helpers import server_process, service, wait_for

J = {"Content-Type": "application/json"}
BUSY = {"code": "busy", "message": "the service is busy: all 1 slots for large requests are taken; retry in 1 s"}


def test_a_claim_takes_one_slot_once_and_gives_it_back():
    slots = Slots(1)
    with slots.claim() as first:
        first.take()
        first.take()  # still one slot
        with pytest.raises(ApiError) as refused, slots.claim() as second:
            second.take()
        assert (refused.value.status, refused.value.headers) == (503, {"Retry-After": "1"})
    with slots.claim() as third:
        third.take()


def test_a_large_post_beyond_the_slots_is_503_in_a_real_server(tmp_path):
    with server_process(f"sqlite:///{tmp_path / 'store.db'}", "--max-heavy-requests", "1") as (base, _):
        release, sent, answers = threading.Event(), threading.Event(), []
        head = b"[" + b" " * (2 << 20)

        def slow_body():
            yield head  # a declared size past 1 MiB: this request takes the slot at once
            sent.set()
            release.wait(60)
            yield b"]"

        # the holder goes first: a probe racing it could take the slot and turn it away
        headers = {**J, "Content-Length": str(len(head) + 1)}
        holder = threading.Thread(target=lambda: answers.append(
            httpx.post(f"{base}/v1/runs/big/points", content=slow_body(), headers=headers, timeout=90)))
        holder.start()
        try:
            assert sent.wait(30)
            time.sleep(0.5)  # for the server to read the headers it has been sent

            def refused():
                r = httpx.post(f"{base}/v1/runs/other/points", content=b"[" + b" " * (2 << 20) + b"]", headers=J, timeout=30)
                return r if r.status_code == 503 else None

            busy = wait_for(refused, timeout=30)
            assert busy.headers["retry-after"] == "1"
            assert busy.json()["error"] == BUSY
            small = httpx.post(f"{base}/v1/runs/small/points", json=[{"step": 1, "loss": 1.0}], timeout=30)
            assert small.status_code == 200 and small.json()["accepted"] == 1
        finally:
            release.set()
            holder.join()
        assert answers[0].status_code == 200
        rows = b"[" + b",".join(b'{"step": %d, "loss": 1.0}' % s for s in range(60_000)) + b"]"
        assert len(rows) > 1 << 20
        assert httpx.post(f"{base}/v1/runs/other/points", content=rows, headers=J, timeout=60).json()["accepted"] == 60_000


def test_a_series_read_over_many_points_is_heavy_and_a_window_is_not(store_url):
    with service(store_url, max_heavy_requests=1) as client:
        n = HEAVY_SERIES_WRITES + 5000
        client.post("/v1/runs/long/points", json={"points": [{"step": s, "tag": "loss", "value": 1.0} for s in range(n)]})
        with client.app.state.heavy.claim() as someone_else:
            someone_else.take()
            whole = client.get("/v1/runs/long/series", params={"tag": "loss"})
            assert whole.status_code == 503 and whole.json()["error"] == BUSY
            window = client.get("/v1/runs/long/series", params={"tag": "loss", "start": 1000, "end": 2000})
            assert window.status_code == 200 and window.json()["total"] == 1001
        assert client.get("/v1/runs/long/series", params={"tag": "loss"}).json()["total"] == n

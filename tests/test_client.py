"""The training-loop client (`client/`, package losswatch_client) against a real `losswatch
serve` process: outages with kill -9, the spool and its replay, the guard, ranks and forks."""

from __future__ import annotations

import logging
import math
import os
import subprocess
import sys
import threading
import time
import urllib.parse

import pytest
from losswatch_client import LossAlert, Watcher
from losswatch_client.transport import Unreachable

from tests.client_server import serving
from tests.service_helpers import wait_for


@pytest.fixture
def db(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture
def spool_dir(tmp_path) -> str:
    return str(tmp_path / "spool")


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One service for the tests that neither kill it nor need settings of their own."""
    with serving(f"sqlite:///{tmp_path_factory.mktemp('shared') / 'store.db'}") as server:
        yield server


TOKEN = "t" * 32


@pytest.fixture(scope="module")
def locked(tmp_path_factory):
    """A service that needs a token: `losswatch token create` made one before it started."""
    db = f"sqlite:///{tmp_path_factory.mktemp('locked') / 'store.db'}"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    subprocess.run([sys.executable, "-m", "app.cli", "token", "create", "trainer", "--scope", "write", "--value", TOKEN,
                    "--db", db], check=True, env=env, capture_output=True)
    with serving(db) as server:
        yield server


def loss(step: int) -> float:
    return 2.0 * math.exp(-step / 5000) + 0.3 + 0.01 * math.sin(step)


def test_20k_steps_through_two_kills_store_every_point_once(db, spool_dir):
    run = "exp/kills"
    with serving(db) as server:
        watcher = Watcher(server.url, run, spool_dir=spool_dir, flush_interval=0.2, timeout=2)
        restarts = []
        for step in range(20_000):
            watcher.log(step, loss=loss(step), grad_norm=1.0 + step % 7)
            if step in (5_000, 12_000):
                server.kill()  # mid-request or between requests: either way nothing may be lost
                restarts.append(threading.Thread(target=server.start))  # comes back while training goes on
                restarts[-1].start()
            time.sleep(0.0002)
        for thread in restarts:
            thread.join()
        watcher.close(timeout=120)
        assert watcher.dropped == 0
        detail = server.get(f"/v1/runs/{urllib.parse.quote(run, safe='')}").json()
        assert detail["points"] == 40_000  # every point stored once: a duplicate is never stored
        assert detail["rollbacks"] == []  # nothing was resent out of order
        assert server.series(run, "loss") == [[s, loss(s)] for s in range(20_000)]
        assert server.series(run, "grad_norm") == [[s, 1.0 + s % 7] for s in range(20_000)]
    assert not os.listdir(spool_dir)  # delivered: no spool left behind


def test_a_spool_is_replayed_in_order_when_the_service_comes_back(db, spool_dir):
    run = "resumed"
    with serving(db, start=False) as server:
        watcher = Watcher(server.url, run, spool_dir=spool_dir, flush_interval=0.05, timeout=1)
        for step in range(300):
            watcher.log(step, loss=1.0 + step)
        for step in range(200, 400):  # the job resumed from its checkpoint at step 200: new values
            watcher.log(step, loss=-1.0 - step)
        wait_for(lambda: os.listdir(spool_dir) and watcher._spool.size > 0 and not watcher._queue)
        [name] = os.listdir(spool_dir)
        with open(os.path.join(spool_dir, name)) as spooled:
            steps = [int(line.split('"step": ')[1].split(",")[0]) for line in spooled]
        assert steps == list(range(300)) + list(range(200, 400))
        server.start()
        assert watcher.flush(timeout=60)
        watcher.close()
        detail = server.get(f"/v1/runs/{run}").json()
        # replayed in order, the second pass is a resume over the first, as it happened
        assert [(r["from_step"], r["to_step"]) for r in detail["rollbacks"]] == [(299, 200)]
        assert server.series(run, "loss") == [[s, 1.0 + s] for s in range(200)] + [[s, -1.0 - s] for s in range(200, 400)]
    assert not os.listdir(spool_dir)


def test_a_spool_left_by_a_dead_process_is_sent_by_the_next_watcher_of_the_run(db, spool_dir, caplog):
    with serving(db, start=False) as server:
        first = Watcher(server.url, "left", spool_dir=spool_dir, timeout=1, close_timeout=2)
        for step in range(50):
            first.log(step, loss=float(step))
        first.close()  # the service never answered: the points stay on disk
        [name] = os.listdir(spool_dir)
        assert "they are in" in caplog.text and name in caplog.text
        server.start()
        caplog.clear()
        with caplog.at_level(logging.WARNING, "losswatch_client"):
            second = Watcher(server.url, "left", spool_dir=spool_dir)
            assert second.flush(timeout=30)
            second.close()
        assert f"losswatch: sending 50 points an earlier process left in {os.path.join(spool_dir, name)}" in caplog.text
        assert server.series("left", "loss") == [[s, float(s)] for s in range(50)]


def test_a_full_spool_drops_the_rest_and_says_so(db, spool_dir, caplog):
    with serving(db, start=False) as server, caplog.at_level(logging.ERROR, "losswatch_client"):
        watcher = Watcher(server.url, "full", spool_dir=spool_dir, spool_max_bytes=1000, flush_interval=0.05, timeout=1)
        for step in range(100):
            watcher.log(step, loss=0.5)
        wait_for(lambda: watcher.dropped)
        path = watcher._spool.path
        watcher.close(timeout=2)
    kept = sum(1 for _ in open(path))
    assert kept + watcher.dropped == 100 and 0 < kept < 100
    assert (f"losswatch: the spool {path} is full ({os.path.getsize(path)} bytes, spool_max_bytes): "
            f"{100 - kept} points were dropped; they are lost unless the service comes back") in caplog.text


def nan_run(watcher: Watcher, stop_when, until: int = 3000) -> int:
    """Train on a curve that turns NaN at step 400; returns the step training stopped at."""
    for step in range(until):
        watcher.log(step, loss=loss(step) if step < 400 else float("nan"))
        if stop_when():
            return step
        time.sleep(0.005)
    return until


def test_guard_stop_on_a_run_that_turns_nan(shared, spool_dir):
    server = shared
    seen = []
    watcher = Watcher(server.url, "nan/stop", guard="stop", spool_dir=spool_dir, flush_interval=0.1)
    watcher.on_alert(seen.append)
    stopped_at = nan_run(watcher, lambda: watcher.should_stop)
    watcher.close()
    assert 400 <= stopped_at < 3000
    decision = watcher.decision
    assert decision.alert.kind == "nonfinite" and decision.alert.severity == "critical"
    assert decision.step == 400 and decision.logged_step <= stopped_at
    [stored] = [a for a in server.get("/v1/runs/nan%2Fstop/alerts").json() if a["kind"] == "nonfinite"]
    assert decision.alert_id == stored["id"]
    assert [c.id for c in seen if c.kind == "nonfinite"] == [stored["id"]]
    assert watcher.alerts[-1].id == stored["id"]
    assert decision.describe().startswith(f"stopping training: FIRING critical nonfinite (alert {stored['id']}, step 400): ")


def test_guard_raise_with_the_analysis_deferred_to_the_background(db, spool_dir):
    # a 3 s analysis interval: most posts are answered "deferred" and the watcher reads the alerts itself
    with serving(db, "--analysis-interval", "3") as server:
        watcher = Watcher(server.url, "nan/raise", guard="raise", spool_dir=spool_dir, flush_interval=0.1)
        with pytest.raises(LossAlert) as raised:
            nan_run(watcher, lambda: False)
        watcher.close()
        assert raised.value.decision.alert.kind == "nonfinite"
        assert str(raised.value).startswith(f"raising LossAlert: FIRING critical nonfinite (alert {raised.value.decision.alert_id}")


def test_guard_warn_only_logs_and_fast_spikes_never_stop(shared, spool_dir, caplog):
    with caplog.at_level(logging.WARNING, "losswatch_client"):
        server = shared
        watcher = Watcher(server.url, "nan/warn", spool_dir=spool_dir, flush_interval=0.1)
        nan_run(watcher, lambda: watcher.decision is not None)
        watcher.close()
    assert not watcher.should_stop
    assert f"losswatch: would stop training: FIRING critical nonfinite (alert {watcher.decision.alert_id}, step 400)" in caplog.text
    spike = {"change": "firing", "state": "firing", "step": 10,
             "alert": {"id": "1", "kind": "loss_spike", "classification": "fast_recovering", "severity": "critical"}}
    from losswatch_client.alerts import Guard, changes_from_response

    assert Guard("stop").consider(changes_from_response({"alerts": [spike]}), 12) is None
    spike["alert"]["classification"] = "divergent"
    assert Guard("stop").consider(changes_from_response({"alerts": [spike]}), 12).alert_id == "1"


def test_a_write_token_from_the_environment(locked, spool_dir, monkeypatch):
    server, token = locked, TOKEN
    monkeypatch.setenv("LOSSWATCH_URL", server.url)
    monkeypatch.setenv("LOSSWATCH_RUN", "from-env")
    monkeypatch.setenv("LOSSWATCH_TOKEN", token)
    with Watcher(spool_dir=spool_dir) as watcher:
        watcher.log_dict(0, {"train/loss": 1.5, "learning_rate": float("inf")})
    assert server.get("/v1/runs/from-env/series", token, tag="train/loss").json()["points"] == [[0, 1.5]]
    assert server.get("/v1/runs/from-env/series", token, tag="learning_rate").json()["points"] == [[0, "Infinity"]]


def test_a_wrong_token_keeps_the_points_and_says_why(locked, spool_dir, caplog):
    with caplog.at_level(logging.WARNING, "losswatch_client"):
        server = locked
        watcher = Watcher(server.url, "locked", "x" * 32, spool_dir=spool_dir, close_timeout=3)
        watcher.log(0, loss=1.0)
        assert not watcher.flush(timeout=5)
        watcher.close()
        assert watcher.dropped == 0
    assert (f"losswatch: the service answered HTTP 401: unknown token; keeping the points in {watcher._spool_path} "
            "and retrying") in caplog.text


def test_only_rank_zero_posts_and_a_missing_url_never_stops_training(monkeypatch, caplog, spool_dir):
    monkeypatch.setenv("RANK", "1")
    other = Watcher("http://127.0.0.1:9", "ranked", spool_dir=spool_dir)
    other.log(0, loss=1.0)
    assert not other._active and not other._queue and not os.path.exists(spool_dir)
    monkeypatch.delenv("LOSSWATCH_URL", raising=False)
    with caplog.at_level(logging.WARNING, "losswatch_client"):
        nowhere = Watcher(run="r")
        nowhere.log(0, loss=1.0)
        nowhere.close()
    assert "losswatch: no URL (url= or LOSSWATCH_URL) given: nothing will be posted" in caplog.text


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_a_forked_child_posts_nothing_and_the_parent_everything(shared, spool_dir):
    server = shared
    watcher = Watcher(server.url, "forked", spool_dir=spool_dir)
    for step in range(100):
        watcher.log(step, loss=float(step))
    child = os.fork()  # a DataLoader worker, with the parent's queue in its copy
    if child == 0:
        watcher.log(1000, loss=1.0)
        watcher.close()
        os._exit(0)
    assert os.waitpid(child, 0)[1] == 0
    for step in range(100, 200):
        watcher.log(step, loss=float(step))
    watcher.close()
    assert server.series("forked", "loss") == [[s, float(s)] for s in range(200)]


def test_close_keeps_what_the_thread_could_not_send_in_time(db, spool_dir):
    with serving(db, start=False) as server:
        watcher = Watcher(server.url, "slow-close", spool_dir=spool_dir, flush_interval=3600, timeout=1)
        hold = threading.Event()

        def hung(run: str, body: bytes):
            hold.wait(30)
            raise Unreachable("timed out")

        watcher._transport.post_points = hung
        watcher.log(0, loss=1.0)
        watcher._wake.set()
        wait_for(lambda: watcher._taken)
        for step in range(1, 100):
            watcher.log(step, loss=1.0)
        watcher.close(timeout=0.5)
        hold.set()
        with open(watcher._spool_path) as spooled:
            assert [int(line.split('"step": ')[1].split(",")[0]) for line in spooled] == list(range(100))


def test_the_client_runs_on_python_3_9(tmp_path):
    """The client promises Python 3.9 (training images lag behind): import it and spool there."""
    python = _python_3_9()
    if python is None:
        pytest.skip("no Python 3.9 here (python3.9 on PATH, pyenv): the client's 3.9 support is not checked")
    script = (
        "import os, sys\n"
        "from losswatch_client import Watcher\n"
        "w = Watcher('http://127.0.0.1:9', 'py39', spool_dir=sys.argv[1], timeout=0.5, close_timeout=2)\n"
        "for s in range(100): w.log(s, loss=float(s), grad_norm=float('nan'))\n"
        "w.close()\n"
        "print(sum(1 for _ in open(os.path.join(sys.argv[1], os.listdir(sys.argv[1])[0]))))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.path.join(os.getcwd(), "client")}
    done = subprocess.run([python, "-c", script, str(tmp_path)], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "200"


def _python_3_9() -> str | None:
    import glob
    import shutil

    found = [shutil.which("python3.9"), *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.9*/bin/python3.9")))]
    for python in filter(None, found):
        if subprocess.run([python, "-c", "import sys; assert sys.version_info[:2] == (3, 9)"], capture_output=True).returncode == 0:
            return python
    return None

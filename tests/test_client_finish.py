"""A job that ends well marks its run finished; one that dies must not (against a real
`losswatch serve`): the stale alert exists for exactly the run whose job crashed."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
from losswatch_client import Watcher

from tests.client_server import serving


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serving(f"sqlite:///{tmp_path_factory.mktemp('finish') / 'store.db'}") as running:
        yield running


@pytest.fixture
def spool_dir(tmp_path) -> str:
    return str(tmp_path / "spool")


def status(server, run: str) -> str:
    listed = {r["name"]: r for r in server.get("/v1/runs").json() if r["source"] == "http"}
    return listed[run]["status"]


def train(watcher: Watcher, steps: int = 50, start: int = 0) -> None:
    for step in range(start, start + steps):
        watcher.log(step, loss=1.0 / (step + 1))


def test_a_clean_with_block_marks_the_run_finished(server, spool_dir):
    with Watcher(server.url, "finish/clean", spool_dir=spool_dir) as watcher:
        train(watcher)
    assert status(server, "finish/clean") == "finished"
    assert server.get("/v1/runs/finish%2Fclean").json()["points"] == 50


def test_an_exception_in_the_with_block_leaves_the_run_running(server, spool_dir):
    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        with Watcher(server.url, "finish/crash", spool_dir=spool_dir) as watcher:
            train(watcher)
            raise RuntimeError("CUDA out of memory")
    assert server.get("/v1/runs/finish%2Fcrash").json()["points"] == 50  # flushed all the same
    assert status(server, "finish/crash") == "running"


def test_interpreter_exit_flushes_but_does_not_finish(server, spool_dir):
    script = (
        "import sys\n"
        "from losswatch_client import Watcher\n"
        "w = Watcher(sys.argv[1], 'finish/atexit', spool_dir=sys.argv[2], flush_interval=60)\n"
        "for s in range(30): w.log(s, loss=1.0 / (s + 1))\n"
        "sys.exit(3)\n"  # never closed: atexit sends the points, and must not call the run finished
    )
    env = {**os.environ, "PYTHONPATH": os.path.join(os.getcwd(), "client")}
    done = subprocess.run([sys.executable, "-c", script, server.url, spool_dir], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 3, done.stderr
    assert server.get("/v1/runs/finish%2Fatexit").json()["points"] == 30
    assert status(server, "finish/atexit") == "running"


def test_close_finished_false_and_finish_on_close_false_leave_it_running(server, spool_dir):
    explicit = Watcher(server.url, "finish/explicit", spool_dir=spool_dir)
    train(explicit)
    explicit.close(finished=False)
    with Watcher(server.url, "finish/never", spool_dir=spool_dir, finish_on_close=False) as never:
        train(never)
    assert status(server, "finish/explicit") == "running"
    assert status(server, "finish/never") == "running"


def test_finish_keeps_the_watcher_open_and_a_later_point_unfinishes(server, spool_dir):
    watcher = Watcher(server.url, "finish/twice", spool_dir=spool_dir)
    train(watcher)
    assert watcher.finish() is True
    assert status(server, "finish/twice") == "finished"
    train(watcher, 10, start=50)  # a second trainer.train(): the run is running again
    assert watcher.flush()
    assert status(server, "finish/twice") == "running"
    watcher.close()
    assert status(server, "finish/twice") == "finished"
    assert server.get("/v1/runs/finish%2Ftwice").json()["points"] == 60


def test_a_watcher_that_never_posted_finishes_nothing_and_says_nothing(server, spool_dir, caplog):
    with caplog.at_level(logging.WARNING, "losswatch_client"):
        with Watcher(server.url, "finish/empty", spool_dir=spool_dir):
            pass
    assert caplog.text == ""
    assert "finish/empty" not in {r["name"] for r in server.get("/v1/runs").json()}


def test_points_left_in_the_spool_leave_the_run_unfinished_and_say_so(tmp_path, spool_dir, caplog):
    with serving(f"sqlite:///{tmp_path / 'store.db'}") as down, caplog.at_level(logging.WARNING, "losswatch_client"):
        watcher = Watcher(down.url, "finish/spooled", spool_dir=spool_dir, flush_interval=0.1, timeout=1)
        train(watcher, 10)
        assert watcher.flush()
        down.stop()
        train(watcher, 10, start=10)
        watcher.close(timeout=3)
    assert ("losswatch: run 'finish/spooled' is not marked finished: some of its points are not delivered yet; "
            "a stale alert fires if it stays silent") in caplog.text

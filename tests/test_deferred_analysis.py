"""The background loop's deferred analyses (app/service/background.py): each worker claims
a batch of the runs that have waited an interval before analysing it, so two workers
analyse each run once, and a claim that is never applied (its worker died) is taken again
after the interval."""

from __future__ import annotations

import asyncio
import threading

import httpx

from app import updates
from app.service.background import Background
from app.service.ingest import ingest_json
from app.service.metrics import Metrics
from app.service.settings import Settings
from app.store import runs as stored_runs
from tests.test_append_groups import body

SETTINGS = Settings(analysis_interval=2.0)


def waiting_runs(store, names: list[str], now: float = 1000.0) -> None:
    """Runs whose second post's analysis is deferred (the first one's was done inline)."""
    for name in names:
        assert ingest_json(store, name, body(0, 5), False, False, SETTINGS, now).analysis == "done"
        assert ingest_json(store, name, body(5, 5), False, False, SETTINGS, now + 1).analysis == "deferred"


def claim(store, now: float, limit: int = 10) -> list[str]:
    with store.write() as conn:
        return [r.name for r in stored_runs.claim_dirty_runs(conn, now - SETTINGS.analysis_interval, now, limit)]


def test_claims_are_disjoint_and_one_never_applied_is_claimed_again_after_the_interval(store):
    waiting_runs(store, ["a", "b", "c", "d", "e"])  # waiting since 1001
    assert claim(store, 1002.5) == []  # not for an interval yet: left to their own posts' answers
    assert claim(store, 1003.0, limit=3) == ["a", "b", "c"]  # oldest waiting first, in name order
    assert claim(store, 1003.0) == ["d", "e"]  # another worker's claim: the rest
    assert claim(store, 1004.0) == []
    assert claim(store, 1005.0) == ["a", "b", "c", "d", "e"]  # no analysis applied: they wait again


def background(store, clock) -> Background:
    async def make() -> Background:
        return Background(store, SETTINGS, Metrics(store), httpx.Client(), clock=clock)

    return asyncio.run(make())


def test_two_workers_loops_analyse_each_waiting_run_once(store, monkeypatch):
    """Worker A's loop is held inside its first analysis while worker B's runs a round: B
    finds nothing of A's batch to do, and each run is analysed once in all."""
    names = [f"run-{i}" for i in range(6)]
    waiting_runs(store, names)
    analysed, holding, release = [], threading.Event(), threading.Event()
    assessed = updates._assessed

    def counted(conn, run, *args):
        analysed.append((threading.current_thread().name, run.name))
        if threading.current_thread().name == "A":
            holding.set()
            release.wait(10)
        return assessed(conn, run, *args)

    monkeypatch.setattr(updates, "_assessed", counted)
    worker_a, worker_b = background(store, lambda: 1003.0), background(store, lambda: 1003.0)
    a = threading.Thread(target=worker_a.analyse_deferred, name="A")
    a.start()
    assert holding.wait(10)
    worker_b.analyse_deferred()
    release.set()
    a.join(10)
    assert sorted(name for _, name in analysed) == names
    assert {worker for worker, _ in analysed} == {"A"}  # one batch: B found every run claimed
    assert claim(store, 2000.0) == []  # every analysis applied: nothing waits

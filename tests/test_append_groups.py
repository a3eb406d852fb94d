"""Group commit (app/service/append_groups.py): small posts arriving at a worker together are
written in one transaction, each answered as if posted alone and only once committed; a post
that fails fails alone; a run's posts keep their order."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from app.ingest.problems import IngestError
from app.service import append_groups, ingest
from app.service.append_groups import AppendGroups
from app.service.errors import ApiError
from app.service.ingest import PostedPoints, analyse_written, ingest_json, ingest_json_group, write_json_group
from app.service.settings import Settings
from app.store import runs as stored_runs
from app.store.db import open_store
from bench.statements import counting

DEFERRED = Settings(analysis_interval=3600.0)


def body(first: int, steps: int, tags: tuple[str, ...] = ("loss", "grad_norm")) -> bytes:
    return json.dumps({"points": [{"step": s, "tag": t, "value": 3.0 - s / 1000} for s in range(first, first + steps)
                                  for t in tags]}).encode()


def posted(run: str, first: int, steps: int = 5, now: float = 1001.0) -> PostedPoints:
    return PostedPoints(run, body(first, steps), False, False, now)


def stored_points(store, run: str) -> dict[str, list[int]]:
    with store.read() as conn:
        (found,) = stored_runs.find_runs(conn, run, "http")
        writes = stored_runs.load_writes(conn, found.id)
    return {tag: w.step.tolist() for tag, w in writes.items()}


def test_a_group_stores_each_post_and_answers_each_as_alone(store):
    ingest_json(store, "a", body(0, 10), False, False, DEFERRED, 1000.0)
    answers = ingest_json_group(store, [posted("a", 8), posted("b", 0), posted("c", 0, steps=0)], DEFERRED)
    assert [(a.accepted, a.duplicates) for a in answers] == [(6, 4), (10, 0), (0, 0)]
    assert stored_points(store, "a") == {"loss": list(range(13)), "grad_norm": list(range(13))}
    assert stored_points(store, "b") == {"loss": list(range(5)), "grad_norm": list(range(5))}
    again = ingest_json_group(store, [posted("a", 8), posted("b", 0)], DEFERRED)  # a retry stores nothing twice
    assert [(a.accepted, a.duplicates) for a in again] == [(0, 10), (0, 10)]


def test_a_group_costs_the_statements_of_one_append(pg_url):
    store = open_store(pg_url)
    try:
        runs = [f"r{i}" for i in range(16)]
        ingest_json_group(store, [posted(r, 0) for r in runs], DEFERRED)
        with counting(store.engine) as one:
            ingest_json(store, "r0", body(5, 5), False, False, DEFERRED, 1002.0)
        with counting(store.engine) as group:
            answers = ingest_json_group(store, [posted(r, 10) for r in runs], DEFERRED)
        assert all(a.accepted == 10 for a in answers)
        assert len(group) == len(one), "\n".join(group)
    finally:
        store.close()


def test_a_post_refused_in_a_group_fails_alone(store):
    bad = PostedPoints("bad", b'{"points": [{"step": 1, "tag": "loss"}]}', False, True, 1001.0)
    answers = ingest_json_group(store, [posted("a", 0), bad, posted("b", 0)], DEFERRED)
    assert isinstance(answers[1], (ApiError, IngestError))
    assert answers[0].accepted == answers[2].accepted == 10
    assert stored_points(store, "b") == {"loss": list(range(5)), "grad_norm": list(range(5))}


def test_a_post_failing_inside_the_group_transaction_fails_alone(store, monkeypatch):
    triage = ingest._triage

    def failing(conn, run, points):
        if run.name == "bad":
            raise RuntimeError("this run's append fails")
        return triage(conn, run, points)

    monkeypatch.setattr(ingest, "_triage", failing)
    answers = ingest_json_group(store, [posted("a", 0), posted("bad", 0), posted("b", 0)], DEFERRED)
    assert isinstance(answers[1], RuntimeError)
    assert answers[0].accepted == answers[2].accepted == 10
    assert stored_points(store, "a") == stored_points(store, "b") == {"loss": list(range(5)), "grad_norm": list(range(5))}


@pytest.mark.parametrize("interval", [3600.0, 0.0])  # analyses deferred, or every post's after its group's commit
def test_posts_are_answered_once_committed_and_keep_their_run_order(store, interval):
    async def main() -> list:
        groups = AppendGroups(store, Settings(analysis_interval=interval))
        seen = []

        async def post(run: str, first: int, value: float) -> None:
            records = [{"step": first, "tag": "loss", "value": value}]
            answer = await groups.post(PostedPoints(run, json.dumps(records).encode(), False, False, 1001.0))
            seen.append((run, first, stored_points(store, run)["loss"], answer.analysis))  # committed: another connection reads it

        try:
            # The same step of one run posted twice with different values: the later wins
            # only if the two are stored in the order they were posted.
            await asyncio.gather(*(post(f"r{i % 4}", i // 4, float(i)) for i in range(40)), post("r0", 9, 99.0))
        finally:
            groups.close()
        return seen

    seen = asyncio.run(main())
    analysed = sum(analysis == "done" for _, _, _, analysis in seen)
    assert len(seen) == 41 and {analysis for _, _, _, analysis in seen} <= {"done", "deferred"}
    if interval:
        assert analysed == 4  # each run's first post only
    else:  # every post due: as many analysed as groups written, one at a time, the others deferred
        assert 4 <= analysed < 41
    assert all(first in steps for _, first, steps, _ in seen)
    with store.read() as conn:
        (run,) = stored_runs.find_runs(conn, "r0", "http")
        writes = stored_runs.load_writes(conn, run.id)["loss"]
    assert writes.step.tolist()[-2:] == [9, 9] and writes.value.tolist()[-1] == 99.0


def test_an_analysis_failing_after_the_commit_fails_its_post_alone(store, monkeypatch):
    analyze_now = ingest.analyze_now

    def failing(store, run, *args):
        if run.name == "bad":
            raise RuntimeError("this run's analysis fails")
        return analyze_now(store, run, *args)

    monkeypatch.setattr(ingest, "_analysed_with_append", lambda *args: False)  # every analysis after the commit
    monkeypatch.setattr(ingest, "analyze_now", failing)
    answers = ingest_json_group(store, [posted("a", 0), posted("bad", 0)], Settings(analysis_interval=0.0))
    assert isinstance(answers[1], RuntimeError)
    assert answers[0].accepted == 10 and answers[0].analysis == "done"
    assert stored_points(store, "bad") == {"loss": list(range(5)), "grad_norm": list(range(5))}  # stored all the same


def test_a_post_is_not_held_up_by_the_analysis_due_with_another(store, monkeypatch):
    ingest_json(store, "a", body(0, 5), False, False, DEFERRED, 1000.0)  # analysed at 1000: not due again at 1001
    analysed = []
    analyze_locked = ingest.analyze_locked

    def analysing(conn, run, *args):
        analysed.append(run.name)
        return analyze_locked(conn, run, *args)

    monkeypatch.setattr(ingest, "analyze_locked", analysing)
    posts, settings = [posted("a", 5), posted("b", 0)], Settings(analysis_interval=10.0)
    written = write_json_group(store, posts, settings)
    assert written.waiting == {1} and analysed == []  # "a" is answered at the commit
    assert written.answers[0].accepted == 10 and written.answers[0].analysis == "deferred"
    analyse_written(store, posts, written, settings)
    assert analysed == ["b"] and written.answers[1].analysis == "done"
    with store.read() as conn:
        (b,) = stored_runs.find_runs(conn, "b", "http")
    assert b.analyzed_points == 10


def test_of_a_groups_posts_due_only_the_first_waits_for_its_analysis(store):
    posts, settings = [posted("a", 0), posted("b", 0), posted("c", 0)], Settings(analysis_interval=0.0)
    written = write_json_group(store, posts, settings).deferring(1)
    assert written.waiting == {0}
    assert [a.analysis for a in written.answers] == ["none", "deferred", "deferred"]
    analyse_written(store, posts, written, settings)
    assert written.answers[0].analysis == "done"
    with store.write() as conn:  # the others wait for the background analysis
        assert [r.name for r in stored_runs.claim_dirty_runs(conn, 1001.0, 1001.0, 10)] == ["b", "c"]


def test_one_analysis_at_most_is_in_flight_and_no_answer_waits_for_another_runs(store, monkeypatch):
    """While a group's analysis runs, the due posts of the groups written meanwhile are
    answered deferred: a slow analysis holds up its own post alone."""
    hold_writer, writing, hold_analysis, analysing = (threading.Event() for _ in range(4))
    write, analyse = append_groups.write_json_group, append_groups.analyse_written

    def slow_write(store, posts, *args):
        if posts[0].run == "w":
            writing.set()
            hold_writer.wait(10)
        return write(store, posts, *args)

    def slow_analysis(store, posts, written, *args):
        if any(posts[i].run == "slow" for i in written.waiting):
            analysing.set()
            hold_analysis.wait(10)  # before its transaction: SQLite's write lock would hold up the writer
        return analyse(store, posts, written, *args)

    monkeypatch.setattr(append_groups, "write_json_group", slow_write)
    monkeypatch.setattr(append_groups, "analyse_written", slow_analysis)

    async def main() -> dict[str, str]:
        groups, loop = AppendGroups(store, Settings(analysis_interval=0.0)), asyncio.get_running_loop()
        post = {}
        try:
            post["w"] = asyncio.ensure_future(groups.post(posted("w", 0)))  # a group alone, held while written
            await loop.run_in_executor(None, writing.wait, 10)
            for run in ("slow", "y"):  # they wait, and go as the next group
                post[run] = asyncio.ensure_future(groups.post(posted(run, 0)))
            await asyncio.sleep(0)
            hold_writer.set()
            await loop.run_in_executor(None, analysing.wait, 10)  # "slow" analysed after its group's commit
            for run in ("p", "q"):  # written while that analysis runs
                post[run] = asyncio.ensure_future(groups.post(posted(run, 0)))
            await asyncio.gather(post["w"], post["y"], post["p"], post["q"])
            assert not post["slow"].done()
            hold_analysis.set()
            return {run: (await answer).analysis for run, answer in post.items()}
        finally:
            hold_writer.set()
            hold_analysis.set()
            groups.close()

    assert asyncio.run(main()) == {"w": "done", "slow": "done", "y": "deferred", "p": "deferred", "q": "deferred"}
    with store.write() as conn:
        assert {r.name for r in stored_runs.claim_dirty_runs(conn, 1001.0, 1001.0, 10)} == {"y", "p", "q"}

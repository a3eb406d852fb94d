"""A small append to a run costs a few statements on PostgreSQL, whatever the run holds: the
run's row locked and read in one, its tags and their last chunks in one, the chunks, their
summaries and the run's row written in one each (issue 11: about 20 round trips before)."""

from __future__ import annotations

import json

import pytest

from app.service.ingest import ingest_json
from app.service.settings import Settings
from app.store.db import open_store
from bench.statements import counting

APPEND_BOUND = 5  # statements of a small append whose analysis is deferred (transaction control aside)
DEFERRED = Settings(analysis_interval=3600.0)


def body(first: int, steps: int, tags: tuple[str, ...]) -> bytes:
    lines = [{"step": s, "tag": t, "value": 3.0 - s / 1000} for s in range(first, first + steps) for t in tags]
    return "\n".join(json.dumps(line) for line in lines).encode()


@pytest.fixture
def pg_store(pg_url):
    store = open_store(pg_url)
    yield store
    store.close()


def append(store, run: str, first: int, steps: int, tags: tuple[str, ...], now: float) -> list[str]:
    with counting(store.engine) as sent:
        result = ingest_json(store, run, body(first, steps, tags), ndjson=True, strict=True, settings=DEFERRED, now=now)
    assert result.accepted == steps * len(tags), result
    return sent


def test_a_small_append_to_a_run_is_a_few_statements(pg_store):
    tags = ("train/loss", "train/grad_norm")
    append(pg_store, "r", 0, 100, tags, now=1000.0)  # created and analysed
    sent = append(pg_store, "r", 100, 5, tags, now=1001.0)
    assert len(sent) <= APPEND_BOUND, "\n".join(sent)


def test_an_append_that_grows_eight_tags_costs_no_more_statements_than_one_tag(pg_store):
    tags = tuple(f"t{i}" for i in range(8))
    append(pg_store, "r", 0, 100, tags, now=1000.0)
    one = append(pg_store, "r", 100, 10, tags[:1], now=1001.0)
    eight = append(pg_store, "r", 110, 10, tags, now=1002.0)
    assert len(eight) == len(one) <= APPEND_BOUND, "\n".join(eight)


def test_an_append_bringing_a_new_tag_adds_three_statements(pg_store):
    append(pg_store, "r", 0, 100, ("train/loss",), now=1000.0)
    sent = append(pg_store, "r", 100, 5, ("train/loss", "eval/loss"), now=1001.0)
    assert len(sent) <= APPEND_BOUND + 3, "\n".join(sent)  # its row, its first chunk and that chunk's summary


ANALYSED_BOUND = 11  # statements of a small append analysed inline, in its own transaction


def test_a_small_append_analysed_inline_is_one_transaction_of_few_statements(pg_store):
    tags = ("train/loss", "train/grad_norm")
    append(pg_store, "r", 0, 100, tags, now=1000.0)  # created and analysed
    append(pg_store, "r", 100, 5, tags, now=1001.0)  # deferred: waits for the next analysis
    with counting(pg_store.engine) as sent:
        result = ingest_json(pg_store, "r", body(105, 5, tags), ndjson=True, strict=True,
                             settings=Settings(analysis_interval=0.0), now=1002.0)
    assert result.analysis == "done", result
    assert len(sent) <= ANALYSED_BOUND, "\n".join(sent)
    assert sum(s.startswith("INSERT INTO runs") for s in sent) == 1, "the run was locked more than once"

"""Hypothesis over names and values against the real app, on SQLite and PostgreSQL: whatever
a client sends, the answer is never a 5xx, a good name reads back as it was written, and
whatever was stored reads back as a series."""

from __future__ import annotations

import gzip
import json
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.ingest.names import name_problem
from tests.service_helpers import service

FUZZ = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

any_text = st.text(st.characters(exclude_categories=()), min_size=1, max_size=40)  # NUL, C1, lone surrogates ...
long_text = st.text(st.characters(exclude_categories=()), min_size=500, max_size=600)
names_in_bodies = st.text(st.characters(exclude_categories=()), min_size=1, max_size=12)


@pytest.fixture
def client(store_url):
    with service(store_url) as c:
        yield c


def in_url(name: str) -> str:
    """`name` as one percent-encoded path segment (a lone surrogate as its UTF-8-like bytes,
    which the service must refuse as not UTF-8)."""
    return quote(name.encode("utf-8", "surrogatepass"), safe="").replace(".", "%2E")


@pytest.mark.parametrize("name", ["%00", "%41", "a%2Fb", "%", "100%"])
def test_a_name_holding_percent_escapes_is_stored_as_it_is_not_decoded_again(client, name):
    r = client.post(f"/v1/runs/{in_url(name)}/points", json=[{"step": 1, "loss": 1.0}])
    assert r.status_code == 200 and r.json()["run"] == name
    assert client.get(f"/v1/runs/{in_url(name)}/series", params={"tag": "loss"}).json()["run"] == name


@FUZZ
@given(name=any_text | long_text)
def test_any_run_name_is_stored_and_read_back_or_refused_with_a_4xx(client, name):
    r = client.post(f"/v1/runs/{in_url(name)}/points", json=[{"step": 1, "loss": 1.0}])
    assert r.status_code < 500, r.text
    if name_problem(name) is not None:
        if r.status_code == 404:  # a line break: no route's pattern matches across it
            assert "\n" in name
            return
        assert r.status_code in (400, 422)
        assert r.json()["error"]["code"] in ("invalid_name", "invalid_url")
        return
    assert r.status_code == 200 and r.json()["run"] == name
    if not name.endswith(("/series", "/alerts")):  # those two suffixes route elsewhere (issue 9, item 13)
        back = client.get(f"/v1/runs/{in_url(name)}")
        assert back.status_code == 200 and back.json()["name"] == name
        series = client.get(f"/v1/runs/{in_url(name)}/series", params={"tag": "loss"})
        assert series.json()["points"] == [[1, 1.0]]


@FUZZ
@given(tag=any_text | long_text, source=st.none() | any_text, start=st.integers(-(2**64), 2**64), end=st.integers(-(2**64), 2**64))
def test_any_series_query_gets_an_answer_not_a_server_error(client, tag, source, start, end):
    params = {"tag": tag, "start": start, "end": end, **({"source": source} if source is not None else {})}
    query = "&".join(f"{k}={quote(str(v).encode('utf-8', 'surrogatepass'), safe='')}" for k, v in params.items())
    r = client.get(f"/v1/runs/anything/series?{query}")
    assert r.status_code < 500, r.text


numbers = st.one_of(
    st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["NaN", "-inf", "1e400", "12", "x"]),
)
values = st.one_of(numbers, st.none(), st.booleans(), st.lists(numbers, max_size=2), st.dictionaries(names_in_bodies, numbers, max_size=2))
row = st.dictionaries(st.sampled_from(["step", "loss", "grad_norm", "tag", "value", "wall_time", "run", "epoch"]) | names_in_bodies, values, max_size=5)


@FUZZ
@given(rows=st.lists(row, min_size=1, max_size=6), ndjson=st.booleans(), zipped=st.booleans())
def test_any_values_get_an_answer_and_what_was_stored_reads_back(client, rows, ndjson, zipped):
    if ndjson:
        body, kind = "\n".join(json.dumps(r) for r in rows).encode(), "application/x-ndjson"
    else:
        body, kind = json.dumps(rows).encode(), "application/json"
    headers = {"Content-Type": kind, **({"Content-Encoding": "gzip"} if zipped else {})}
    r = client.post("/v1/runs/fuzzed/points", content=gzip.compress(body) if zipped else body, headers=headers)
    assert r.status_code < 500, r.text
    assert r.status_code in (200, 400, 422), r.text
    if r.status_code != 200 or not (r.json()["accepted"] or r.json()["duplicates"]):
        return  # refused, or nothing to store (rows with a step and no metric)
    for tag in client.get("/v1/runs/fuzzed").json()["tags"]:
        series = client.get("/v1/runs/fuzzed/series", params={"tag": tag["tag"]})
        assert series.status_code == 200, series.text
        assert series.json()["total"] >= 1


def test_a_lone_surrogate_in_a_tag_is_not_a_server_error(client):
    r = client.post("/v1/runs/p/points", content=b'[{"step": 1, "\\ud800": 1.0}, {"step": 1, "loss": 1.0}]',
                    headers={"Content-Type": "application/json"})
    assert r.status_code == 200 and r.json()["accepted"] == 1


def test_nul_in_a_tag_on_postgresql_is_not_a_server_error(pg_url):
    with service(pg_url) as client:
        r = client.post("/v1/runs/p/points", json=[{"step": 1, "a\x00b": 1.0}, {"step": 1, "loss": 1.0}])
        assert r.status_code == 200 and r.json()["accepted"] == 1

"""Posting points and event-file bytes: what is accepted, rejected, deduplicated, and how
it answers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.eventfiles import file_version, record, scalar_event
from tests.service_helpers import service


@pytest.fixture
def client(store_url):
    with service(store_url) as c:
        yield c


def points(steps, tag="train/loss", value=lambda s: 2.0):
    return {"points": [{"step": s, "tag": tag, "value": value(s)} for s in steps]}


def test_canonical_points_are_stored_and_analysed(client):
    body = points(range(1000), value=lambda s: 7.0 if s == 500 else 2.0 + 3 * np.exp(-s / 200))
    r = client.post("/v1/runs/exp1/points", json=body)
    assert r.status_code == 200
    out = r.json()
    assert (out["run"], out["accepted"], out["duplicates"], out["rejected"], out["analysis"]) == ("exp1", 1000, 0, [], "done")
    spike = [a for a in out["alerts"] if a["alert"]["kind"] == "loss_spike"]
    assert [a["change"] for a in spike] == ["firing", "resolved"]
    assert spike[0]["alert"]["start_step"] == 500


def test_ndjson_and_wide_rows(client):
    ndjson = "\n".join(json.dumps({"step": s, "tag": "loss", "value": 1.5}) for s in range(5))
    r = client.post("/v1/runs/a/points", content=ndjson, headers={"Content-Type": "application/x-ndjson"})
    assert r.json()["accepted"] == 5
    r = client.post("/v1/runs/b/points", json=[{"step": 1, "loss": 2.3, "grad_norm": 0.8, "learning_rate": 3e-4}])
    assert r.json()["accepted"] == 3
    tags = {t["tag"]: t["role"] for t in client.get("/v1/runs/b").json()["tags"]}
    assert tags == {"grad_norm": "grad_norm", "learning_rate": "learning_rate", "loss": "loss"}


def test_bad_records_are_rejected_with_where_and_why_and_the_rest_kept(client):
    lines = [{"step": 1, "tag": "loss", "value": 2.0}, {"step": 2, "tag": "loss", "value": True}, {"step": -1, "tag": "loss", "value": 1.0}]
    body = "\n".join(json.dumps(x) for x in lines)
    r = client.post("/v1/runs/a/points", content=body, headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 200
    assert r.json()["accepted"] == 1
    assert r.json()["rejected"] == [
        {"reason": "value must be a number, got true", "line": 2, "json_path": "$.value", "offset": None, "points": None},
        {"reason": "step must be an integer from 0 to 9007199254740991, got -1", "line": 3, "json_path": "$.step", "offset": None, "points": None},
    ]
    strict = client.post("/v1/runs/a/points?strict=true", content=body, headers={"Content-Type": "application/x-ndjson"})
    assert strict.status_code == 422
    assert strict.json()["error"]["code"] == "invalid_input"


def test_a_body_naming_another_run_is_rejected(client):
    r = client.post("/v1/runs/a/points", json={"run": "b", "points": [{"step": 1, "tag": "loss", "value": 1.0}]})
    assert r.status_code == 422
    assert r.json()["error"] == {
        "code": "invalid_input", "message": "every record was rejected: nothing was stored",
        "details": [{"reason": "run 'b' is not this URL's run 'a'", "points": 1}],
    }


def test_invalid_json_is_rejected_with_its_line(client):
    r = client.post("/v1/runs/a/points", content=b'{"points": [1,\n', headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    error = r.json()["error"]
    assert (error["code"], error["message"]) == ("unreadable_body", "the body cannot be read as JSON")
    assert error["details"][0]["reason"].startswith("invalid JSON:")
    assert error["details"][0]["line"] == 2


def test_appending_twice_stores_once_and_a_different_value_is_a_rewrite(client):
    client.post("/v1/runs/a/points", json=points(range(100)))
    again = client.post("/v1/runs/a/points", json=points(range(100))).json()
    assert (again["accepted"], again["duplicates"]) == (0, 100)
    rewrite = client.post("/v1/runs/a/points", json=points(range(50, 60), value=lambda s: 3.0)).json()
    assert (rewrite["accepted"], rewrite["duplicates"], rewrite["replaced"]) == (10, 0, 0)
    assert rewrite["rollbacks"] == [{"tags": ["train/loss"], "from_step": 99, "to_step": 50}]
    run = client.get("/v1/runs/a").json()
    assert run["points"] == 110
    assert [(r["from_step"], r["to_step"], r["tags"]) for r in run["rollbacks"]] == [(99, 50, ["train/loss"])]
    series = client.get("/v1/runs/a/series", params={"tag": "train/loss", "max_points": 1000}).json()
    assert [p for p in series["points"] if p[1] == 3.0] == [[s, 3.0] for s in range(50, 60)]
    assert series["total"] == 60  # 60..99 of the first write are orphaned by the rewrite


def test_nan_and_infinity_are_kept(client):
    body = {"points": [{"step": 1, "tag": "loss", "value": "NaN"}, {"step": 2, "tag": "loss", "value": "-Infinity"}]}
    assert client.post("/v1/runs/a/points", json=body).json()["accepted"] == 2
    series = client.get("/v1/runs/a/series", params={"tag": "loss"}).json()
    assert series["points"] == [[1, "NaN"], [2, "-Infinity"]]


def test_limits(store_url):
    with service(store_url, max_body_bytes=1000, max_points_per_request=5) as c:
        big = c.post("/v1/runs/a/points", content=b"x" * 2000, headers={"Content-Type": "application/json"})
        assert big.status_code == 413
        assert big.json()["error"] == {"code": "body_too_large", "message": "the body is 2000 bytes; the limit is 1000"}
        many = c.post("/v1/runs/a/points", json=points(range(6)))
        assert many.status_code == 413
        assert many.json()["error"]["message"] == "6 points in one request; the limit is 5"


def test_deeply_nested_json_is_rejected_not_crashed(client):
    deep = '{"step": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    r = client.post("/v1/runs/a/points", content=deep, headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    assert r.json()["error"]["details"] == [{"reason": "invalid JSON: nested too deeply"}]


def event_bytes(steps, tag="train/loss") -> bytes:
    return b"".join(record(scalar_event(s, tag, 2.0)) for s in steps)


def test_event_file_chunks_append_and_resends_store_nothing_twice(client):
    head = record(file_version()) + event_bytes(range(100))
    first = client.post("/v1/runs/tb/events", params={"file": "events.out.tfevents.1"}, content=head).json()
    assert (first["accepted"], first["next_offset"], first["end"]) == (100, len(head), "complete")
    tail = event_bytes(range(100, 150))
    second = client.post("/v1/runs/tb/events", params={"file": "events.out.tfevents.1", "offset": len(head)}, content=tail).json()
    assert second["accepted"] == 50
    resent = client.post("/v1/runs/tb/events", params={"file": "events.out.tfevents.1", "offset": len(head)}, content=tail).json()
    assert resent["accepted"] == 0 and resent["next_offset"] == len(head) + len(tail)
    assert client.get("/v1/runs/tb").json()["points"] == 150


def test_a_chunk_cut_mid_record_is_taken_up_to_the_record_boundary(client):
    data = event_bytes(range(10))
    cut = len(data) - 7
    r = client.post("/v1/runs/tb/events", params={"file": "f"}, content=data[:cut]).json()
    assert r["accepted"] == 9 and r["end"] == "truncated"
    rest = client.post("/v1/runs/tb/events", params={"file": "f", "offset": r["next_offset"]}, content=data[r["next_offset"]:]).json()
    assert rest["accepted"] == 1 and rest["end"] == "complete"


def test_a_gap_is_refused_with_the_offset_expected(client):
    r = client.post("/v1/runs/tb/events", params={"file": "f", "offset": 100}, content=event_bytes(range(3)))
    assert r.status_code == 409
    assert r.json()["error"] == {
        "code": "offset_gap", "message": "this run's copy of f ends at byte 0: send the bytes from there",
        "details": {"expected_offset": 0},
    }


def test_a_corrupt_record_is_rejected_with_its_offset(client):
    size = len(event_bytes(range(1)))
    data = bytearray(event_bytes(range(3)))
    data[size + 20] ^= 0xFF  # inside the second record's payload
    r = client.post("/v1/runs/tb/events", params={"file": "f"}, content=bytes(data)).json()
    assert r["accepted"] == 2
    assert r["rejected"][0]["offset"] == size
    assert r["rejected"][0]["reason"].startswith("payload CRC mismatch")


def test_deferred_analysis_for_busy_runs(store_url):
    with service(store_url, analysis_interval=3600) as c:
        assert c.post("/v1/runs/a/points", json=points(range(10))).json()["analysis"] == "done"
        assert c.post("/v1/runs/a/points", json=points(range(10, 20))).json()["analysis"] == "deferred"


def steps_of(client, run, tag="train/loss"):
    series = client.get(f"/v1/runs/{run}/series", params={"tag": tag, "max_points": 1000}).json()
    return [(s, v) for s, v in series["points"]]


def test_a_late_point_is_kept_and_hides_nothing(client):
    client.post("/v1/runs/a/points", json=points([20], value=lambda s: 2.0))
    late = client.post("/v1/runs/a/points", json=points([10], value=lambda s: 2.5)).json()
    assert (late["accepted"], late["rollbacks"], late["replaced"]) == (1, [], 0)
    assert steps_of(client, "a") == [(10, 2.5), (20, 2.0)]


def test_a_retry_that_fills_a_gap_hides_nothing_after_it(client):
    client.post("/v1/runs/a/points", json=points([1, 2, 4, 5]))
    client.post("/v1/runs/a/points", json=points([3]))
    assert [s for s, _ in steps_of(client, "a")] == [1, 2, 3, 4, 5]
    assert client.get("/v1/runs/a").json()["rollbacks"] == []


def test_a_new_value_at_a_tags_last_step_replaces_it_and_touches_no_other_tag(client):
    client.post("/v1/runs/a/points", json=[{"step": s, "loss": 2.0, "grad_norm": 1.0} for s in range(1, 21)])
    fixed = client.post("/v1/runs/a/points", json=[{"step": 20, "grad_norm": 1.5}]).json()
    assert (fixed["accepted"], fixed["replaced"], fixed["rollbacks"]) == (1, 1, [])
    assert steps_of(client, "a", "grad_norm")[-1] == (20, 1.5)
    assert len(steps_of(client, "a", "grad_norm")) == 20
    assert len(steps_of(client, "a", "loss")) == 20


def test_a_rewrite_below_a_tags_last_step_rolls_back_that_tag_only(client):
    client.post("/v1/runs/a/points", json=[{"step": s, "loss": 2.0, "grad_norm": 1.0} for s in range(1, 21)])
    corrected = client.post("/v1/runs/a/points", json=[{"step": 10, "grad_norm": 1.5}]).json()
    assert corrected["rollbacks"] == [{"tags": ["grad_norm"], "from_step": 20, "to_step": 10}]
    assert [s for s, _ in steps_of(client, "a", "grad_norm")] == list(range(1, 11))
    assert [s for s, _ in steps_of(client, "a", "loss")] == list(range(1, 21))  # untouched
    more = client.post("/v1/runs/a/points", json=[{"step": 11, "grad_norm": 1.2}]).json()
    assert (more["accepted"], more["rollbacks"]) == (1, [])
    assert steps_of(client, "a", "grad_norm")[-2:] == [(10, 1.5), (11, 1.2)]


def test_a_resumed_job_is_one_restart_of_the_tags_it_rewrote(store_url):
    with service(store_url, analysis_interval=0) as client:
        client.post("/v1/runs/a/points", json=[{"step": s, "loss": 3.0 - s / 1000, "learning_rate": 1e-3} for s in range(900)])
        resumed = client.post("/v1/runs/a/points", json=[{"step": s, "loss": 3.1 - s / 1000, "learning_rate": 1e-3} for s in range(500, 600)]).json()
        # the schedule is the same the second time through: the LR's points are duplicates, not rewrites
        assert (resumed["accepted"], resumed["duplicates"]) == (100, 100)
        assert resumed["rollbacks"] == [{"tags": ["loss"], "from_step": 899, "to_step": 500}]
        assert [s for s, _ in steps_of(client, "a", "loss")] == list(range(600))
        assert len(steps_of(client, "a", "learning_rate")) == 900
        restarts = [a for a in client.get("/v1/runs/a/alerts").json() if a["kind"] == "restart"]
        assert [(a["start_step"], a["state"]) for a in restarts] == [(500, "resolved")]


def test_an_exact_resume_posts_the_same_values_later_and_is_a_restart(store_url):
    # a deterministic job resumed from its step-500 checkpoint computes the same losses again
    def rows(steps, t0):
        return [{"step": s, "tag": "loss", "value": 3.0 - s / 1000, "wall_time": t0 + s} for s in steps]

    with service(store_url, analysis_interval=0) as client:
        first = rows(range(900), 1.7e9)
        client.post("/v1/runs/a/points", json={"points": first})
        retry = client.post("/v1/runs/a/points", json={"points": first[500:]}).json()
        assert (retry["accepted"], retry["duplicates"], retry["rollbacks"]) == (0, 400, [])
        resumed = client.post("/v1/runs/a/points", json={"points": rows(range(500, 600), 1.7e9 + 1000)}).json()
        assert (resumed["accepted"], resumed["duplicates"]) == (100, 0)
        assert resumed["rollbacks"] == [{"tags": ["loss"], "from_step": 899, "to_step": 500}]
        assert [s for s, _ in steps_of(client, "a", "loss")] == list(range(600))
        restarts = [a for a in client.get("/v1/runs/a/alerts").json() if a["kind"] == "restart"]
        assert [a["start_step"] for a in restarts] == [500]


def test_a_rewind_keeps_every_point_it_posts_from_where_it_rewinds(client):
    # a resumed bf16 run: most losses differ from the first time through, some are equal
    client.post("/v1/runs/a/points", json=points(range(1, 21), value=lambda s: 2.0))
    again = client.post("/v1/runs/a/points", json=points(range(10, 16), value=lambda s: 2.0 if s % 2 else 2.5)).json()
    assert again["rollbacks"] == [{"tags": ["train/loss"], "from_step": 20, "to_step": 10}]
    assert (again["accepted"], again["duplicates"]) == (6, 0)
    assert steps_of(client, "a")[8:] == [(9, 2.0), (10, 2.5), (11, 2.0), (12, 2.5), (13, 2.0), (14, 2.5), (15, 2.0)]


def test_rollback_endpoint_hides_every_tag_from_a_step(client):
    client.post("/v1/runs/a/points", json=[{"step": s, "loss": 2.0, "grad_norm": 1.0} for s in range(1, 21)])
    done = client.post("/v1/runs/a/rollback", json={"to_step": 15}).json()
    assert done["rollbacks"] == [{"tags": [], "from_step": 20, "to_step": 15}]
    assert [s for s, _ in steps_of(client, "a", "loss")] == list(range(1, 15))
    assert [s for s, _ in steps_of(client, "a", "grad_norm")] == list(range(1, 15))
    again = client.post("/v1/runs/a/points", json=[{"step": 15, "loss": 2.0, "grad_norm": 1.0}]).json()
    assert (again["accepted"], again["duplicates"], again["rollbacks"]) == (2, 0, [])
    assert client.post("/v1/runs/a/rollback", json={"to_step": 99}).json()["rollbacks"] == []
    missing = client.post("/v1/runs/nope/rollback", json={"to_step": 1})
    assert (missing.status_code, missing.json()["error"]["message"]) == (404, "no run 'nope' has been posted")


def test_repeats_inside_one_request_are_stored_once(client):
    body = [{"step": 1, "loss": 2.0}, {"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.0}, {"step": 2, "loss": 1.5}]
    out = client.post("/v1/runs/a/points", json=body).json()
    assert (out["accepted"], out["duplicates"]) == (2, 1)
    assert out["rejected"] == [{"reason": "'loss' has steps posted twice in this request with different values: "
                                          "the later value is kept", "line": None, "json_path": None, "offset": None, "points": 1}]
    assert client.get("/v1/runs/a").json()["points"] == 2
    assert steps_of(client, "a", "loss") == [(1, 2.0), (2, 1.5)]


def test_an_overflowing_value_is_a_bad_record_not_infinity(client):
    body = '[{"step": 1, "loss": 1e400}, {"step": 2, "loss": 1.0}]'
    out = client.post("/v1/runs/a/points", content=body, headers={"Content-Type": "application/json"}).json()
    assert out["accepted"] == 1
    assert out["rejected"][0]["reason"] == "value must be a number, got a number beyond float64's range"
    assert client.get("/v1/runs/a/alerts").json() == []


def test_a_tag_with_invalid_utf8_or_nul_is_rejected_and_the_rest_kept(client):
    body = b'[{"step": 1, "lo\xffss": 1.0, "loss": 2.0}, {"step": 2, "a\\u0000b": 1.0, "loss": 1.9}]'
    r = client.post("/v1/runs/a/points", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 200
    out = r.json()
    assert out["accepted"] == 2
    assert [x["reason"] for x in out["rejected"]] == [
        "invalid UTF-8",
        'tag must not contain control characters or invalid UTF-8, got "lo\\udcffss"',
        'tag must not contain control characters or invalid UTF-8, got "a\\u0000b"',
    ]
    assert [t["tag"] for t in client.get("/v1/runs/a").json()["tags"]] == ["loss"]


def test_strict_is_read_as_fastapi_reads_a_boolean_query_parameter(client):
    body = {"points": [{"step": 1, "tag": "loss"}]}  # no value: a bad record
    assert client.post("/v1/runs/s/points?strict=YES", json=body).status_code == 422  # strict: refused whole
    assert client.post("/v1/runs/s/points?strict=off", json=body).json()["error"]["code"] == "invalid_input"
    for value in ("maybe", ""):
        answer = client.post(f"/v1/runs/s/points?strict={value}", json=body)
        assert answer.status_code == 422
        assert answer.json()["error"]["details"] == [
            {"where": "query.strict", "reason": "Input should be a valid boolean, unable to interpret input"}
        ]


def test_the_points_route_documents_what_fastapi_would_for_its_parameters_and_token():
    """post_points reads its own parameters and token (app/service/routes/ingest.py): its
    OpenAPI must say what FastAPI says of the same declared as dependencies."""
    from fastapi import FastAPI, Query

    from app.service.app import create_app
    from app.service.auth import WRITE
    from app.service.routes.ingest import STRICT_DESCRIPTION, RunName
    from app.service.settings import Settings

    declared = FastAPI()

    @declared.post("/v1/runs/{run:path}/points", dependencies=[WRITE])
    def post_points(run: str = RunName, strict: bool = Query(False, description=STRICT_DESCRIPTION)) -> None: ...

    expected = declared.openapi()["paths"]["/v1/runs/{run}/points"]["post"]
    documented = create_app(Settings(db_url="sqlite://")).openapi()["paths"]["/v1/runs/{run}/points"]["post"]
    assert documented["parameters"] == expected["parameters"]
    assert documented["security"] == expected["security"]

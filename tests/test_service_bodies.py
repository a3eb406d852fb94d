"""What a POST body may be, and the status it gets when it stored nothing: 400 when it cannot
be read in the format its Content-Type says, 415 for a type or encoding the endpoint does not
take, 422 when every record in it was bad, 200 for everything else (partial success lists
what was rejected).  gzip bodies are honoured within the size limit after decompression."""

from __future__ import annotations

import gzip
import json
import zlib

import pytest

from tests.eventfiles import record, scalar_event
from tests.service_helpers import server_process, service

J = {"Content-Type": "application/json"}


@pytest.fixture
def client(store_url):
    with service(store_url) as c:
        yield c


def rows(*steps: int) -> bytes:
    return json.dumps([{"step": s, "loss": 2.0 - s / 100} for s in steps]).encode()


def error_of(response) -> tuple[int, str, str]:
    error = response.json()["error"]
    return response.status_code, error["code"], error["message"]


def test_a_body_that_is_not_json_is_400_saying_where(client):
    r = client.post("/v1/runs/p/points", content=b"\n  hello", headers=J)
    assert error_of(r) == (400, "unreadable_body", "the body cannot be read as JSON")
    assert r.json()["error"]["details"] == [{"reason": "the body must start with '{' or '[', got b'h'", "line": 2, "offset": 3}]


def test_truncated_json_is_400_with_its_line(client):
    r = client.post("/v1/runs/p/points", content=b'[{"step": 1, "loss": 2.0},\n {"step": 2,', headers=J)
    assert error_of(r) == (400, "unreadable_body", "the body cannot be read as JSON")
    [detail] = r.json()["error"]["details"]
    assert detail["reason"].startswith("invalid JSON: ") and detail["line"] == 2


def test_ndjson_whose_every_line_is_broken_is_400_and_one_good_line_is_200(client):
    ndjson = {"Content-Type": "application/x-ndjson"}
    broken = client.post("/v1/runs/p/points", content=b'{"step": 1,\n{"step": 2', headers=ndjson)
    assert error_of(broken) == (400, "unreadable_body", "the body cannot be read as NDJSON")
    assert [d["line"] for d in broken.json()["error"]["details"]] == [1, 2]
    partial = client.post("/v1/runs/p/points", content=b'{"step": 1,\n{"step": 2, "loss": 1.0}', headers=ndjson)
    assert partial.status_code == 200
    assert partial.json()["accepted"] == 1 and partial.json()["rejected"][0]["line"] == 1


def test_a_form_is_415_saying_what_is_supported(client):
    r = client.post("/v1/runs/p/points", content=b"a=1&b=2", headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert error_of(r) == (
        415, "unsupported_media_type",
        "Content-Type 'application/x-www-form-urlencoded' is not supported here; send application/json or application/x-ndjson",
    )
    assert r.json()["error"]["details"] == {"supported": ["application/json", "application/x-ndjson"]}


def test_utf16_is_refused(client):
    with_bom = client.post("/v1/runs/p/points", content=rows(1).decode().encode("utf-16"), headers=J)
    assert with_bom.status_code == 400
    assert with_bom.json()["error"]["details"] == [{"reason": "the body is UTF-16: send UTF-8", "line": 1, "offset": 0}]
    without_bom = client.post("/v1/runs/p/points", content=rows(1).decode().encode("utf-16-le"), headers=J)
    assert without_bom.status_code == 400
    declared = client.post("/v1/runs/p/points", content=rows(1), headers={"Content-Type": "application/json; charset=utf-16"})
    assert error_of(declared) == (415, "unsupported_media_type", "charset 'utf-16' is not supported; send UTF-8")
    assert client.post("/v1/runs/p/points", content=rows(1), headers={"Content-Type": "application/json; charset=UTF-8"}).status_code == 200


def test_gzip_is_honoured_and_gzip_without_its_header_is_400(client):
    r = client.post("/v1/runs/p/points", content=gzip.compress(rows(1, 2, 3)), headers={**J, "Content-Encoding": "gzip"})
    assert r.status_code == 200 and r.json()["accepted"] == 3
    two_members = gzip.compress(b'[{"step": 4, "loss": 1.0},') + gzip.compress(b' {"step": 5, "loss": 1.0}]')
    r = client.post("/v1/runs/p/points", content=two_members, headers={**J, "Content-Encoding": "gzip"})
    assert r.status_code == 200 and r.json()["accepted"] == 2
    bare = client.post("/v1/runs/p/points", content=gzip.compress(rows(6)), headers=J)
    assert bare.status_code == 400
    assert bare.json()["error"]["details"][0]["reason"] == "the body is gzip-compressed: send it with Content-Encoding: gzip"


def test_broken_gzip_is_400_and_other_encodings_are_415(client):
    data = gzip.compress(rows(*range(200)))
    cut = client.post("/v1/runs/p/points", content=data[: len(data) // 2], headers={**J, "Content-Encoding": "gzip"})
    assert error_of(cut) == (400, "bad_gzip", f"the gzip body is cut short at compressed byte {len(data) // 2}")
    damaged = client.post("/v1/runs/p/points", content=b"\x1f\x8b\x08\x00garbage-garbage", headers={**J, "Content-Encoding": "gzip"})
    assert damaged.status_code == 400 and damaged.json()["error"]["code"] == "bad_gzip"
    assert damaged.json()["error"]["message"].startswith("the gzip body does not decompress (")
    br = client.post("/v1/runs/p/points", content=rows(1), headers={**J, "Content-Encoding": "br"})
    assert error_of(br) == (415, "unsupported_encoding", "Content-Encoding 'br' is not supported; send gzip or no encoding")
    assert client.post("/v1/runs/p/points", content=rows(1), headers={**J, "Content-Encoding": "identity"}).status_code == 200


def test_a_gzip_bomb_is_413_at_the_limit_after_decompression(store_url):
    squeezer = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip: 256 MB of spaces in ~250 kB
    bomb = squeezer.compress(b"[") + b"".join(squeezer.compress(b" " * (1 << 20)) for _ in range(256)) + squeezer.flush()
    assert len(bomb) < 1 << 20
    with service(store_url, max_body_bytes=4 << 20) as c:
        r = c.post("/v1/runs/p/points", content=bomb, headers={**J, "Content-Encoding": "gzip"})
        assert error_of(r) == (413, "body_too_large", f"the body is over the {4 << 20}-byte limit once decompressed")


def test_an_empty_body_is_400(client):
    r = client.post("/v1/runs/p/points", content=b"  \n", headers=J)
    assert error_of(r) == (400, "unreadable_body", "the body cannot be read as JSON")
    assert r.json()["error"]["details"] == [{"reason": "the body is empty"}]
    nothing_to_do = client.post("/v1/runs/p/points", json=[])
    assert nothing_to_do.status_code == 200 and nothing_to_do.json()["accepted"] == 0


def test_every_record_rejected_is_422_some_rejected_is_200_all_duplicates_is_200(client):
    bad = client.post("/v1/runs/p/points", json=[{"step": -1, "loss": 1.0}, {"step": 2, "loss": True}])
    assert error_of(bad) == (422, "invalid_input", "every record was rejected: nothing was stored")
    assert bad.json()["error"]["details"] == [
        {"reason": "step must be an integer from 0 to 9007199254740991, got -1", "line": 1, "json_path": "$[0].step"},
        {"reason": "value must be a number, got true", "line": 1, "json_path": "$[1].loss"},
    ]
    partial = client.post("/v1/runs/p/points", json=[{"step": 1, "loss": 1.0}, {"step": 2, "loss": True}])
    assert partial.status_code == 200 and partial.json()["accepted"] == 1 and len(partial.json()["rejected"]) == 1
    again = client.post("/v1/runs/p/points", json=[{"step": 1, "loss": 1.0}])
    assert again.status_code == 200 and again.json()["duplicates"] == 1


def test_strict_mode_tells_an_unreadable_body_from_bad_records(client):
    unreadable = client.post("/v1/runs/p/points?strict=true", content=b'[{"step": 1', headers=J)
    assert error_of(unreadable) == (400, "unreadable_body", "the body cannot be read as JSON")
    bad = client.post("/v1/runs/p/points?strict=true", json=[{"step": 1, "loss": 1.0}, {"step": 2, "loss": True}])
    assert error_of(bad) == (422, "invalid_input", "the input has bad records")


def test_no_content_type_is_read_as_json(client):
    r = client.post("/v1/runs/p/points", content=rows(1, 2))
    assert r.status_code == 200 and r.json()["accepted"] == 2


def test_event_bytes_want_octet_stream_or_no_type_and_must_be_records(client):
    data = record(scalar_event(1, "loss", 1.0))
    assert client.post("/v1/runs/tb/events", params={"file": "a"}, content=data).status_code == 200
    typed = client.post("/v1/runs/tb/events", params={"file": "b"}, content=data, headers={"Content-Type": "application/octet-stream"})
    assert typed.status_code == 200 and typed.json()["accepted"] == 1
    form = client.post("/v1/runs/tb/events", params={"file": "c"}, content=data, headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert error_of(form) == (
        415, "unsupported_media_type",
        "Content-Type 'application/x-www-form-urlencoded' is not supported here; send application/octet-stream",
    )
    json_bytes = client.post("/v1/runs/tb/events", params={"file": "d"}, content=rows(1), headers={"Content-Type": "application/octet-stream"})
    assert error_of(json_bytes) == (400, "unreadable_body", "the body cannot be read as TensorBoard event records")
    assert json_bytes.json()["error"]["details"][0]["offset"] == 0
    zipped = client.post("/v1/runs/tb/events", params={"file": "e"}, content=gzip.compress(data), headers={"Content-Encoding": "gzip"})
    assert zipped.status_code == 200 and zipped.json()["accepted"] == 1


def test_every_event_record_damaged_is_422(client):
    data = bytearray(record(scalar_event(1, "loss", 1.0)))
    data[20] ^= 0xFF  # inside the payload: that record is skipped, the framing holds
    r = client.post("/v1/runs/tb/events", params={"file": "f"}, content=bytes(data))
    assert error_of(r) == (422, "invalid_input", "every record was rejected: nothing was stored")
    assert r.json()["error"]["details"][0]["reason"].startswith("payload CRC mismatch")


def test_the_issue_reproductions_against_a_real_server(tmp_path):
    """curl -d without a Content-Type sends a form; trainers send gzip."""
    import httpx

    with server_process(f"sqlite:///{tmp_path / 'store.db'}") as (base, _):
        form = httpx.post(f"{base}/v1/runs/p/points", content=b'[{"step":1,"loss":2}]',
                          headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert form.status_code == 415
        zipped = httpx.post(f"{base}/v1/runs/p/points", content=gzip.compress(rows(1, 2)), headers={**J, "Content-Encoding": "gzip"})
        assert zipped.status_code == 200 and zipped.json()["accepted"] == 2
        truncated = httpx.post(f"{base}/v1/runs/p/points", content=b'[{"step":3,"loss":2', headers=J)
        assert truncated.status_code == 400
        assert httpx.get(f"{base}/v1/runs/p").json()["points"] == 2

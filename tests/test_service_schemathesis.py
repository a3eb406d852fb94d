"""Property-based API test: schemathesis generates requests from the app's own OpenAPI
(valid and not) and none may get a server error; the runs and ingest routes must also answer
only the statuses, content types and bodies their OpenAPI documents.  schemathesis collects
its cases at import, so this module builds its app then; the fixture opens its store (the
lifespan) for the run."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import content_type_conformance, not_a_server_error, response_schema_conformance, status_code_conformance

from app.service.app import create_app
from app.service.settings import Settings

# NDJSON bodies: lines of point-like objects, well formed or not, as raw bytes.
_scalars = st.one_of(st.integers(-5, 10**6), st.floats(allow_nan=False), st.text(max_size=8), st.booleans(), st.none())
_lines = st.lists(st.dictionaries(st.sampled_from(["step", "tag", "value", "run", "wall_time"]), _scalars), max_size=5)
schemathesis.openapi.media_type(
    "application/x-ndjson", _lines.map(lambda rows: "\n".join(json.dumps(r) for r in rows).encode())
)

ROOT = Path(tempfile.mkdtemp(prefix="lw-schemathesis-"))
APP = create_app(Settings(db_url=f"sqlite:///{ROOT / 'store.db'}", allowed_roots=(str(ROOT),), background=False, auth="open"))
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@pytest.fixture(scope="module", autouse=True)
def running_app():
    with TestClient(APP) as client:  # enters the lifespan: the store is open
        client.post("/v1/runs/seeded/points", json={"points": [{"step": i, "tag": "train/loss", "value": 2.0} for i in range(300)]})
        # a resume to step 100 with a NaN after it: series reads cross a rollback
        client.post("/v1/runs/seeded/points", json=[{"step": s, "train/loss": "NaN" if s == 150 else 1.5} for s in range(100, 200)])
        yield


DOCUMENTED = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_gets_a_server_error(case):
    if case.operation.path.startswith("/v1/runs"):
        case.call_and_validate(checks=DOCUMENTED)
        return
    response = case.call()
    assert response.status_code < 500, f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]}"

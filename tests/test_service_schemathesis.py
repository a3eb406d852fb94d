"""Property-based API test: schemathesis generates requests from the app's own OpenAPI
(valid and not) and none may get a server error.  schemathesis collects its cases at import,
so this module builds its app then; the fixture opens its store (the lifespan) for the run."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

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
        yield


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_gets_a_server_error(case):
    response = case.call()
    assert response.status_code < 500, f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]}"

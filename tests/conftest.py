from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REFERENCE_RUNS = REPO.parent / "shared" / "reference-runs"
FIXTURES = REPO / "tests" / "fixtures"
# Real trainers (torch, transformers, lightning) run only in `make test-integrations`, which
# installs them: `make test` stays free of torch.
collect_ignore = [] if os.environ.get("LOSSWATCH_INTEGRATIONS") else ["integrations"]


@pytest.fixture
def reference_runs() -> Path:
    if not REFERENCE_RUNS.is_dir():
        pytest.skip(f"reference runs not found at {REFERENCE_RUNS} (shared/ is laid beside the repo)")
    return REFERENCE_RUNS


@pytest.fixture(params=["native", "python"])
def crc_mode(request):
    """Run a test with the decoder calling the crc32c routine directly, and through Python."""
    from app.ingest.crc import disable_native_crc, enable_native_crc

    if request.param == "python":
        disable_native_crc()
    else:
        assert enable_native_crc(), "the crc32c package's routine could not be used directly"
    yield request.param
    enable_native_crc()


PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def _pg_reason() -> str | None:
    """Why PostgreSQL tests cannot run here, or None when they can."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed"
    try:
        psycopg.connect("host=127.0.0.1 port=5432 user=postgres dbname=test", connect_timeout=3).close()
    except psycopg.OperationalError as e:
        return f"PostgreSQL is not reachable at 127.0.0.1:5432 (database test): {str(e).strip()}"
    return None


@pytest.fixture(scope="session")
def pg_available() -> None:
    reason = _pg_reason()
    if reason:
        pytest.skip(reason)


@pytest.fixture
def pg_url(pg_available):
    """A fresh schema in the local PostgreSQL's `test` database, dropped afterwards."""
    import uuid

    import sqlalchemy as sa

    schema = f"lw_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(PG_URL)
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    yield f"{PG_URL}?options=-csearch_path%3D{schema}"
    with admin.begin() as conn:
        conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
    admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """Each store test runs on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def store(store_url):
    """An open store on `store_url` (each test on SQLite and on PostgreSQL), closed after."""
    from app.store.db import open_store

    s = open_store(store_url)
    yield s
    s.close()


@pytest.fixture
def hung_filesystem(monkeypatch):
    """os.pread that does not answer for files whose path contains `slow` (a hung network
    mount) until the test ends, or `release` is set; reads before byte `block_from` pass.
    `entered` is set once a read is stuck."""
    state = {"block_from": 0, "release": threading.Event(), "entered": threading.Event()}
    real_pread = os.pread

    def pread(fd, size, offset):
        if "slow" in os.readlink(f"/proc/self/fd/{fd}") and offset >= state["block_from"]:
            state["entered"].set()
            state["release"].wait()
        return real_pread(fd, size, offset)

    monkeypatch.setattr(os, "pread", pread)
    yield state
    state["release"].set()

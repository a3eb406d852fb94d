from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REFERENCE_RUNS = REPO.parent / "shared" / "reference-runs"
FIXTURES = REPO / "tests" / "fixtures"


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

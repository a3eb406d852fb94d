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

"""The real sample runs: each pattern that was caused on purpose is found where it was
caused, classified as it happened, and the clean runs stay quiet."""

from __future__ import annotations

import json

import pytest

from analyzers.findings import Severity
from app.analysis import analyze
from app.ingest.sources import read_path
from tests.conftest import REPO

SAMPLES = REPO / "sample_runs"
LABELS = json.loads((SAMPLES / "labels.json").read_text())


@pytest.fixture(scope="module")
def alerts():
    runs = read_path(str(SAMPLES)).runs
    return {name: analyze(str(SAMPLES), run) for name, run in runs.items()}


@pytest.mark.parametrize("event", LABELS["events"], ids=lambda e: f"{e['run']}-{e['kind']}-{e['tag']}")
def test_caused_pattern_is_found_where_it_was_caused(alerts, event):
    found = [
        a.finding for a in alerts[event["run"]]
        if a.finding.kind.value == event["kind"] and a.finding.tag == event["tag"]
        and abs(a.finding.start_step - event["step"]) <= event["tolerance"]
    ]
    assert found, [a.finding.message for a in alerts[event["run"]]]
    if "classification" in event:
        assert found[0].classification.value == event["classification"]


@pytest.mark.parametrize("run", LABELS["silent_at_warning"])
def test_clean_runs_raise_nothing_at_warning_or_above(alerts, run):
    assert [a.finding.message for a in alerts[run] if a.finding.severity >= Severity.WARNING] == []


def test_json_stream_and_trainer_state_read_like_the_event_file():
    events = read_path(str(SAMPLES / "bad_batch")).runs
    stream = read_path(str(SAMPLES / "json" / "bad_batch.json")).runs
    [event_run], [stream_run] = events.values(), stream.values()
    assert len(stream_run.points) == len(event_run.points) == 9000
    hf = read_path(str(SAMPLES / "hf_trainer" / "trainer_state.json"))
    assert hf.problems == []
    [run] = hf.runs.values()
    kinds = {a.finding.kind.value for a in analyze("hf", run)}
    assert "loss_spike" in kinds  # the LR burst, seen through 10-step means

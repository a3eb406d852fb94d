"""`losswatch analyze` reads its input as a stream of bounded batches (app/ingest/streamed.py,
`app.analysis.assess_source`): whatever the batch size, and with rollbacks that make it
replay, it prints what a one-shot analysis of the whole run prints."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from app.analysis import assess_run, assess_source
from app.ingest.sources import read_path
from app.ingest.streamed import Limits, stream_path
from tests.conftest import REPO
from tests.eventfiles import scalar_event, session_start, write_events

# Tiny batches cut a run in hundreds of places; the defaults read a small run as one batch.
LIMITS = [Limits(event_bytes=4096, text_points=300, whole_json_bytes=0), Limits(event_bytes=65536, text_points=5000), Limits()]
TAGS = ("train/loss", "train/lr", "train/grad_norm")


def one_shot(path: str) -> list[tuple]:
    read = read_path(path)
    out = []
    for name, run in read.runs.items():
        alerts, health = assess_run(path, run)
        out.append((name, [a.to_dict() for a in alerts], health.to_dict()))
    return out


def streamed(path: str, limits: Limits) -> list[tuple]:
    out = []
    for source in stream_path(path, limits).sources:
        for run in assess_source(path, source):
            assert run.error is None
            out.append((run.name, [a.to_dict() for a in run.alerts], run.health.to_dict()))
    return out


@pytest.mark.parametrize("limits", LIMITS)
def test_sample_runs_stream_to_the_one_shot_findings(limits):
    path = str(REPO / "sample_runs")
    assert streamed(path, limits) == one_shot(path)


def curve(steps: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Three tags of a run with a spike and a grad-norm explosion."""
    rng = np.random.default_rng(seed)
    t = np.arange(steps)
    loss = (2 + 3 * np.exp(-t / 900)) * (1 + 0.01 * rng.standard_normal(steps))
    loss[2500:2520] *= np.linspace(6, 1, 20)
    grad = 1 + 0.05 * rng.standard_normal(steps)
    grad[5000:5004] = 80.0
    return {"train/loss": loss, "train/lr": 3e-4 * np.minimum(1, (t + 1) / 300), "train/grad_norm": grad}


def rows(steps: int) -> list[tuple[int, str, float]]:
    """(step, tag, value) in write order: steps 0..6999, then a resume from step 5200 (the
    first attempt's later steps are rewritten) and on to 9999, then a restart at step 3000
    announced by nothing but the steps."""
    c, d = curve(steps), curve(steps, seed=1)
    order = [*range(0, 7000), *range(5200, 8000), *range(3000, steps)]
    out = []
    for i, step in enumerate(order):
        values = c if i < 7000 else d
        out += [(step, tag, float(values[tag][step])) for tag in TAGS]
    return out


def write_formats(directory, steps: int = 10000) -> dict[str, str]:
    written = rows(steps)
    paths = {}
    events = directory / "events" / "events.out.tfevents.1"
    events.parent.mkdir()
    write_events(events, [session_start(0)] + [scalar_event(s, tag, v) for s, tag, v in written])
    paths["events"] = str(events)
    wide: list[dict] = []
    for s, tag, v in written:
        if not wide or wide[-1]["step"] != s or tag in wide[-1]:
            wide.append({"step": s})
        wide[-1][tag] = v
    ndjson = directory / "run.ndjson"
    ndjson.write_text("".join(json.dumps(r) + "\n" for r in wide))
    array = directory / "run.json"
    array.write_text(json.dumps(wide))
    table = directory / "run.csv"
    with open(table, "w", newline="") as f:
        writer = csv.DictWriter(f, ["step", *TAGS])
        writer.writeheader()
        writer.writerows(wide)
    paths.update(ndjson=str(ndjson), json=str(array), csv=str(table))
    return paths


@pytest.fixture(scope="module")
def formats(tmp_path_factory):
    return write_formats(tmp_path_factory.mktemp("formats"))


@pytest.mark.parametrize("fmt", ["events", "ndjson", "json", "csv"])
@pytest.mark.parametrize("limits", LIMITS)
def test_a_run_with_rollbacks_streams_to_the_one_shot_findings_in_every_format(formats, fmt, limits):
    expected = one_shot(formats[fmt])
    assert streamed(formats[fmt], limits) == expected


def test_every_format_reads_the_same_run_with_its_rollbacks(formats):
    runs = {fmt: next(iter(read_path(path).runs.values())) for fmt, path in formats.items()}
    assert {fmt: len(run.rollbacks) for fmt, run in runs.items()} == dict.fromkeys(formats, 2)
    kinds = {fmt: sorted((a["kind"], a["start_step"]) for _, alerts, _ in one_shot(path) for a in alerts)
             for fmt, path in formats.items()}
    assert kinds["ndjson"] == kinds["json"] == kinds["csv"]
    assert ("restart", 5200) in kinds["csv"]


@pytest.mark.parametrize("limits", LIMITS)
def test_the_trained_runs_logged_as_running_means_stream_to_the_one_shot_findings(limits):
    """Cut into batches, the feed that shows the epochs has the run read again and fed from
    its start: what a one-shot analysis finds (the LR edit: a slow-recovering warning)."""
    for name in ("charlm_epoch_mean_a", "charlm_epoch_mean_lr_jump"):
        path = str(REPO / "bench" / "trained" / "runs" / name)
        assert streamed(path, limits) == one_shot(path)

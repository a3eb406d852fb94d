"""The labels of the real curves (the public logs, bench/labels/reference_runs.json, the runs
trained for the purpose, bench/labels/trained_runs.json, and the speedrun records,
bench/labels/speedrun_records.json) stay well-formed: every
labelled run still exists and reads, every event names a valid kind on a tag the run has,
at a step inside that tag's range, and both parts are there with a fair mix in the held-out
one; the public trainer_state.json files' labels keep their shape.  So the corpora the
detectors are judged on cannot rot unnoticed."""

from __future__ import annotations

import json
from functools import cache

import numpy as np
import pytest

from app.ingest.sources import read_path
from bench import corpus
from bench.wild import LABELS as WILD


@pytest.fixture(scope="module", params=[corpus.LABELS, corpus.TRAINED, corpus.RECORDS], ids=["public", "trained", "records"])
def labels(request: pytest.FixtureRequest) -> corpus.Corpus:
    loaded = corpus.load(request.param)
    if not loaded.shared_root.is_dir():
        pytest.skip(f"labelled runs not found under {loaded.shared_root} (shared/ is laid beside the repo)")
    return loaded


@pytest.fixture(scope="module")
def public() -> corpus.Corpus:
    loaded = corpus.load()
    if not (loaded.shared_root / "reference-runs").is_dir():
        pytest.skip(f"reference runs not found under {loaded.shared_root} (shared/ is laid beside the repo)")
    return loaded


@cache
def _runs(path: str) -> dict:
    return read_path(path).runs


def _tag_steps(labels: corpus.Corpus, run: corpus.LabelledRun) -> dict[str, tuple[int, int]]:
    runs = _runs(str(run.location))
    assert run.run in runs, f"{run.path} has no run {run.run!r}; it has {sorted(runs)}"
    p = runs[run.run].points
    return {name: (int(p.step[p.tag == i].min()), int(p.step[p.tag == i].max())) for i, name in enumerate(p.tags) if np.any(p.tag == i)}


def test_every_labelled_run_reads_and_every_label_sits_on_its_curve(labels: corpus.Corpus) -> None:
    for run in labels.runs:
        ranges = _tag_steps(labels, run)
        for event in run.events:
            assert event.tag in ranges, f"{run.run}: no tag {event.tag!r} (has {sorted(ranges)})"
            low, high = ranges[event.tag]
            assert low <= event.step <= high, f"{run.run} {event.tag}: step {event.step} outside {low}..{high}"
        for span in run.clean:
            assert span.tag in ranges, f"{run.run}: clean span on missing tag {span.tag!r}"
            low, high = ranges[span.tag]
            start = low if span.start is None else span.start
            end = high if span.end is None else span.end
            assert low <= start <= end <= high, f"{run.run} {span.tag}: clean span {start}..{end} outside {low}..{high}"


def test_runs_are_labelled_once(labels: corpus.Corpus) -> None:
    keys = [(r.path, r.run) for r in labels.runs]
    assert len(keys) == len(set(keys))


def test_the_retired_part_keeps_its_mix_and_the_held_out_corpora_stay_blind(public: corpus.Corpus) -> None:
    """The public logs' former held-out part (retired, tuned on since its misses were read)
    keeps the mix it was chosen for; what is held out now is the trained runs' held-out
    part and the speedrun records, whole."""
    retired, tuning = public.part("retired"), public.part("tuning")
    assert retired and tuning and not public.part("heldout")
    families = {r.family for r in retired}
    assert {"megatron", "word-lm", "marian-nmt"} <= families
    kinds = {e.kind for r in retired for e in r.required}
    assert {"loss_spike", "overfitting", "nonfinite", "divergence"} <= kinds
    records = corpus.load(corpus.RECORDS)
    assert records.runs and all(r.part == "heldout" for r in records.runs)
    assert corpus.load(corpus.TRAINED).part("heldout")


def test_a_bad_label_is_refused_saying_where(tmp_path) -> None:
    bad = tmp_path / "labels.json"
    bad.write_text(
        '{"about": "", "shared_root": "../shared", "runs": [{"run": "r", "path": "p", "family": "f", "part": "tuning",'
        ' "about": "", "clean": [], "events": [{"tag": "t", "kind": "loss_blip", "step": 1, "tolerance": 0, "why": "x"}]}]}'
    )
    with pytest.raises(corpus.LabelError) as e:
        corpus.load(bad)
    assert str(e.value) == "labels.json: runs[0] ('r').events[0]: unknown kind ['loss_blip']"


def test_the_trained_runs_show_what_no_public_log_does() -> None:
    """Each part holds every kind no public log shows, and a clean run.  What is held out is
    the nineteenth batch (`_q`), trained to replace the runs held out before it, now retired
    (bench/labels/README.md)."""
    trained = corpus.load(corpus.TRAINED)
    assert {r.run[-2:] for r in trained.part("heldout")} == {"_q"} and len(trained.part("retired")) == 195
    for part in ("tuning", "retired", "heldout"):
        runs = trained.part(part)
        kinds = {e.kind for r in runs for e in r.required}
        assert {"restart", "loss_spike", "overfitting", "plateau", "loss_scale_collapse"} <= kinds, (part, kinds)
        assert any(not r.required for r in runs), f"the {part} part needs a clean run"


def test_the_wild_labels_name_a_repository_and_known_kinds_on_each_run() -> None:
    """bench/labels/wild_trainer_states.json (bench/wild.py): the files are not here, so
    only the labels' own shape is checked: each run names `<owner>__<repository>` once, its
    part and its file's path and commit, and each event a known kind, a tag, a step and a
    tolerance."""
    runs = json.loads(WILD.read_text())["runs"]
    names = [r["run"] for r in runs]
    assert len(names) == len(set(names)) and all(n.count("__") >= 1 and n.split("__")[0] for n in names)
    for r in runs:
        for e in r["events"]:
            kinds = {e["kind"], *e.get("accept_kinds", ())}
            assert kinds <= corpus.KINDS, (r["run"], kinds)
            assert isinstance(e["tag"], str) and e["tag"] and isinstance(e["step"], int) and e["tolerance"] >= 0, r["run"]
    assert {r["part"] for r in runs} <= {"tuning", "untuned"}
    required = [r["part"] for r in runs for e in r["events"] if not e.get("optional")]
    assert (required.count("tuning"), required.count("untuned")) == (35, 0)
    assert all(r["path"].endswith("trainer_state.json") and len(r["commit"]) == 40 for r in runs)

"""Walking a logdir: run names, file order, incremental reads, and damage confined to
where it is."""

from __future__ import annotations

import os

import pytest

from app.ingest.logdir import find_runs, read_logdir
from app.ingest.problems import IngestError
from tests.eventfiles import loss_events, record, write_events


def test_runs_are_relative_paths_and_the_root_is_dot(tmp_path):
    write_events(tmp_path / "events.out.tfevents.1", loss_events(range(2)))
    (tmp_path / "x" / "y").mkdir(parents=True)
    write_events(tmp_path / "x" / "y" / "events.out.tfevents.1", loss_events(range(3)))
    (tmp_path / "empty").mkdir()
    runs, problems = find_runs(str(tmp_path))
    assert list(runs) == [".", "x/y"]
    assert problems == []


def test_files_of_a_run_are_read_in_name_order(tmp_path):
    write_events(tmp_path / "events.out.tfevents.2", loss_events(range(5, 8)))
    write_events(tmp_path / "events.out.tfevents.1", loss_events(range(0, 5)))
    run = read_logdir(str(tmp_path)).runs["."]
    assert list(run.points.step) == list(range(8))
    assert run.rollbacks == ()


def test_an_unreadable_file_is_reported_and_the_rest_still_read(tmp_path):
    (tmp_path / "a").mkdir()
    write_events(tmp_path / "a" / "events.out.tfevents.1", loss_events(range(3)))
    (tmp_path / "a" / "events.out.tfevents.2").symlink_to(tmp_path / "gone")  # dangling
    (tmp_path / "b").mkdir()
    write_events(tmp_path / "b" / "events.out.tfevents.1", loss_events(range(4)))
    read = read_logdir(str(tmp_path))
    assert len(read.runs["a"].points) == 3 and len(read.runs["b"].points) == 4
    [problem] = read.runs["a"].problems
    assert str(problem) == f"{tmp_path / 'a' / 'events.out.tfevents.2'}: byte 0: cannot read event file: No such file or directory"


def test_an_unlistable_directory_is_reported_and_the_rest_still_read(tmp_path, monkeypatch):
    for name in ("ok", "locked"):
        (tmp_path / name).mkdir()
        write_events(tmp_path / name / "events.out.tfevents.1", loss_events(range(2)))
    real_scandir = os.scandir

    def scandir(path="."):
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    read = read_logdir(str(tmp_path))
    assert list(read.runs) == ["ok"]
    assert [str(p) for p in read.problems] == [f"{tmp_path / 'locked'}: cannot list directory: Permission denied"]


def test_missing_logdir_raises(tmp_path):
    with pytest.raises(IngestError, match="no such directory"):
        read_logdir(str(tmp_path / "nope"))


def test_incremental_read_of_a_logdir_reads_only_new_bytes_in_every_file(tmp_path):
    old, new = tmp_path / "events.out.tfevents.1", tmp_path / "events.out.tfevents.2"
    write_events(old, loss_events(range(0, 5)))
    write_events(new, loss_events(range(5, 10)))
    first = read_logdir(str(tmp_path)).runs["."]
    offsets = {path: p.offset for path, p in first.files.items()}
    with open(old, "ab") as f:  # a writer still flushing to the older file
        f.write(record(loss_events(range(10, 11))[0]))
    with open(new, "ab") as f:
        f.write(record(loss_events(range(11, 12))[0]))
    second = read_logdir(str(tmp_path), offsets, {".": first.state}).runs["."]
    assert list(second.points.step) == [10, 11]
    unchanged = read_logdir(
        str(tmp_path), {p: s.offset for p, s in second.files.items()}, {".": second.state}
    ).runs["."]
    assert len(unchanged.points) == 0

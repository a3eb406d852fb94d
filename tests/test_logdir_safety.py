"""A logdir can hold anything: a FIFO named like an event file, symlinks out of the allowed
roots, a file on a filesystem that stops answering, a file rewritten under its own name.
Each is reported where it is, and every other file and run is still read."""

from __future__ import annotations

import os
import threading

from app.ingest.events import ReadEnd, read_event_file
from app.ingest.logdir import read_logdir, read_run
from app.ingest.problems import IngestError
from app.ingest.sources import read_path
from tests.eventfiles import file_version, loss_events, record, write_events


def finishes(fn, *args, **kwargs):
    """Run `fn` on a thread and return its result; fails (instead of hanging the suite) if it
    has not returned within a minute: the defect these tests guard against is a hang."""
    out = {}
    thread = threading.Thread(target=lambda: out.setdefault("value", fn(*args, **kwargs)), daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), f"{fn.__name__} hung"
    return out["value"]


def test_a_fifo_named_like_an_event_file_is_skipped_and_reported(tmp_path):
    (tmp_path / "good").mkdir()
    write_events(tmp_path / "good" / "events.out.tfevents.1", loss_events(range(5)))
    (tmp_path / "bad").mkdir()
    write_events(tmp_path / "bad" / "events.out.tfevents.1", loss_events(range(3)))
    fifo = tmp_path / "bad" / "events.out.tfevents.2"
    os.mkfifo(fifo)
    read = finishes(read_logdir, str(tmp_path))
    assert len(read.runs["good"].points) == 5 and len(read.runs["bad"].points) == 3
    assert [str(p) for p in read.runs["bad"].problems] == [f"{fifo}: not a regular file (a FIFO): skipped"]


def test_a_fifo_given_by_name_is_an_input_error_not_a_hang(tmp_path):
    fifo = tmp_path / "metrics.jsonl"
    os.mkfifo(fifo)
    error = finishes(_raises, read_path, str(fifo))
    assert str(error) == f"{fifo}: not a regular file (a FIFO): skipped"


def _raises(fn, *args):
    try:
        fn(*args)
    except IngestError as e:
        return e
    raise AssertionError("no error")


def test_with_allowed_roots_files_resolving_outside_them_are_skipped(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "run").mkdir(parents=True)
    outside.mkdir()
    write_events(outside / "secret.tfevents", loss_events(range(7)))
    write_events(root / "shared.bin", loss_events(range(4)))
    write_events(root / "run" / "events.out.tfevents.1", loss_events(range(2)))
    (root / "run" / "events.out.tfevents.2").symlink_to(outside / "secret.tfevents")
    (root / "run" / "events.out.tfevents.3").symlink_to(root / "shared.bin")  # inside: fine
    files = sorted(str(p) for p in (root / "run").iterdir())
    run = read_run("run", files, roots=[str(root)])
    assert len(run.points) == 2 + 4
    assert [str(p) for p in run.problems] == [
        f"{root / 'run' / 'events.out.tfevents.2'}: its real path is outside the allowed roots: skipped"
    ]
    assert len(read_run("run", files).points) == 2 + 7 + 4  # no roots (the command line): read


def test_a_directory_on_the_way_swapped_for_a_symlink_is_caught(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "run").mkdir(parents=True)
    write_events(root / "run" / "events.out.tfevents.1", loss_events(range(2)))
    path = str(root / "run" / "events.out.tfevents.1")
    assert len(read_run("run", [path], roots=[str(root)]).points) == 2
    os.rename(root / "run", tmp_path / "moved")
    outside.mkdir()
    write_events(outside / "events.out.tfevents.1", loss_events(range(9)))
    (root / "run").symlink_to(outside)
    run = read_run("run", [path], roots=[str(root)])
    assert len(run.points) == 0
    assert [p.reason for p in run.problems] == ["its real path is outside the allowed roots: skipped"]


def test_a_file_that_stops_answering_times_out_and_the_others_are_read(tmp_path, hung_filesystem):
    write_events(tmp_path / "events.out.tfevents.1", loss_events(range(3)))
    write_events(tmp_path / "events.out.tfevents.2.slow", loss_events(range(3, 6)))
    write_events(tmp_path / "events.out.tfevents.3", loss_events(range(6, 9)))
    files = sorted(str(p) for p in tmp_path.iterdir())
    run = finishes(read_run, ".", files, timeout=0.3)
    assert list(run.points.step) == [0, 1, 2, 6, 7, 8]
    assert [str(p) for p in run.problems] == [
        f"{files[1]}: byte 0: read timed out after 0.3 s (a hung filesystem?): the rest is read on a later scan"
    ]
    assert files[1] not in run.files  # nothing saved for it: read again next time


def test_a_read_that_times_out_midway_keeps_what_it_read(tmp_path, hung_filesystem):
    path = tmp_path / "events.out.tfevents.slow"
    offsets = write_events(path, loss_events(range(100)))
    hung_filesystem["block_from"] = offsets[50]
    read = finishes(read_event_file, str(path), chunk_bytes=offsets[50], timeout=0.3)
    assert read.end is ReadEnd.TIMED_OUT and read.end_offset == offsets[50] and len(read.points) == 50
    assert [str(p) for p in read.problems] == [
        f"{path}: byte {offsets[50]}: read timed out after 0.3 s (a hung filesystem?): the rest is read on a later scan"
    ]
    [progress] = read_run(".", [str(path)], {str(path): offsets[50]}, timeout=0.3).files.values()
    assert (progress.offset, progress.size) == (offsets[50], -1)  # not the file's size: the next scan reads on although it did not grow


def test_a_file_rewritten_shorter_is_read_again_from_the_start(tmp_path):
    first_file, second_file = tmp_path / "events.out.tfevents.1", tmp_path / "events.out.tfevents.2"
    write_events(first_file, [file_version(), *loss_events(range(0, 50))])
    write_events(second_file, [file_version(), *loss_events(range(50, 100))])
    files = [str(first_file), str(second_file)]
    before = read_run(".", files)
    offsets = {p: f.offset for p, f in before.files.items()}
    heads = {p: f.head for p, f in before.files.items()}
    write_events(second_file, [file_version(), *loss_events(range(50, 60), tag="train/loss")])  # shorter
    after = read_run(".", files, offsets, before.state, heads=heads)
    assert after.rewritten == (str(second_file),)
    assert list(after.points.step) == list(range(60)) and after.rollbacks == ()  # as read fresh: no old point kept
    size = os.path.getsize(second_file)
    assert [str(p) for p in after.problems] == [
        f"{second_file}: rewritten since it was last read (now {size} bytes long, shorter than the "
        f"{offsets[str(second_file)]} bytes read before): the run is read again from the start"
    ]


def test_a_file_replaced_by_a_longer_one_with_other_first_bytes_is_a_rewrite(tmp_path):
    path = tmp_path / "events.out.tfevents.1"
    path.write_bytes(record(file_version()) + b"".join(record(e) for e in loss_events(range(10))))
    before = read_run(".", [str(path)])
    other = path.with_suffix(".new")
    other.write_bytes(b"".join(record(e) for e in loss_events(range(100, 130))))
    os.replace(other, path)
    [progress] = before.files.values()
    after = read_run(".", [str(path)], {str(path): progress.offset}, before.state, heads={str(path): progress.head})
    assert after.rewritten == (str(path),) and list(after.points.step) == list(range(100, 130))
    assert "(its first bytes changed)" in str(after.problems[0])


def test_a_copy_with_the_same_bytes_is_read_on_not_again(tmp_path):
    """rsync and cp replace a growing file by a longer copy of it: not a rewrite."""
    path = tmp_path / "events.out.tfevents.1"
    write_events(path, [file_version(), *loss_events(range(10))])
    before = read_run(".", [str(path)])
    copy = tmp_path / "copy"
    copy.write_bytes(path.read_bytes() + record(loss_events(range(10, 11))[0]))
    os.replace(copy, path)
    [progress] = before.files.values()
    after = read_run(".", [str(path)], {str(path): progress.offset}, before.state, heads={str(path): progress.head})
    assert after.rewritten == () and list(after.points.step) == [10] and after.problems == []

"""Which files of a logdir losswatch can read, how each was recognised, and whose run it is.

Trainers leave their scalars in several shapes, and a user points losswatch at the folder
the trainer wrote, not at one file; so a walk must find every shape, and say what it found:

* TensorBoard event files (any name containing ``tfevents``): a run per directory;
* Hugging Face ``trainer_state.json``: the ``output_dir``'s own copy, else the copy of its
  newest ``checkpoint-<step>/`` only (each later checkpoint holds the earlier history, so
  reading several would count every point again);
* ``metrics.csv`` (Lightning's ``lightning_logs/version_*/``, any CSV logger);
* other ``*.json``, ``*.jsonl``, ``*.ndjson``, ``*.csv`` files whose first record looks like
  a loss log: a CSV header or the first of a list or of JSON lines with a step key or a
  key naming a loss; a single JSON object with a step key, ``log_history`` or ``points``.
  A model ``config.json``, a tokenizer or a summary such as HF's ``all_results.json`` is
  not mistaken for one, and a file that looks like a log but yields nothing is reported
  (`app.ingest.sources`).

A run is named by its folder relative to the walked root (the root itself by its own folder
name, never "."), or for a loss log with a specific name, folder and stem (``json/bad_batch``).
The walk is given a flat listing (local: `walk_local`; object storage: one listing of the
prefix), so local and remote logdirs are recognised by one set of rules.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from app.ingest.files import READ_TIMEOUT, read_head
from app.ingest.logdir import is_event_file
from app.ingest.problems import IngestError, Problem

TENSORBOARD = "tensorboard"
TRAINER_STATE = "trainer_state"
METRICS_CSV = "metrics_csv"
LOSS_LOG = "loss_log"

# How each kind is described by `losswatch runs`.
RECOGNISED = {
    TENSORBOARD: "TensorBoard event files",
    TRAINER_STATE: "Hugging Face trainer_state.json",
    METRICS_CSV: "metrics.csv (Lightning CSV logger)",
    LOSS_LOG: "JSON/CSV loss log",
}

LOOKED_FOR = (
    "looked for TensorBoard event files (*tfevents*), Hugging Face trainer_state.json "
    "(in the output_dir or its newest checkpoint-*), Lightning metrics.csv, and *.json, *.jsonl, "
    "*.ndjson, *.csv loss logs with a step key"
)

TEXT_SUFFIXES = (".json", ".jsonl", ".ndjson", ".csv")
SNIFF_BYTES = 64 << 10  # a loss log names its keys in its first records
# Files named like this say nothing about the run: the directory holding them does.
GENERIC_STEMS = {"trainer_state", "metrics", "log", "logs", "events", "train", "loss", "history", "scalars"}
_CHECKPOINT = re.compile(r"checkpoint-(\d+)")
_LOG_KEY = re.compile(
    rb'"(?:step|global_step|iteration|iter|_step|log_history|points|[^"\n]{0,60}loss[^"\n]{0,60})"\s*:', re.IGNORECASE
)
_DOCUMENT_KEY = re.compile(r"^(?:step|global_step|iteration|iter|_step|log_history|points)$")
_LOG_CELL = re.compile(r"^(?:step|global_step|iteration|iter|_step|log_history|points|.*loss.*)$", re.IGNORECASE)


@dataclass(frozen=True)
class Source:
    """One run's files, as found by a walk."""

    name: str
    kind: str  # one of RECOGNISED
    files: tuple[str, ...]  # full paths (or URLs), event files in name order

    @property
    def text(self) -> bool:
        """A JSON/CSV log, read whole (not by byte offset)."""
        return self.kind != TENSORBOARD


@dataclass(frozen=True)
class Found:
    sources: list[Source]
    problems: list[Problem]  # directories or candidate files that could not be read


Sniffer = Callable[[str], bytes]  # the first SNIFF_BYTES of a file; raises IngestError


def root_name(root: str) -> str:
    """The name of a run that is the walked folder itself: that folder's name."""
    return posixpath.basename(root.replace(os.sep, "/").rstrip("/")) or "."


def discover(top: str, files: Iterable[str], join: Callable[[str], str], sniff: Sniffer) -> Found:
    """The sources among `files` (paths relative to the walked folder, "/"-separated, which
    is itself named `top`); `join` makes a relative path a full one, `sniff` reads a
    candidate loss log's first bytes (raising IngestError when it cannot)."""

    def run_name(folder: str) -> str:
        return top if folder in ("", ".") else folder

    events: dict[str, list[str]] = {}
    states: dict[str, tuple[float, str]] = {}  # output_dir -> (rank, file): the newest copy wins
    texts: list[tuple[str, str, str]] = []  # (name, kind, file)
    problems: list[Problem] = []
    for rel in sorted(files):
        folder, name = posixpath.split(rel)
        if is_event_file(name):
            events.setdefault(folder, []).append(rel)
        elif name == "trainer_state.json":
            checkpoint = _CHECKPOINT.fullmatch(posixpath.basename(folder))
            output_dir, rank = (posixpath.dirname(folder), int(checkpoint.group(1))) if checkpoint else (folder, float("inf"))
            if output_dir not in states or states[output_dir][0] < rank:
                states[output_dir] = (rank, rel)
        elif name == "metrics.csv":
            texts.append((run_name(folder), METRICS_CSV, rel))
        elif name.endswith(TEXT_SUFFIXES):
            try:
                head = sniff(join(rel))
            except IngestError as e:
                problems.extend(e.problems)
                continue
            if looks_like_log(name, head):
                stem = name.split(".")[0]
                texts.append((run_name(folder) if stem in GENERIC_STEMS else posixpath.join(folder, stem), LOSS_LOG, rel))
    sources = [Source(run_name(folder), TENSORBOARD, tuple(join(f) for f in found)) for folder, found in events.items()]
    sources += [Source(run_name(output_dir), TRAINER_STATE, (join(rel),)) for output_dir, (_, rel) in states.items()]
    taken = {s.name for s in sources}
    for name, kind, rel in texts:
        if name in taken:  # e.g. a metrics.csv beside event files: both stay, told apart by file
            name = posixpath.join(name if name != top else "", posixpath.basename(rel))
        taken.add(name)
        sources.append(Source(name, kind, (join(rel),)))
    return Found(sorted(sources, key=lambda s: s.name), problems)


def named_source(top: str, name: str, path: str) -> Source:
    """The source of one file given by name (`path`, called `name`, in a folder called
    `top`): the user chose it, so it is read whatever its first bytes look like, and its run
    is named as a walk would name it from its folder."""
    stem = name.split(".")[0]
    if is_event_file(name):
        return Source(top, TENSORBOARD, (path,))
    if name == "trainer_state.json":
        return Source(top, TRAINER_STATE, (path,))
    if name == "metrics.csv":
        return Source(top, METRICS_CSV, (path,))
    return Source(top if stem in GENERIC_STEMS else stem, LOSS_LOG, (path,))


def looks_like_log(name: str, head: bytes) -> bool:
    """Whether a JSON/CSV file's first bytes look like a loss log (see the module): its
    first record (a CSV header, the first JSON line or document) has a step or loss key at
    its top level, or is a run document or a trainer state."""
    text = head.decode("utf-8", "replace").lstrip("\ufeff \t\r\n")
    if name.endswith(".csv"):
        return any(_LOG_CELL.match(cell.strip().strip('"')) for cell in text.split("\n", 1)[0].split(","))
    try:
        first, end = json.JSONDecoder().raw_decode(text)
    except ValueError:  # a document longer than the bytes sniffed: look for its keys
        return _LOG_KEY.search(head) is not None
    records = isinstance(first, list) or bool(text[end:].strip())  # a list, or JSON lines
    if isinstance(first, list):
        first = first[0] if first else None
    keys = [key for key in first if isinstance(key, str)] if isinstance(first, dict) else []
    # One object with a loss but no step is a summary (HF's all_results.json), not a curve.
    return any((_LOG_CELL if records else _DOCUMENT_KEY).match(key) for key in keys)


def walk_local(root: str) -> tuple[list[str], list[Problem]]:
    """Every file under the local directory `root`, relative to it, and the directories that
    could not be listed (reported; the rest is still walked)."""
    problems: list[Problem] = []

    def unreadable(err: OSError) -> None:
        problems.append(Problem(err.filename or root, f"cannot list directory: {err.strerror or err}"))

    found = []
    for directory, subdirs, names in os.walk(root, onerror=unreadable):
        subdirs.sort()
        rel = os.path.relpath(directory, root)
        for name in names:
            found.append(name if rel == "." else posixpath.join(rel.replace(os.sep, "/"), name))
    return found, problems


def discover_local(root: str, roots: Sequence[str] | None = None, timeout: float = READ_TIMEOUT) -> Found:
    """The sources under a local directory; candidates are sniffed under the same rules as
    any read (`app.ingest.files`: regular files only, within `roots`, bounded in time)."""
    files, problems = walk_local(root)
    found = discover(
        root_name(os.path.abspath(root)), files, lambda rel: os.path.join(root, rel),
        lambda path: read_head(path, SNIFF_BYTES, roots, timeout),
    )
    return Found(found.sources, problems + found.problems)

"""Scalars from text logs: JSON documents, JSON lines and CSV, read by one parser.

Formats
-------
The format is detected from the content unless the caller names one (`fmt`):

* ``csv``: the first non-blank character is neither ``{`` nor ``[``.  Comma-separated, with a
  header row (line 1); every later row is a *wide row* (below) whose keys are the column names.
* ``ndjson``: the first non-blank line is a complete JSON value and more lines follow.  Every
  line is read as a JSON document of its own; blank lines are ignored.
* ``json``: anything else is one JSON document.  Its top level is a record or a list of records.
* ``trainer_state``: a JSON document that must be a Hugging Face ``trainer_state.json``.  Only
  ever forced: detection reads such a file as ``json``, with the same result.

Empty input (only whitespace) reads as no runs and no problems, whatever the format.

Records
-------
A JSON object is read as the first of these that fits:

* a **run document** if it has ``"points"``:
  ``{"run": "r1", "points": [{"step": 10, "tag": "loss", "value": 2.31, "wall_time": 1.7e9}]}``
* a **trainer state** if it has ``"log_history"``: every entry of that list is a wide row (the
  ``epoch``, ``train_runtime``, ``total_flos`` ... keys are not metrics, see below);
* a **point** if it has ``"tag"`` or ``"value"``: ``{"step", "tag", "value"}`` are required,
  ``"wall_time"`` (null or absent: unknown) and ``"run"`` are optional, other keys are ignored;
* otherwise a **wide row**, as trainers print them:
  ``{"step": 10, "loss": 2.31, "grad_norm": 0.8, "learning_rate": 3e-4}``.

Wide rows (and CSV rows):

* the step is the first present of ``step``, ``global_step``, ``iteration``, ``iter``, ``_step``;
* the wall time is the first present of ``wall_time``, ``_timestamp``, ``timestamp`` (unknown if
  none is present, or if it is null);
* these keys are not metrics: the step and wall-time keys above, ``run``, ``epoch``, ``time``,
  ``runtime``, ``_runtime``, ``total_flos`` and every key ending in ``_runtime``;
* every other key is a metric whose tag is the key.  A nested object is flattened with ``/``:
  ``{"train": {"loss": 1.5}}`` is the tag ``train/loss`` (the exclusions above apply to top-level
  keys only).  Objects nested more than 10 levels below the row are not flattened further (and
  so are reported as values).  A metric's value must be a number: booleans, nulls and other
  strings are problems;
* in CSV an empty cell is no point rather than a problem, and columns without a name are ignored.

Runs: a run document's ``"run"`` (its points' own ``"run"`` keys are ignored), else a point's or
wide row's ``"run"`` key (or CSV column), else the `run` argument, else ``"default"``.  A trainer state always uses the `run` argument.
A ``"run"`` that is not a non-empty string is a problem and its document or record is skipped:
filing its points under another name would mix runs.

Numbers: a value or wall time is a JSON number, one of the bare tokens ``NaN``, ``Infinity``,
``-Infinity``, or a string holding a number, including ``nan``, ``inf`` and ``infinity`` in any
case with an optional sign.  NaN and infinities are kept as written; only those spellings mean
them: a number too large for float64 (``1e400``) is a bad value, never +Infinity (which would
raise a false non-finite alert).  A step is an integer from 0 to 2^53 - 1, the integers every
JSON reader and float64 hold exactly; an integral number (``10.0``, ``"10"``) is accepted,
``10.5`` is not.

Names: a tag or run is a non-empty string of at most 1024 characters without control
characters (U+0000-U+001F, U+007F) and without invalid UTF-8 or lone surrogates (``\ud800``):
such a name would be stored mangled or not at all, so its point is rejected.

Problems
--------
Every bad value is a `Problem` with the 1-based line it starts on and a JSON path such as
``$.points[3].value``, ``$[12].loss`` or ``$.log_history[4].loss`` (names that are not
identifiers are bracketed: ``$['val/loss']``).  An NDJSON line or CSV row is ``$`` on its own
line; a missing key is reported at the path of its object.  In a JSON document lines are looked
up only once something is wrong, so clean files pay nothing for them.

A point with any bad field is dropped; a wide row with a bad step, wall time or run is dropped
whole, while a bad metric drops only itself.  Everything else is kept.  In strict mode any
problem raises `IngestError` with all of them and nothing is returned.

The reasons, word for word (``<v>`` is the offending value written as JSON, cut to 40
characters ending in "..." if longer, or "an object" / "a list"):

* ``value must be a number, got <v>``
* ``step must be an integer from 0 to 9007199254740991, got <v>``
* ``wall_time must be a number or null, got <v>``
* ``tag must be a non-empty string, got <v>``, ``tag must be at most 1024 characters, got <v>``,
  ``tag must not contain control characters or invalid UTF-8, got <v>`` (the same for ``run``)
* ``points must be a list, got <v>`` and ``log_history must be a list, got <v>``
* ``expected an object, got <v>``
* ``missing "step"`` (also a wide row without a step key or a CSV row with an empty step cell),
  ``missing "tag"``, ``missing "value"``, ``missing "log_history"``
* ``invalid JSON: <json message> (column <n>)`` with the line, ``invalid JSON: nested too
  deeply``, ``invalid JSON: number too long`` (an integer of thousands of digits)
* ``invalid UTF-8`` (with the byte offset of the first bad byte; the records it is in are
  rejected by the rules above, the rest is read), ``invalid CSV: <csv message>``
* CSV: ``no step column``, ``duplicate column "<name>"``, ``expected <n> cells, got <m>``
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import ijson
import numpy as np

from app.ingest.points import Points
from app.ingest.problems import IngestError, Problem

FORMATS = ("json", "ndjson", "csv", "trainer_state")
DEFAULT_RUN = "default"
STEP_KEYS = ("step", "global_step", "iteration", "iter", "_step")
WALL_TIME_KEYS = ("wall_time", "_timestamp", "timestamp")
NOT_METRICS = frozenset(
    {*STEP_KEYS, *WALL_TIME_KEYS, "run", "epoch", "time", "runtime", "_runtime", "total_flos"}
)
NOT_METRIC_SUFFIX = "_runtime"
MAX_NESTING = 10
BATCH_POINTS = 65536  # points a streamed read gathers before handing them on
WHOLE_DOCUMENT_BYTES = 8 << 20  # a larger JSON list is streamed item by item
DETECT_BYTES = 1 << 20  # a streamed read tells the format from this much of the start

Path = tuple[str | int, ...]

MAX_STEP = 2**53 - 1  # exact in float64 and in every JSON reader
MAX_NAME = 1024
_JSON_SPACE = " \t\r"  # JSON whitespace within one line
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_NONBLANK = re.compile(r"\S")
_DIGITS = re.compile(r"\d{1,19}")  # more digits are out of range anyway; int() of thousands would raise
_BAD_NAME_CHARS = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")  # controls, lone surrogates (invalid UTF-8)
_NUMBER = re.compile(
    r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)", re.IGNORECASE
)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Token(float):
    """NaN, Infinity or -Infinity written as a bare JSON token: the only way a JSON number
    means a non-finite value (a plain float that is infinite overflowed)."""


_DECODER = json.JSONDecoder(parse_constant=lambda name: _Token(name))

_STEP_RULE = f"step must be an integer from 0 to {MAX_STEP}"
_VALUE_RULE = "value must be a number"
_WALL_TIME_RULE = "wall_time must be a number or null"


@dataclass(frozen=True)
class TextLogRead:
    """What one text log held: its runs in order of first appearance, and what was wrong."""

    runs: dict[str, Points]
    problems: list[Problem]


def parse_text_log(
    data: bytes | str,
    *,
    source: str,
    run: str | None = None,
    strict: bool = False,
    fmt: str | None = None,
) -> TextLogRead:
    """Read every run in one text log (see the module docstring for formats and rules).

    Lenient by default, because one bad line in a long log should not hide the rest of the
    curve; `strict` makes any problem fatal.  `fmt` names the format when content is ambiguous.
    Raises ValueError for an unknown `fmt` (a caller's mistake, not the input's).
    """
    _check_format(fmt)
    reader = _Reader(run or DEFAULT_RUN)
    text = _decode(reader, data)
    if _NONBLANK.search(text):
        _READERS[fmt or _detect(text)](reader, text)
    read = reader.result(source)
    if strict and read.problems:
        raise IngestError(read.problems)
    return read


def stream_text_log(
    f: IO[bytes],
    size: int,
    *,
    source: str,
    run: str | None = None,
    fmt: str | None = None,
    batch_points: int = BATCH_POINTS,
    whole_bytes: int = WHOLE_DOCUMENT_BYTES,
) -> Iterator[TextLogRead]:
    """`parse_text_log` of the `size` bytes of file `f`, read as it goes, so that a log of
    any length is analysed holding about `batch_points` points: each read yielded holds the
    points (runs in order of first appearance, their tags numbered as in the earlier reads)
    and problems found since the one before.  NDJSON is read by line and CSV by row; a JSON
    document of at most `whole_bytes` is read whole (as `parse_text_log` does), a larger
    list item by item with an incremental parser (its problems then name a JSON path but
    no line, and an invalid document keeps the records before the error).  A larger single
    object (run document, trainer state) is read whole."""
    _check_format(fmt)
    head = f.read(DETECT_BYTES)
    f.seek(0)
    text = head.decode("utf-8", "replace").removeprefix("\ufeff")
    if not _NONBLANK.search(text):
        return
    fmt = fmt or _detect(text, complete=size <= len(head))
    if fmt in _LINE_READERS:
        reader = _Reader(run or DEFAULT_RUN)
        records = _LINE_READERS[fmt](reader, _text_lines(reader, f))
    elif size > whole_bytes and fmt == "json" and text.lstrip(" \t\r\n").startswith("["):
        reader = _Reader(run or DEFAULT_RUN)
        records = _read_json_items(reader, f)
    else:
        yield parse_text_log(f.read(), source=source, run=run, fmt=fmt)
        return
    for count, _ in enumerate(records):
        if count % 256 == 0 and reader.pending() >= batch_points:
            yield reader.take(source)
    yield reader.take(source)


def _check_format(fmt: str | None) -> None:
    if fmt is not None and fmt not in FORMATS:
        raise ValueError(f"unknown text log format {fmt!r}; expected one of {', '.join(FORMATS)}")


# --- state of one parse ----------------------------------------------------------------------


class _Run:
    """One run's points as plain lists: appending is cheap, arrays are built once at the end."""

    __slots__ = ("tags", "tag", "step", "wall_time", "value")

    def __init__(self) -> None:
        self.tags: dict[str, int] = {}
        self.tag: list[int] = []
        self.step: list[int] = []
        self.wall_time: list[float] = []
        self.value: list[float] = []

    def add(self, tag: str, step: int, wall_time: float, value: float) -> None:
        self.tag.append(self.tags.setdefault(tag, len(self.tags)))
        self.step.append(step)
        self.wall_time.append(wall_time)
        self.value.append(value)

    def points(self) -> Points:
        return Points(
            tags=tuple(self.tags),
            tag=np.array(self.tag, np.int32),
            step=np.array(self.step, np.int64),
            wall_time=np.array(self.wall_time, np.float64),
            value=np.array(self.value, np.float64),
        )

    def take(self) -> Points:
        """The points added since the last `take` (tags keep their numbers)."""
        points = self.points()
        self.tag, self.step, self.wall_time, self.value = [], [], [], []
        return points


@dataclass
class _Issue:
    """A problem before its line is known: JSON documents learn lines only after parsing."""

    reason: str
    path: Path | None
    line: int | None
    offset: int | None = None


class _Reader:
    """The runs and problems one parse has gathered so far."""

    def __init__(self, default_run: str) -> None:
        self.default_run = default_run
        self.runs: dict[str, _Run] = {}
        self.issues: list[_Issue] = []

    def run(self, name: str) -> _Run:
        found = self.runs.get(name)
        if found is None:
            found = self.runs[name] = _Run()
        return found

    def issue(self, reason: str, path: Path | None, line: int | None) -> None:
        self.issues.append(_Issue(reason, path, line))

    def pending(self) -> int:
        return sum(len(run.step) for run in self.runs.values())

    def take(self, source: str) -> TextLogRead:
        """What was read since the last `take`: runs with new points, and new problems."""
        problems = self.problems(source)
        self.issues = []
        return TextLogRead({name: run.take() for name, run in self.runs.items() if run.step}, problems)

    def result(self, source: str) -> TextLogRead:
        return TextLogRead({name: run.points() for name, run in self.runs.items()}, self.problems(source))

    def problems(self, source: str) -> list[Problem]:
        return [
            Problem(
                source,
                issue.reason,
                offset=issue.offset,
                line=issue.line,
                json_path=None if issue.path is None else _format_path(issue.path),
            )
            for issue in self.issues
        ]


def _decode(reader: _Reader, data: bytes | str) -> str:
    """Text of the input; bad UTF-8 is one problem and the rest is still read."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as error:
            line = data.count(b"\n", 0, error.start) + 1
            reader.issues.append(_Issue("invalid UTF-8", None, line, offset=error.start))
            data = data.decode("utf-8", errors="surrogateescape")  # bad bytes stay visible to the name rules
    return data.removeprefix("\ufeff")


def _detect(text: str, complete: bool = True) -> str:
    """The format of a text (see the module); of its start only when not `complete`, where
    more lines are taken to follow a first line that ends within it."""
    begin = _WHITESPACE.match(text).end()
    if text[begin] not in "{[":
        return "csv"
    newline = text.find("\n", begin)
    more = not complete or _NONBLANK.search(text, newline)
    if newline != -1 and more and _is_json(text[begin:newline]):
        return "ndjson"
    return "json"


def _text_lines(reader: _Reader, f: IO[bytes]) -> Iterator[str]:
    """The lines of a file, newline kept, decoded as `_decode` decodes a whole text: the
    first bad UTF-8 is one problem and the rest is still read."""
    offset, reported = 0, False
    for number, raw in enumerate(f, 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            if not reported:
                reader.issues.append(_Issue("invalid UTF-8", None, number, offset=offset + error.start))
                reported = True
            line = raw.decode("utf-8", errors="surrogateescape")
        offset += len(raw)
        yield line.removeprefix("\ufeff") if number == 1 else line


def _is_json(line: str) -> bool:
    """Whether a line holds one whole JSON value.  Too deep or too long a number means it does
    but cannot be decoded: reading by lines then loses only that line."""
    try:
        _DECODER.decode(line)
    except json.JSONDecodeError:
        return False
    except (ValueError, RecursionError):
        return True
    return True


# --- formats ---------------------------------------------------------------------------------


def _read_json(reader: _Reader, text: str) -> None:
    _read_document(reader, text, _read_top)


def _read_trainer_state_file(reader: _Reader, text: str) -> None:
    _read_document(reader, text, _read_state_top)


def _read_document(
    reader: _Reader, text: str, read: Callable[[_Reader, Any, int | None], None]
) -> None:
    """One JSON document: lines are unknown while reading, so they are looked up after."""
    try:
        document = _DECODER.decode(text)
    except (ValueError, RecursionError) as error:
        reader.issue(_invalid_json(error), None, getattr(error, "lineno", None))
        return
    first = len(reader.issues)
    read(reader, document, None)
    _locate_lines(text, reader.issues[first:])


def _read_ndjson(reader: _Reader, text: str) -> None:
    deque(_ndjson_records(reader, text.split("\n")), 0)


def _ndjson_records(reader: _Reader, lines: Iterable[str]) -> Iterator[None]:
    """Read JSON lines (a trailing newline is JSON whitespace), pausing after each."""
    for number, line in enumerate(lines, 1):
        if line.strip(_JSON_SPACE + "\n"):
            document = _load_line(reader, line.rstrip("\n"), number)
            if document is not _INVALID:
                _read_top(reader, document, number)
        yield


def _read_csv(reader: _Reader, text: str) -> None:
    deque(_csv_records(reader, io.StringIO(text, newline="")), 0)


def _csv_records(reader: _Reader, lines: Iterable[str]) -> Iterator[None]:
    """Read CSV rows (`lines` keep their line ends), pausing after each."""
    rows = _csv_rows(reader, lines)
    header_line, header = next(rows, (1, []))
    columns = _csv_columns(reader, header, header_line)
    if not any(name in STEP_KEYS for _, name in columns):
        reader.issue("no step column", None, header_line)
        return
    for line, cells in rows:
        if len(cells) != len(header):
            reader.issue(f"expected {len(header)} cells, got {len(cells)}", None, line)
            continue
        row = {name: cell for i, name in columns if (cell := cells[i].strip())}
        _read_row_record(reader, row, (), line)
        yield


def _read_json_items(reader: _Reader, f: IO[bytes]) -> Iterator[None]:
    """The records of a JSON list, one item at a time (ijson's C parser when built)."""
    items = ijson.items(f, "item", use_float=True)
    try:
        for index, record in enumerate(items):
            _read_record(reader, record, (index,), None)
            yield
    except ijson.JSONError as error:
        reader.issue(f"invalid JSON: {error}", None, None)


_READERS: dict[str, Callable[[_Reader, str], None]] = {
    "json": _read_json,
    "trainer_state": _read_trainer_state_file,
    "ndjson": _read_ndjson,
    "csv": _read_csv,
}
_LINE_READERS: dict[str, Callable[[_Reader, Iterable[str]], Iterator[None]]] = {
    "ndjson": _ndjson_records,
    "csv": _csv_records,
}


class _Invalid:
    """Marks a line that did not decode (None is a valid JSON document)."""


_INVALID = _Invalid()


def _load_line(reader: _Reader, line: str, number: int) -> Any:
    """One NDJSON line.  The fast path skips `decode`'s whitespace handling; the slow one
    re-decodes the line as written, so an error's column is the column in the file."""
    stripped = line.strip(_JSON_SPACE)
    try:
        document, end = _DECODER.raw_decode(stripped)
    except (ValueError, RecursionError):
        end = -1
    if end == len(stripped):
        return document
    try:
        return _DECODER.decode(line)
    except (ValueError, RecursionError) as error:
        reader.issue(_invalid_json(error), None, number)
        return _INVALID


def _invalid_json(error: ValueError | RecursionError) -> str:
    """The decoder's message and column; its two errors without a position get plain words
    (the int-digits one would advise calling sys.set_int_max_str_digits)."""
    if isinstance(error, json.JSONDecodeError):
        return f"invalid JSON: {error.msg} (column {error.colno})"
    if isinstance(error, RecursionError):
        return "invalid JSON: nested too deeply"
    return "invalid JSON: number too long"


def _csv_rows(reader: _Reader, lines: Iterable[str]) -> Iterator[tuple[int, list[str]]]:
    """Non-blank rows with the line each starts on (a quoted cell may span lines); a row the
    csv module rejects is a problem, not the end of the file."""
    rows = csv.reader(lines)
    end = 0
    while True:
        start = end + 1
        try:
            cells = next(rows)
        except StopIteration:
            return
        except csv.Error as error:
            reader.issue(f"invalid CSV: {error}", None, start)
            cells = []
        end = rows.line_num
        if "".join(cells).strip():
            yield start, cells


def _csv_columns(reader: _Reader, header: list[str], line: int) -> list[tuple[int, str]]:
    """(index, name) of the columns to read: unnamed columns (a written index) are skipped."""
    columns: dict[str, int] = {}
    for index, cell in enumerate(header):
        name = cell.strip()
        if name in columns:
            reader.issue(f"duplicate column {json.dumps(name, ensure_ascii=False)}", None, line)
        elif name:
            columns[name] = index
    return [(index, name) for name, index in columns.items()]


# --- records ---------------------------------------------------------------------------------


def _read_top(reader: _Reader, document: Any, line: int | None) -> None:
    if isinstance(document, list):
        for index, record in enumerate(document):
            _read_record(reader, record, (index,), line)
    else:
        _read_record(reader, document, (), line)


def _read_record(reader: _Reader, record: Any, path: Path, line: int | None) -> None:
    if not isinstance(record, dict):
        reader.issue(f"expected an object, got {_show(record)}", path, line)
    elif "points" in record:
        _read_run_document(reader, record, path, line)
    elif "log_history" in record:
        _read_trainer_state(reader, record, path, line)
    elif "tag" in record or "value" in record:
        name = _run_name(reader, record, path, line)
        if name is not None:
            _read_point(reader, reader.run(name), record, path, line)
    else:
        _read_row_record(reader, record, path, line)


def _run_name(reader: _Reader, record: dict, path: Path, line: int | None) -> str | None:
    """The run a record names, or None when its "run" is bad: guessing would mix runs."""
    if "run" not in record:
        return reader.default_run
    raw = record["run"]
    problem = _name_problem(raw, "run")
    if problem is not None:
        reader.issue(problem, (*path, "run"), line)
        return None
    return raw


def _read_run_document(reader: _Reader, document: dict, path: Path, line: int | None) -> None:
    name = _run_name(reader, document, path, line)
    points = document["points"]
    if not isinstance(points, list):
        reader.issue(f"points must be a list, got {_show(points)}", (*path, "points"), line)
    elif name is not None:
        run = reader.run(name)
        for index, point in enumerate(points):
            _read_point(reader, run, point, (*path, "points", index), line)


def _read_state_top(reader: _Reader, document: Any, line: int | None) -> None:
    if not isinstance(document, dict):
        reader.issue(f"expected an object, got {_show(document)}", (), line)
    elif "log_history" not in document:
        reader.issue('missing "log_history"', (), line)
    else:
        _read_trainer_state(reader, document, (), line)


def _read_trainer_state(reader: _Reader, state: dict, path: Path, line: int | None) -> None:
    history = state["log_history"]
    if not isinstance(history, list):
        where = (*path, "log_history")
        reader.issue(f"log_history must be a list, got {_show(history)}", where, line)
        return
    run = reader.run(reader.default_run)
    for index, entry in enumerate(history):
        where = (*path, "log_history", index)
        if isinstance(entry, dict):
            _read_row(reader, run, entry, where, line)
        else:
            reader.issue(f"expected an object, got {_show(entry)}", where, line)


def _read_point(reader: _Reader, run: _Run, point: Any, path: Path, line: int | None) -> None:
    """Keep one point, or report every bad field of it."""
    if not isinstance(point, dict):
        reader.issue(f"expected an object, got {_show(point)}", path, line)
    elif not _add_plain_point(run, point):
        _read_point_fields(reader, run, point, path, line)


def _add_plain_point(run: _Run, point: dict) -> bool:
    """Add the common, clean point with inline checks only: a million points must not cost
    seconds.  False means "look closer", not "bad"."""
    tag, step, value = point.get("tag"), point.get("step"), point.get("value")
    wall_time = point.get("wall_time")
    if (
        type(tag) is str
        and (tag in run.tags or _name_problem(tag, "tag") is None)
        and type(step) is int
        and 0 <= step <= MAX_STEP
        and type(value) is float
        and value - value == 0.0  # finite: a plain float that is not overflowed
        and (wall_time is None or (type(wall_time) is float and wall_time - wall_time == 0.0))
    ):
        run.add(tag, step, math.nan if wall_time is None else wall_time, value)
        return True
    return False


def _read_point_fields(
    reader: _Reader, run: _Run, point: dict, path: Path, line: int | None
) -> None:
    fields = []
    for key, convert, rule in _POINT_FIELDS:
        if key not in point:
            reader.issue(f'missing "{key}"', path, line)
            fields.append(None)
        elif key == "tag":
            problem = _name_problem(point[key], "tag")
            if problem is not None:
                reader.issue(problem, (*path, key), line)
            fields.append(None if problem else point[key])
        else:
            fields.append(_checked(reader, point, key, convert, rule, path, line))
    wall_time = _optional_wall_time(reader, point, "wall_time", path, line)
    if None not in fields and wall_time is not None:
        step, tag, value = fields
        run.add(tag, step, wall_time, value)


def _read_row_record(reader: _Reader, row: dict, path: Path, line: int | None) -> None:
    name = _run_name(reader, row, path, line)
    if name is not None:
        _read_row(reader, reader.run(name), row, path, line)


def _read_row(reader: _Reader, run: _Run, row: dict, path: Path, line: int | None) -> None:
    """One wide row: its step and wall time are shared by all its metrics, so a bad one drops
    the row, while a bad metric drops only itself."""
    step_key = _first_present(row, STEP_KEYS)
    if step_key is None:
        reader.issue('missing "step"', path, line)
        return
    step = _checked(reader, row, step_key, _step, _STEP_RULE, path, line)
    wall_key = _first_present(row, WALL_TIME_KEYS)
    wall_time = _optional_wall_time(reader, row, wall_key, path, line)
    if step is None or wall_time is None:
        return
    tags, tag_of, steps, wall_times, values = run.tags, run.tag, run.step, run.wall_time, run.value
    for key, raw in row.items():
        # The common metric, checked inline (a long log has millions): a finite float under
        # a tag already taken, which is then no step, wall-time or other excluded key.
        if type(raw) is float and raw - raw == 0.0 and key in tags and key not in NOT_METRICS and not key.endswith(NOT_METRIC_SUFFIX):
            tag_of.append(tags[key])
            steps.append(step)
            wall_times.append(wall_time)
            values.append(raw)
            continue
        for tag, raw_value, where in _metrics({key: raw}, path, "", 0):
            _read_metric(reader, run, tag, raw_value, where, line, step, wall_time)


def _read_metric(
    reader: _Reader, run: _Run, tag: str, raw: Any, where: Path, line: int | None, step: int, wall_time: float
) -> None:
    value = _number(raw)
    problem = None if tag in run.tags else _name_problem(tag, "tag")
    if problem is not None:
        reader.issue(problem, where, line)
    elif value is None:
        reader.issue(f"{_VALUE_RULE}, got {_show(raw)}", where, line)
    else:
        run.add(tag, step, wall_time, value)


def _first_present(row: dict, keys: tuple[str, ...]) -> str | None:
    for key in keys:
        if key in row:
            return key
    return None


def _metrics(row: dict, path: Path, prefix: str, depth: int) -> Iterator[tuple[str, Any, Path]]:
    """(tag, raw value, path) of a wide row's metrics, nested objects flattened with "/".

    The depth limit keeps recursion (here and in `_Locator`) far from Python's stack limit,
    which a hostile but valid document could otherwise reach."""
    for key, raw in row.items():
        if depth == 0 and (key in NOT_METRICS or key.endswith(NOT_METRIC_SUFFIX)):
            continue
        if isinstance(raw, dict) and depth < MAX_NESTING:
            yield from _metrics(raw, (*path, key), f"{prefix}{key}/", depth + 1)
        else:
            yield f"{prefix}{key}", raw, (*path, key)


def _optional_wall_time(
    reader: _Reader, record: dict, key: str | None, path: Path, line: int | None
) -> float | None:
    if key is None or key not in record:
        return math.nan
    return _checked(reader, record, key, _wall_time, _WALL_TIME_RULE, path, line)


def _checked(
    reader: _Reader,
    record: dict,
    key: str,
    convert: Callable[[Any], Any],
    rule: str,
    path: Path,
    line: int | None,
) -> Any:
    """`convert(record[key])`, or None after reporting the value against `rule`."""
    raw = record[key]
    result = convert(raw)
    if result is None:
        reader.issue(f"{rule}, got {_show(raw)}", (*path, key), line)
    return result


# --- values ----------------------------------------------------------------------------------


def _number(raw: Any) -> float | None:
    """A float, or None: bool is not a number here even though Python says it is an int."""
    kind = type(raw)
    if kind is float:
        return raw if raw - raw == 0.0 else None  # infinite: overflowed, not written as a token
    if kind is _Token:
        return float(raw)
    if kind is int:
        try:
            return float(raw)
        except OverflowError:
            return None
    if kind is str and _NUMBER.fullmatch(raw.strip()):  # float() alone would take "1_0"
        number = float(raw)
        overflowed = math.isinf(number) and "inf" not in raw.lower()
        return None if overflowed else number
    return None


def _step(raw: Any) -> int | None:
    if type(raw) is str and _DIGITS.fullmatch(raw.strip()):
        raw = int(raw)  # exactly, where a float would round big steps
    if type(raw) is int:
        return raw if 0 <= raw <= MAX_STEP else None
    number = _number(raw)
    if number is None or not number.is_integer() or not 0 <= number <= MAX_STEP:
        return None
    return int(number)


def _wall_time(raw: Any) -> float | None:
    return math.nan if raw is None else _number(raw)


def _name_problem(raw: Any, what: str) -> str | None:
    """Why `raw` cannot be a tag or run name (`what`), or None if it can."""
    if type(raw) is not str or not raw:
        return f"{what} must be a non-empty string, got {_show(raw)}"
    if len(raw) > MAX_NAME:
        return f"{what} must be at most {MAX_NAME} characters, got {_show(raw)}"
    if _BAD_NAME_CHARS.search(raw):
        return f"{what} must not contain control characters or invalid UTF-8, got {_show(raw)}"
    return None


_POINT_FIELDS: tuple[tuple[str, Callable[[Any], Any], str], ...] = (
    ("step", _step, _STEP_RULE),
    ("tag", _name_problem, ""),  # names say themselves what is wrong with them
    ("value", _number, _VALUE_RULE),
)


def _show(raw: Any) -> str:
    """The offending value as JSON, cut short so that a reason stays one readable line."""
    if isinstance(raw, dict):
        return "an object"
    if isinstance(raw, list):
        return "a list"
    if isinstance(raw, _Token):
        raw = float(raw)
    elif type(raw) is float and math.isinf(raw):
        return "a number beyond float64's range"
    text = json.dumps(raw, ensure_ascii=False)
    if _BAD_NAME_CHARS.search(text):  # lone surrogates cannot be encoded: escape them
        text = json.dumps(raw)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _format_path(path: Path) -> str:
    parts = ["$"]
    for key in path:
        if isinstance(key, int):
            parts.append(f"[{key}]")
        elif _NAME.fullmatch(key):
            parts.append(f".{key}")
        else:
            escaped = key.replace("\\", "\\\\").replace("'", "\\'")
            escaped = _BAD_NAME_CHARS.sub(lambda m: f"\\u{ord(m.group()):04x}", escaped)  # printable, encodable
            parts.append(f"['{escaped}']")
    return "".join(parts)


# --- lines of JSON document problems ---------------------------------------------------------


def _locate_lines(text: str, issues: list[_Issue]) -> None:
    """Give each issue in a parsed JSON document the line its value starts on.

    Parsing with positions would slow every read; this re-scan runs only when something is
    wrong, skips whole values with the C scanner and stops at the last one it needs.
    """
    targets = {issue.path for issue in issues if issue.path is not None and issue.line is None}
    if not targets:
        return
    lines = _line_numbers(text, _Locator(text, targets).positions())
    for issue in issues:
        if issue.path in targets:
            issue.line = lines.get(issue.path)


def _line_numbers(text: str, positions: dict[Path, int]) -> dict[Path, int]:
    lines: dict[Path, int] = {}
    line, counted = 1, 0
    for path, position in sorted(positions.items(), key=lambda item: item[1]):
        line += text.count("\n", counted, position)
        counted = position
        lines[path] = line
    return lines


class _AllFound(Exception):
    """Ends the scan early: everything after the last wanted value is irrelevant."""


class _Locator:
    """Character positions of given paths in a JSON text known to be valid."""

    def __init__(self, text: str, targets: set[Path]) -> None:
        self.text = text
        self.targets = targets
        self.tree: dict = {}
        for path in targets:
            node = self.tree
            for key in path:
                node = node.setdefault(key, {})
        self.found: dict[Path, int] = {}

    def positions(self) -> dict[Path, int]:
        try:
            self._visit(_WHITESPACE.match(self.text).end(), self.tree, ())
        except _AllFound:
            pass
        return self.found

    def _visit(self, at: int, node: dict, path: Path) -> int:
        """Record `path` if wanted and return the end of the value starting at `at`."""
        if path in self.targets:
            self.found[path] = at
            if len(self.found) == len(self.targets):
                raise _AllFound
        if node and self.text[at] in "{[":
            return self._members(at, node, path)
        return _DECODER.raw_decode(self.text, at)[1]

    def _members(self, at: int, node: dict, path: Path) -> int:
        text = self.text
        close = "}" if text[at] == "{" else "]"
        at = _WHITESPACE.match(text, at + 1).end()
        index = 0
        while text[at] != close:
            if close == "}":
                key, at = _DECODER.raw_decode(text, at)
                at = _WHITESPACE.match(text, _WHITESPACE.match(text, at).end() + 1).end()
            else:
                key, index = index, index + 1
            child = node.get(key)
            if child is None:
                at = _DECODER.raw_decode(text, at)[1]
            else:
                at = self._visit(at, child, (*path, key))
            at = _WHITESPACE.match(text, at).end()
            if text[at] == ",":
                at = _WHITESPACE.match(text, at + 1).end()
        return at + 1

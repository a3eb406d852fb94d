"""Every scalar point of a path as long-form rows: losswatch's answer to
`tbparse.SummaryReader(path).scalars`, with nothing sampled and restarts kept apart."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import IO

import numpy as np
import pandas as pd

from analyzers.series import current_view
from app.ingest.logdir import Run
from app.ingest.points import Points, json_number
from app.ingest.problems import Problem
from app.ingest.sources import read_path
from app.ingest.streamed import StreamSource

COLUMNS = ["run", "tag", "step", "wall_time", "value", "segment"]
FORMATS = ("csv", "jsonl", "parquet")


def read_scalars(path: str, *, current: bool = False, strict: bool = False) -> pd.DataFrame:
    """All scalar points under `path` (logdir, event file, JSON/NDJSON/CSV log).

    By default one row per point as written: a step rewritten after a restart appears once
    per write, each with its `segment`.  `current=True` keeps only what a resumed run
    stands on (see `app.ingest.restarts`).  Bad records are skipped (strict=True raises
    IngestError instead).
    """
    return runs_frame(read_path(path, strict=strict).runs.values(), current=current)


def runs_frame(runs: Iterable[Run], *, current: bool = False) -> pd.DataFrame:
    """Long-form rows of already-read runs; run and tag are categoricals (cheap to hold)."""
    if current:
        runs = [_current(r) for r in runs]
    runs = [r for r in runs if len(r.points)]
    if not runs:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in _EMPTY_DTYPES.items()})
    run_names = [r.name for r in runs]
    tag_names = sorted({t for r in runs for t in r.points.tags})
    tag_code = {t: i for i, t in enumerate(tag_names)}
    return pd.DataFrame(
        {
            "run": pd.Categorical.from_codes(
                np.repeat(np.arange(len(runs), dtype=np.int32), [len(r.points) for r in runs]),
                categories=run_names,
            ),
            "tag": pd.Categorical.from_codes(
                np.concatenate([_tag_codes(r, tag_code) for r in runs]), categories=tag_names
            ),
            "step": np.concatenate([r.points.step for r in runs]),
            "wall_time": np.concatenate([r.points.wall_time for r in runs]),
            "value": np.concatenate([r.points.value for r in runs]),
            "segment": np.concatenate([r.segment for r in runs]),
        }
    )


def write_frame(frame: pd.DataFrame, fmt: str, out: IO[bytes]) -> None:
    """Write rows as CSV, JSON lines or Parquet.  Non-finite values survive each format:
    CSV writes nan/inf, JSON lines the strings "NaN"/"Infinity"/"-Infinity"."""
    with RowWriter(fmt, out) as writer:
        writer.write(frame)


def stream_rows(source: StreamSource, writer: RowWriter, report: Callable[[list[Problem]], None]) -> int:
    """Write a source's points as they are read, a batch at a time (so memory follows the
    batch, not the run), reporting problems as they come.  A text log with several runs
    names them only once all are known: it is read twice.  Returns the rows written."""
    runs = None
    if source.names_need_all:
        runs = list(dict.fromkeys(batch.run for batch in source.batches() if len(batch.points)))
    rows = 0
    for batch in source.batches():
        report(batch.problems)
        if len(batch.points):
            writer.write(batch_frame(source.name(batch.run, runs or [batch.run]), batch.points, batch.segment))
            rows += len(batch.points)
    return rows


def batch_frame(run: str, points: Points, segment: np.ndarray) -> pd.DataFrame:
    """Long-form rows of one run's points."""
    return pd.DataFrame(
        {
            "run": pd.Categorical.from_codes(np.zeros(len(points), np.int32), categories=[run]),
            "tag": pd.Categorical.from_codes(points.tag, categories=list(points.tags)),
            "step": points.step,
            "wall_time": points.wall_time,
            "value": points.value,
            "segment": segment.astype(np.int32),
        }
    )


class RowWriter:
    """Rows written as they come, in one format (see `write_frame`): CSV has one header,
    Parquet one row group per write, under one schema."""

    def __init__(self, fmt: str, out: IO[bytes]) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
        self.fmt, self.out = fmt, out
        self.header = True
        self.parquet = None

    def write(self, frame: pd.DataFrame) -> None:
        if self.fmt == "csv":
            frame.to_csv(self.out, index=False, header=self.header, float_format=None, lineterminator="\n")
        elif self.fmt == "jsonl":
            _write_jsonl(frame, self.out)
        else:
            self._write_parquet(frame)
        self.header = False

    def close(self) -> None:
        if self.fmt == "parquet":
            if self.parquet is None:  # no rows: still a file with the columns
                self._write_parquet(pd.DataFrame({c: pd.Series(dtype=t) for c, t in _EMPTY_DTYPES.items()}))
            self.parquet.close()

    def __enter__(self) -> RowWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write_parquet(self, frame: pd.DataFrame) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = pa.schema([("run", pa.dictionary(pa.int32(), pa.string())), ("tag", pa.dictionary(pa.int32(), pa.string())),
                            ("step", pa.int64()), ("wall_time", pa.float64()), ("value", pa.float64()), ("segment", pa.int32())])
        table = pa.Table.from_pandas(frame, preserve_index=False).cast(schema)
        if self.parquet is None:
            self.parquet = pq.ParquetWriter(self.out, table.schema)
        self.parquet.write_table(table)


_EMPTY_DTYPES = {"run": "category", "tag": "category", "step": "int64", "wall_time": "float64", "value": "float64", "segment": "int32"}


def _current(run: Run) -> Run:
    p = run.points
    keep = current_view(p.tag, p.step, run.segment, {r.segment: r.to_step for r in run.rollbacks})
    points = Points(p.tags, p.tag[keep], p.step[keep], p.wall_time[keep], p.value[keep])
    return replace(run, points=points, segment=run.segment[keep])


def _tag_codes(run: Run, tag_code: dict[str, int]) -> np.ndarray:
    table = np.array([tag_code[t] for t in run.points.tags], dtype=np.int32)
    return table[run.points.tag]


def _write_jsonl(frame: pd.DataFrame, out: IO[bytes]) -> None:
    for run, tag, step, wall, value, segment in frame.itertuples(index=False, name=None):
        row = {
            "run": run,
            "tag": tag,
            "step": int(step),
            "wall_time": None if np.isnan(wall) else float(wall),
            "value": json_number(value),
            "segment": int(segment),
        }
        out.write(json.dumps(row).encode() + b"\n")

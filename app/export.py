"""Every scalar point of a path as long-form rows: losswatch's answer to
`tbparse.SummaryReader(path).scalars`, with nothing sampled and restarts kept apart."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from typing import IO

import numpy as np
import pandas as pd

from analyzers.series import current_view
from app.ingest.logdir import Run
from app.ingest.points import Points, json_number
from app.ingest.sources import read_path

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
    if fmt == "csv":
        frame.to_csv(out, index=False, float_format=None, lineterminator="\n")
    elif fmt == "jsonl":
        _write_jsonl(frame, out)
    elif fmt == "parquet":
        frame.to_parquet(out, index=False)
    else:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")


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

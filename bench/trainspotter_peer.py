"""Runs trainspotter (PyPI, never a losswatch dependency) on curves sent as JSON on stdin and
prints its findings as JSON, so bench/accuracy.py can score it beside losswatch on the same
labelled runs.  Executed by the interpreter of a separate virtualenv that has trainspotter:

    python3 -m venv /work/scratch-venv && /work/scratch-venv/bin/pip install trainspotter==0.2.6

Uses only the standard library and trainspotter.  Each curve set is written the way a user
hands a log to trainspotter without a dedicated reader, one JSONL row per step with a column
per metric, read with its own JSONL reader (which maps the names onto its vocabulary:
`val/loss` becomes `eval/loss`, `train/lr` becomes `lr`) and analysed with its default
detector set (`run_all`).  Keras' `train/` and `validation/` event-file runs arrive as one
set with columns `train/epoch_loss`, `validation/epoch_loss`: the names trainspotter's own
TensorBoard reader gives a Keras logdir.

stdin:  [{"key": K, "columns": {NAME: [[step, value], ...]}}, ...]  (values may be "NaN")
stdout: [{"key": K, "findings": [{"column", "detector", "title", "severity", "step_start",
          "step_end"}, ...]}, ...]
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from trainspotter.detectors import run_all
from trainspotter.readers import load_run
from trainspotter.readers.common import build_key_map


def analyse(columns: dict[str, list[list]], workdir: Path) -> list[dict]:
    rows: dict[int, dict] = {}
    for name, points in columns.items():
        for step, value in points:
            rows.setdefault(int(step), {"step": int(step)})[name] = value
    path = workdir / "log.jsonl"
    with path.open("w") as out:
        for step in sorted(rows):
            out.write(json.dumps(rows[step]) + "\n")
    run = load_run(path, fmt="jsonl")
    run.finalize()
    back = {canonical: raw for raw, canonical in build_key_map(list(columns)).items()}
    return [
        {"column": back.get(f.metric, f.metric), "detector": f.detector, "title": f.title,
         "severity": f.severity, "step_start": f.step_start, "step_end": f.step_end}
        for f in run_all(run)
    ]


def main() -> None:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for item in json.load(sys.stdin):
            results.append({"key": item["key"], "findings": analyse(item["columns"], Path(tmp))})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()

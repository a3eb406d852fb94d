"""The `losswatch` command line.  Errors from any layer become one message on stderr and
an exit code here, never a traceback: 0 done, 2 usage or input errors."""

from __future__ import annotations

import contextlib
import importlib.util
import sys

import click
import numpy as np

from app.export import FORMATS, runs_frame, write_frame
from app.ingest.problems import IngestError, Problem
from app.ingest.sources import PathRead, read_path

EXIT_INPUT_ERROR = 2


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="losswatch")
def main() -> None:
    """Watch training runs' loss curves and say when something goes wrong."""


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--strict", is_flag=True, help="Fail (exit 2) on any bad record instead of skipping it.")
def runs(paths: tuple[str, ...], strict: bool) -> None:
    """List the runs and series found under each PATH, with point counts and step ranges."""
    for path in paths:
        read = _read(path, strict)
        for run in read.runs.values():
            p = run.points
            click.echo(f"{path} :: {run.name}  ({len(p)} points, {len(run.rollbacks)} rollbacks)")
            counts = np.bincount(p.tag, minlength=len(p.tags))
            for i, name in enumerate(p.tags):
                if counts[i]:
                    steps = p.step[p.tag == i]
                    click.echo(f"    {name:<40} {counts[i]:>9} points  steps {steps.min()}..{steps.max()}")


@main.command()
@click.argument("path", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="csv", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), help="File to write (default: stdout).")
@click.option("--current", is_flag=True, help="Only the current view: the later write of a step wins after a restart.")
@click.option("--strict", is_flag=True, help="Fail (exit 2) on any bad record instead of skipping it.")
def export(path: str, fmt: str, output: str | None, current: bool, strict: bool) -> None:
    """Write every scalar point under PATH as long-form rows: run, tag, step, wall_time,
    value, segment.  PATH is a logdir, an event file, or a JSON/NDJSON/CSV/trainer_state log."""
    if fmt == "parquet":
        if importlib.util.find_spec("pyarrow") is None:
            _fail("parquet export needs pyarrow: pip install 'losswatch[parquet]'")
        if output is None and sys.stdout.isatty():
            raise click.UsageError("parquet is binary: give -o FILE or redirect stdout")
    frame = runs_frame(_read(path, strict).runs.values(), current=current)
    with open(output, "wb") if output else contextlib.nullcontext(sys.stdout.buffer) as out:
        write_frame(frame, fmt, out)


def _read(path: str, strict: bool) -> PathRead:
    progress = _progress() if sys.stderr.isatty() else None
    try:
        read = read_path(path, strict=strict, progress=progress)
    except IngestError as e:
        _report(e.problems)
        sys.exit(EXIT_INPUT_ERROR)
    _report(read.problems)
    return read


def _progress():
    def show(done: int, total: int) -> None:
        click.echo(f"\rreading runs: {done}/{total}", err=True, nl=done == total)

    return show


def _report(problems: list[Problem]) -> None:
    for problem in problems:
        click.echo(f"losswatch: {problem}", err=True)


def _fail(message: str) -> None:
    click.echo(f"losswatch: {message}", err=True)
    sys.exit(EXIT_INPUT_ERROR)

"""The `losswatch` command line.  Errors from any layer become one message on stderr and
an exit code here, never a traceback: 0 done (nothing at or above --fail-on), 1 alerts at or
above --fail-on, 2 usage or input errors."""

from __future__ import annotations

import contextlib
import importlib.util
import ipaddress
import json
import sys
import time
import tomllib
from urllib.parse import urlsplit

import click
import httpx
import numpy as np

from analyzers.config import AnalysisConfig, ConfigError
from analyzers.findings import Severity
from app import analysis
from app import scan as scanner
from app.alerts import receivers, silences
from app.alerts.webhooks import DeliveryConfig, longest_send
from app.cli_help import HelpfulGroup
from app.export import FORMATS, RowWriter, runs_frame, stream_rows, write_frame
from app.ingest.discover import LOOKED_FOR
from app.ingest.problems import IngestError, Problem
from app.ingest.sources import PathRead, read_path
from app.ingest.streamed import StreamedPath, stream_path
from app.report import (
    merged_changes,
    open_alerts_markdown,
    open_alerts_table,
    render_changes_markdown,
    render_changes_table,
    render_health,
    render_table,
    scan_summary,
)
from app.store import silences as stored_silences
from app.store import tokens
from app.store.db import Store, StoreError, open_store

_db_option = click.option(
    "--db", "db_url", envvar="LOSSWATCH_DB", show_envvar=True,
    help="Store URL: sqlite:///FILE or postgresql://... (default: a SQLite file in the user state directory).",
)

def _external_url(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """scheme://host[:port] with no path: the origin browsers see."""
    if value is None:
        return None
    parts = urlsplit(value)
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    if (parts.scheme not in ("http", "https") or not parts.hostname or not port_ok or parts.path.strip("/")
            or parts.query or parts.fragment):
        raise click.BadParameter(f"{value!r} is not http(s)://HOST[:PORT]")
    return f"{parts.scheme}://{parts.netloc}"


_webhook_option = click.option(
    "--webhook", "webhooks", multiple=True,
    help="POST alert changes here (repeatable; slack+https://... for Slack; "
         "?min_severity=&on=&kinds=&runs= choose which: see Webhook delivery).",
)
_alertmanager_option = click.option(
    "--alertmanager", "alertmanagers", multiple=True,
    help="An Alertmanager's URL: alerts are posted to its /api/v2/alerts (repeatable; takes the --webhook options).",
)
_links_option = click.option(
    "--external-url", envvar="LOSSWATCH_EXTERNAL_URL", show_envvar=True, callback=_external_url,
    help="Where the service is reached (http(s)://HOST[:PORT]): messages link to its run and alert pages.",
)
_allow_empty_option = click.option(
    "--allow-empty", is_flag=True,
    help="A PATH with no run to read is not an error (a logdir that is empty until training starts).",
)

EXIT_ALERTS = 1
EXIT_INPUT_ERROR = 2
FAIL_ON = ("info", "warning", "critical", "never")


@click.group(cls=HelpfulGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="losswatch")
def main() -> None:
    """Watch training runs' loss curves and say when something goes wrong."""


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--strict", is_flag=True, help="Fail (exit 2) on any bad record instead of skipping it.")
@_allow_empty_option
def runs(paths: tuple[str, ...], strict: bool, allow_empty: bool) -> None:
    """List what would be analysed under each PATH: every run, how its source was
    recognised, and its series with point counts and step ranges."""
    for path in paths:
        read = _read(path, strict, allow_empty)
        for run in read.runs.values():
            p = run.points
            click.echo(f"{path} :: {run.name}  ({len(p)} points, {len(run.rollbacks)} rollbacks)"
                       f"  [{read.recognised.get(run.name, '')}]")
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
@_allow_empty_option
def export(path: str, fmt: str, output: str | None, current: bool, strict: bool, allow_empty: bool) -> None:
    """Write every scalar point under PATH as long-form rows: run, tag, step, wall_time,
    value, segment.  PATH is a logdir, an event file, or a JSON/NDJSON/CSV/trainer_state log."""
    if fmt == "parquet":
        if importlib.util.find_spec("pyarrow") is None:
            _fail("parquet export needs pyarrow: pip install 'losswatch[parquet]'")
        if output is None and sys.stdout.isatty():
            raise click.UsageError("parquet is binary: give -o FILE or redirect stdout")
    if current or strict:  # a later rollback hides earlier rows; strict writes nothing if anything is wrong
        frame = runs_frame(_read(path, strict, allow_empty).runs.values(), current=current)
        with open(output, "wb") if output else contextlib.nullcontext(sys.stdout.buffer) as out:
            write_frame(frame, fmt, out)
        return
    streamed = _stream(path)
    _report(streamed.problems)
    with open(output, "wb") if output else contextlib.nullcontext(sys.stdout.buffer) as out, RowWriter(fmt, out) as writer:
        rows = sum(stream_rows(source, writer, _report) for source in streamed.sources)
        if not rows and not allow_empty:
            _fail(no_runs(path))
        if not rows:
            writer.write(runs_frame([]))


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="TOML file of detector settings.")
@click.option(
    "--fail-on", type=click.Choice(FAIL_ON), default="warning", show_default=True,
    help="Exit 1 when an alert of this severity or worse is found.",
)
@click.option("--strict", is_flag=True, help="Fail (exit 2) on any bad record instead of skipping it.")
@_allow_empty_option
def analyze(paths: tuple[str, ...], fmt: str, config_file: str | None, fail_on: str, strict: bool, allow_empty: bool) -> None:
    """Print every alert for every run under each PATH (logdir, event file, JSON/NDJSON/CSV
    or trainer_state log).  Stateless: each call reads and analyses everything, as it
    reads: memory stays bounded whatever the runs' length."""
    config = _load_config(config_file)
    assessed = [(path, run) for path in paths for run in _assess_path(path, config, strict, allow_empty)]
    for _, run in assessed:
        if run.error is not None:  # reported; every other run is still analysed
            click.echo(f"losswatch: {run.error}", err=True)
    alerts = [alert for _, run in assessed for alert in run.alerts]
    if fmt == "json":
        click.echo(json.dumps({"runs": [{**_run_summary(p, r), "health": r.health.to_dict() if r.health else None}
                                        for p, r in assessed],
                               "alerts": [a.to_dict() for a in alerts]}, indent=2))
    else:
        click.echo(render_table(alerts, len(assessed)))
        told = [(r.name, r.health) for _, r in assessed if r.health is not None]
        if told:
            click.echo(render_health(told))
    if any(run.error is not None for _, run in assessed):
        sys.exit(EXIT_INPUT_ERROR)
    if fail_on != "never" and any(a.finding.severity >= Severity[fail_on.upper()] for a in alerts):
        sys.exit(EXIT_ALERTS)


def _assess_path(path: str, config: AnalysisConfig, strict: bool, allow_empty: bool) -> list[analysis.RunAssessed]:
    """Every run under `path`, analysed as it is read.  Problems are reported as they are
    found (with `strict`, all of them at the end, and nothing else: exit 2).  A path that
    holds no run with a point is an input error unless `allow_empty`, as in `_read`."""
    streamed = _stream(path)
    problems = list(streamed.problems)
    report = problems.extend if strict else _report
    if not strict:
        _report(problems)
    progress = _progress() if sys.stderr.isatty() else None
    runs = []
    for done, source in enumerate(streamed.sources, 1):
        runs += analysis.assess_source(path, source, config, report)
        if progress:
            progress(done, len(streamed.sources))
    if strict and problems:
        _report(problems)
        sys.exit(EXIT_INPUT_ERROR)
    if not allow_empty and not any(run.points for run in runs):
        _fail(no_runs(path))
    return runs


@main.command()
@click.argument("path", type=click.Path())
@click.option("--run", "run_name", help="The run to draw when PATH holds several.")
@click.option("--tag", help="The tag to draw on top (default: the run's first loss tag).")
@click.option(
    "-o", "--output", required=True, type=click.Path(dir_okay=False),
    help="The image to write: FILE.png or FILE.svg (the suffix sets the format).",
)
def plot(path: str, run_name: str | None, tag: str | None, output: str) -> None:
    """Draw one run: the loss with its baseline, noise band and alerts, and the grad norm,
    learning rate and loss scale on aligned panels below where the run logs them."""
    from app import plot as plots  # matplotlib is loaded only by the command that draws

    try:
        fmt = plots.image_format(output)
        run = plots.pick_run(path, _read(path, False).runs, run_name)
        plots.write_image(plots.draw_run(path, run, tag), output, fmt)
    except (plots.PlotError, analysis.AnalysisFailed) as e:
        _fail(str(e))


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@_db_option
@click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown"]), default="table", show_default=True)
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="TOML file of detector settings.")
@click.option(
    "--fail-on", type=click.Choice(FAIL_ON), default="warning", show_default=True,
    help="Exit 1 when an alert of this severity or worse fires or changes in this scan.",
)
@_webhook_option
@_alertmanager_option
@click.option("--all", "show_all", is_flag=True, help="Print every open alert, not only what changed.")
@_links_option
@click.option("--webhook-timeout", default=5.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds for each step of a delivery request: connecting, sending, awaiting the answer.")
@click.option("--delivery-budget", default=scanner.DELIVERY_BUDGET, show_default=True, type=click.FloatRange(min=0),
              help="Seconds the scan may spend delivering, after its own work; what is left waits for the next scan.")
@_allow_empty_option
@click.option("--jobs", default=1, show_default=True, type=click.IntRange(min=1),
              help="Processes that read and analyse runs at once (a tick over many runs on several cores).")
def scan(
    paths: tuple[str, ...], db_url: str | None, fmt: str, config_file: str | None, fail_on: str,
    webhooks: tuple[str, ...], alertmanagers: tuple[str, ...], show_all: bool, external_url: str | None,
    webhook_timeout: float, delivery_budget: float, allow_empty: bool, jobs: int,
) -> None:
    """Read what is new under each PATH since the last scan, re-analyse the runs that
    changed, and print each alert that fired, changed or resolved, once.  PATH is a
    directory, a file or a URL prefix (s3://, gs://, ...)."""
    config = _load_config(config_file)
    specs = _receivers(webhooks, alertmanagers, config_file)
    delivery = DeliveryConfig(timeout=webhook_timeout, lease=max(120.0, 2 * longest_send(webhook_timeout)),
                              external_url=external_url)
    store = _open_store(db_url)
    progress = _progress("scanning runs") if sys.stderr.isatty() else None
    reporter = scanner.Reporter.new()
    try:
        with httpx.Client() as client:
            outcome = scanner.scan(
                store, list(paths), config=config, webhooks=specs, client=client, progress=progress,
                reporter=reporter, delivery=delivery, budget=delivery_budget, jobs=jobs,
            )
    except IngestError as e:
        _report(e.problems)
        sys.exit(EXIT_INPUT_ERROR)
    _report(outcome.problems)
    if outcome.earlier:
        click.echo(f"losswatch: {outcome.earlier} changes committed by an earlier scan that stopped before "
                   "printing them come first", err=True)
    for failure in outcome.deliveries.failed:
        click.echo(f"losswatch: delivery failed (will retry on the next scan): {failure}", err=True)
    summary = scan_summary(outcome.events, outcome.runs, outcome.changed, outcome.points)
    open_records = scanner.open_alerts(store, list(paths)) if show_all else []
    click.echo(_render_scan(fmt, outcome, summary, open_records, show_all))
    sys.stdout.flush()
    scanner.printed(store, reporter)
    if not allow_empty:
        for path in outcome.empty:
            click.echo(f"losswatch: {no_runs(path)}", err=True)
    if outcome.failed or (outcome.empty and not allow_empty):
        sys.exit(EXIT_INPUT_ERROR)
    worst = [Severity[e.event.record.severity.upper()] for e in outcome.events if e.event.change.value != "resolved"]
    if show_all:
        worst += [Severity[r.severity.upper()] for r in open_records if r.state.value == "firing"]
    if fail_on != "never" and any(s >= Severity[fail_on.upper()] for s in worst):
        sys.exit(EXIT_ALERTS)


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535))
@_db_option
@click.option("--allow-root", "allowed_roots", multiple=True, type=click.Path(file_okay=False),
              help="A directory or URL prefix (s3://bucket/logs) under which logdirs may be registered (repeatable).")
@click.option("--poll-interval", default=30.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds between scans of each watched logdir.")
@click.option("--analysis-interval", default=1.0, show_default=True, type=click.FloatRange(min=0),
              help="A run is analysed at most this often; busier runs are analysed in the background.")
@click.option("--max-body-bytes", default=64 << 20, show_default=True, type=click.IntRange(min=1))
@click.option("--max-points", default=1_000_000, show_default=True, type=click.IntRange(min=1),
              help="Most points one request may carry.")
@click.option("--max-heavy-requests", default=2, show_default=True, type=click.IntRange(min=1),
              help="Large posts and series reads served at once; more get 503 with Retry-After.")
@_webhook_option
@_alertmanager_option
@click.option("--alertmanager-resend", default=60.0, show_default=True, type=click.FloatRange(min=1),
              help="Seconds between re-sending firing alerts to Alertmanager (keep it below its resolve_timeout).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="TOML file of detector settings.")
@click.option("--external-url", envvar="LOSSWATCH_EXTERNAL_URL", show_envvar=True, callback=_external_url,
              help="The URL browsers reach the service at (https://... makes the sign-in cookie Secure); messages link there.")
@click.option("--insecure", is_flag=True, help="Run open: no request needs a token, even when tokens exist.")
@click.option("--db-connect-timeout", default=5.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds to wait for a database connection.")
@click.option("--db-statement-timeout", default=30.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds one database statement may take, lock waits included; past it the request gets 503.")
@click.option("--webhook-timeout", default=5.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds for each step of a webhook request: connecting, sending, awaiting the answer.")
@click.option("--delivery-lease", default=120.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds a claimed webhook delivery is held; if its process dies, another sends it after this.")
@click.option("--metrics-max-runs", default=1000, show_default=True, type=click.IntRange(min=0),
              help="/metrics has per-run series for this many runs, those that advanced most recently.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(min=1),
              help="Worker processes sharing the port (more than 1 needs PostgreSQL).")
def serve(
    host: str, port: int, db_url: str | None, allowed_roots: tuple[str, ...], poll_interval: float,
    analysis_interval: float, max_body_bytes: int, max_points: int, max_heavy_requests: int,
    webhooks: tuple[str, ...], alertmanagers: tuple[str, ...], alertmanager_resend: float,
    config_file: str | None, external_url: str | None, insecure: bool,
    db_connect_timeout: float, db_statement_timeout: float, webhook_timeout: float, delivery_lease: float,
    metrics_max_runs: int, workers: int,
) -> None:
    """Run the HTTP service: ingest over HTTP, watched logdirs, the alerts API."""
    from app.service.settings import Settings
    from app.service.workers import run_workers

    if delivery_lease <= longest_send(webhook_timeout):
        _fail(
            f"--delivery-lease {delivery_lease:g} is too short: sending one delivery may take "
            f"{longest_send(webhook_timeout):g} s with --webhook-timeout {webhook_timeout:g}"
        )
    store = _open_store(db_url)
    if workers > 1 and store.dialect != "postgresql":
        store.close()
        _fail(f"--workers {workers} needs a PostgreSQL store (--db postgresql://...): SQLite takes one writer "
              "at a time, so more processes would only queue for it")
    with store.read() as conn:
        protected = tokens.any_tokens(conn)
    store.close()
    settings = Settings(
        db_url=db_url, allowed_roots=allowed_roots, poll_interval=poll_interval, analysis_interval=analysis_interval,
        max_body_bytes=max_body_bytes, max_points_per_request=max_points, max_heavy_requests=max_heavy_requests,
        webhooks=_receivers(webhooks, alertmanagers, config_file), alertmanager_resend=alertmanager_resend,
        analysis=_load_config(config_file), auth=_auth_mode(host, protected, insecure),
        external_url=external_url, db_connect_timeout=db_connect_timeout, db_statement_timeout=db_statement_timeout,
        webhook_timeout=webhook_timeout, delivery_lease=delivery_lease, metrics_max_runs=metrics_max_runs,
    )
    if insecure:
        click.echo("losswatch: --insecure: no request needs a token", err=True)
    _check_port(host, port)
    run_workers(settings, host, port, workers)


def _check_port(host: str, port: int) -> None:
    """A busy port (or a host this machine is not) is exit 2 with one line, before uvicorn
    would log it as JSON and exit 0 or 1."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        with socket.socket(infos[0][0], socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            probe.bind(infos[0][4])
    except OSError as e:
        _fail(f"cannot listen on {host}:{port}: {e.strerror or e}")


@main.group()
def token() -> None:
    """Create, list and revoke the service's API tokens (stored hashed)."""


@token.command("create")
@click.argument("name")
@click.option("--scope", type=click.Choice(["read", "write"]), default="read", show_default=True,
              help="write may also read.")
@click.option("--value", envvar="LOSSWATCH_TOKEN_VALUE", show_envvar=True,
              help="Register this token (e.g. from a deployment secret) instead of making one up.")
@_db_option
def token_create(name: str, scope: str, value: str | None, db_url: str | None) -> None:
    """Print a new token; it is shown this once, only its hash is kept."""
    if value is not None and len(value) < 16:
        _fail("a token must be at least 16 characters long")
    with _open_store(db_url).write() as conn:
        created = tokens.create_token(conn, name, scope, time.time(), value)
    if created is None:
        _fail(f"a token called {name!r} exists already")
    click.echo(created)


@token.command("list")
@_db_option
def token_list(db_url: str | None) -> None:
    """The tokens' names and scopes (never the tokens)."""
    with _open_store(db_url).read() as conn:
        for t in tokens.list_tokens(conn):
            click.echo(f"{t['name']}\t{t['scopes']}")


@token.command("revoke")
@click.argument("name")
@_db_option
def token_revoke(name: str, db_url: str | None) -> None:
    """Delete a token: requests bearing it are refused from now on (within 5 s)."""
    with _open_store(db_url).write() as conn:
        if not tokens.revoke_token(conn, name):
            _fail(f"no token called {name!r}")
        last = not tokens.any_tokens(conn)
    if last:
        click.echo(
            f"losswatch: revoked {name!r}, the last token: a service that needed tokens stays locked (401 on every "
            "request but /healthz and /metrics) until `losswatch token create` makes a new one", err=True,
        )


@main.group()
def silence() -> None:
    """Silence alerts by matchers (globs on run, kind, tag, severity, alert id) until a time."""


@silence.command("add")
@click.option("--run", help="Glob on the run name.")
@click.option("--kind", help="Glob on the alert kind.")
@click.option("--tag", help="Glob on the tag.")
@click.option("--severity", help="Glob on the severity: info, warning, critical.")
@click.option("--alert", "alert_id", help="Glob on the alert id.")
@click.option("--duration", default="2h", show_default=True, help="How long: 2h, 90m, 1d12h (units s, m, h, d, w).")
@click.option("--by", "created_by", envvar="USER", help="Who silences (default: $USER).")
@click.option("--comment", default="", help="Why.")
@_db_option
def silence_add(run: str | None, kind: str | None, tag: str | None, severity: str | None, alert_id: str | None,
                duration: str, created_by: str | None, comment: str, db_url: str | None) -> None:
    """Make a silence; prints its id.  Changes to the alerts it matches are stored and
    printed, and delivered nowhere until it ends."""
    matchers = {"run": run, "kind": kind, "tag": tag, "severity": severity, "alert_id": alert_id}
    try:
        made = silences.new_silence(matchers, created_by or "", comment, time.time(), duration=duration)
    except silences.SilenceError as e:
        _fail(str(e))
    with _open_store(db_url).write() as conn:
        click.echo(stored_silences.add(conn, made).id)


@silence.command("list")
@click.option("--expired", is_flag=True, help="Expired silences too.")
@_db_option
def silence_list(expired: bool, db_url: str | None) -> None:
    """The silences, newest first: id, matchers, end (UTC), who, why."""
    now = time.time()
    with _open_store(db_url).read() as conn:
        listed = stored_silences.listed(conn, None if expired else now)
    for s in listed:
        matchers = " ".join(f"{name}={value}" for name, value in s.matchers.items())
        ends = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(s.ends_at))
        state = "active" if s.active(now) else "expired"
        click.echo(f"{s.id}\t{matchers}\t{state} until {ends} UTC\t{s.created_by}\t{s.comment}")


@silence.command("expire")
@click.argument("silence_id", type=click.IntRange(min=1))
@_db_option
def silence_expire(silence_id: int, db_url: str | None) -> None:
    """End a silence now: changes from now on are delivered again."""
    with _open_store(db_url).write() as conn:
        if stored_silences.expire(conn, silence_id, time.time()) is None:
            _fail(f"no silence {silence_id}")


def _auth_mode(host: str, protected: bool, insecure: bool) -> str:
    """Whether the service will need tokens, decided once, before it starts (see
    app/service/auth.py): open only when asked to be, or on loopback until the first token."""
    if insecure:
        return "open"
    if protected:
        return "required"
    if _loopback(host):
        return "until_first_token"
    _fail(
        f"refusing to listen on {host} with no API token: anyone who can reach it could post and read. "
        "Create one with `losswatch token create NAME --scope write`, or pass --insecure"
    )
    raise AssertionError("unreachable")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _render_scan(fmt: str, outcome, summary: str, open_records, show_all: bool) -> str:
    if fmt == "json":
        body = {
            "summary": {"runs": outcome.runs, "changed": outcome.changed, "points": outcome.points,
                        "deliveries": {"delivered": outcome.deliveries.delivered, "failed": outcome.deliveries.failed}},
            "changes": [
                {"change": change, "state": r.event.record.state.value, "step": r.event.step, "reason": r.event.reason or None,
                 "alert": r.event.record.finding}
                for change, r in merged_changes(outcome.events)
            ],
        }
        if show_all:
            body["alerts"] = [{"state": r.state.value, "alert": r.finding} for r in open_records]
        return json.dumps(body, indent=2)
    if fmt == "markdown":
        return render_changes_markdown(outcome.events, summary) + ("\n\n" + open_alerts_markdown(open_records) if show_all else "")
    text = render_changes_table(outcome.events, summary)
    return text + ("\n\nopen alerts:\n" + open_alerts_table(open_records) if show_all else "")


def _open_store(url: str | None) -> Store:
    try:
        return open_store(url)
    except StoreError as e:
        _fail(str(e))
    raise AssertionError("unreachable")


def _load_config(path: str | None) -> AnalysisConfig:
    if path is None:
        return AnalysisConfig()
    settings = _read_toml(path)
    settings.pop("receivers", None)  # where alerts go, not how runs are analysed: see _receivers
    try:
        return AnalysisConfig.from_mapping(settings)
    except ConfigError as e:
        _fail(f"{path}: {e}")
    raise AssertionError("unreachable")


def _receivers(webhooks: tuple[str, ...], alertmanagers: tuple[str, ...], config_file: str | None) -> list[str]:
    """The receivers' specs: the flags', then the settings file's `[[receivers]]`."""
    try:
        flagged = receivers.parse_all(webhooks, alertmanagers)
    except receivers.ReceiverError as e:
        _fail(str(e))
    tables = _read_toml(config_file).get("receivers") if config_file else None
    try:
        listed = receivers.from_settings(tables)
    except receivers.ReceiverError as e:
        _fail(f"{config_file}: {e}")
    return list(dict.fromkeys(r.spec for r in flagged + listed))


def _read_toml(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        _fail(f"{path}: cannot read config: {e.strerror or e}")
    except tomllib.TOMLDecodeError as e:
        _fail(f"{path}: invalid TOML: {e}")
    raise AssertionError("unreachable")


def _run_summary(source: str, run: analysis.RunAssessed) -> dict:
    return {"source": source, "run": run.name, "points": run.points, "tags": run.tags, "rollbacks": run.rollbacks}


def _read(path: str, strict: bool, allow_empty: bool = False) -> PathRead:
    """Every run under `path`; a path that holds none with a point is an input error (a
    typo must not look green in cron) unless `allow_empty`."""
    progress = _progress() if sys.stderr.isatty() else None
    try:
        read = read_path(path, strict=strict, progress=progress)
    except IngestError as e:
        _report(e.problems)
        sys.exit(EXIT_INPUT_ERROR)
    _report(read.problems)
    if not allow_empty and not any(len(run.points) for run in read.runs.values()):
        _fail(no_runs(path))
    return read


def _stream(path: str) -> StreamedPath:
    """The sources under `path`, to read as a stream; a path that cannot be read is an input error."""
    try:
        return stream_path(path)
    except IngestError as e:
        _report(e.problems)
        sys.exit(EXIT_INPUT_ERROR)


def no_runs(path: str) -> str:
    return f"{path}: no run to read: {LOOKED_FOR}; pass --allow-empty if it is empty on purpose"


def _progress(what: str = "reading runs"):
    def show(done: int, total: int) -> None:
        click.echo(f"\r{what}: {done}/{total}", err=True, nl=done == total)

    return show


def _report(problems: list[Problem]) -> None:
    for problem in problems:
        click.echo(f"losswatch: {problem}", err=True)


def _fail(message: str) -> None:
    click.echo(f"losswatch: {message}", err=True)
    sys.exit(EXIT_INPUT_ERROR)


if __name__ == "__main__":
    main()

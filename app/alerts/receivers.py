"""Receivers: where alert changes go, in which format, and which changes each wants.

A receiver is written as a URL (`--webhook`, `--alertmanager`) whose query may carry
losswatch's own routing options, or as a `[[receivers]]` table of the settings file.  The
options are taken out of the URL before anything is sent to it.  Each receiver is kept in
the outbox as its canonical spec (`spec`), so the same receiver given as a flag or as a
table is one receiver, and a receiver's deliveries can be kept in order.

By default a receiver hears of warnings and worse, when they fire and when they resolve:
info goes only where asked for (`min_severity=info`), and `updated` (a class or severity
change) only with `on=...,updated`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from analyzers.findings import Kind, Severity

GENERIC, SLACK, ALERTMANAGER = "generic", "slack", "alertmanager"
_PREFIXES = {"slack+": SLACK, "alertmanager+": ALERTMANAGER}
CHANGES = ("firing", "updated", "resolved")
OPTIONS = ("min_severity", "on", "kinds", "runs")  # losswatch's own query options, never sent on
_TABLE_KEYS = {"url", "format", *OPTIONS}


class ReceiverError(ValueError):
    """A receiver that cannot be used, saying which and why."""


@dataclass(frozen=True)
class Receiver:
    url: str  # where to POST, without losswatch's options
    format: str = GENERIC  # generic, slack or alertmanager
    min_severity: str = "warning"
    on: tuple[str, ...] = ("firing", "resolved")
    kinds: tuple[str, ...] = ()  # globs on the alert kind; none: every kind
    runs: tuple[str, ...] = ()  # globs on the run name; none: every run
    spec: str = field(default="", compare=False)

    def wants(self, change: str, severity: str, kind: str, run: str) -> bool:
        """Whether this receiver hears of a change.  `severity` is the highest the alert has
        had, so a receiver that heard an alert fire hears it resolve, whatever its last class."""
        return (
            change in self.on
            and Severity[severity.upper()] >= Severity[self.min_severity.upper()]
            and (not self.kinds or any(fnmatchcase(kind, k) for k in self.kinds))
            and (not self.runs or any(fnmatchcase(run, r) for r in self.runs))
        )


def parse(text: str, default_format: str | None = None) -> Receiver:
    """A receiver from its URL: `[slack+|alertmanager+]http(s)://...[?options]`.  A
    `hooks.slack.com` URL takes the Slack format without the prefix."""
    fmt, url = default_format or GENERIC, text
    for prefix, name in _PREFIXES.items():
        if text.startswith(prefix):
            fmt, url = name, text[len(prefix):]
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ReceiverError(f"{text!r} is not an http(s) URL")
    if fmt == GENERIC and parts.hostname == "hooks.slack.com":
        fmt = SLACK
    ours: dict[str, str] = {}
    theirs = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in OPTIONS:
            if key in ours:
                raise ReceiverError(f"{text!r}: {key} is given twice")
            ours[key] = value
        else:
            theirs.append((key, value))
    bare = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(theirs), parts.fragment))
    options: dict[str, Any] = {k: v.split(",") if k != "min_severity" else v for k, v in ours.items()}
    return _build(bare, fmt, options, repr(text))


def from_table(table: Mapping[str, Any], where: str) -> Receiver:
    """A receiver from a `[[receivers]]` table: `url` (prefixes as for `--webhook`), and the
    options as TOML values (`on = ["firing", "resolved"]`)."""
    unknown = sorted(set(table) - _TABLE_KEYS)
    if unknown:
        raise ReceiverError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_TABLE_KEYS))})")
    url = table.get("url")
    if not isinstance(url, str):
        raise ReceiverError(f"{where}: url must be a string")
    fmt = table.get("format")
    if fmt is not None and fmt not in (GENERIC, SLACK, ALERTMANAGER):
        raise ReceiverError(f"{where}: format must be generic, slack or alertmanager, not {fmt!r}")
    base = parse(url, fmt)
    if "?" in url and any(k in OPTIONS for k, _ in parse_qsl(urlsplit(url).query)):
        raise ReceiverError(f"{where}: give the options as keys of the table, not in the url")
    options = {k: table[k] for k in OPTIONS if k in table}
    for key in ("on", "kinds", "runs"):
        value = options.get(key)
        if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
            raise ReceiverError(f"{where}: {key} must be a list of strings")
    if "min_severity" in options and not isinstance(options["min_severity"], str):
        raise ReceiverError(f"{where}: min_severity must be a string")
    return _build(base.url, base.format, options, f"{where}: url {url!r}")


def from_settings(tables: Any, where: str = "receivers") -> list[Receiver]:
    """The `[[receivers]]` array of a settings file (absent: none)."""
    if tables is None:
        return []
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ReceiverError(f"{where} must be an array of tables ([[receivers]])")
    return [from_table(t, f"{where}[{i}]") for i, t in enumerate(tables)]


def parse_all(webhooks: Sequence[str], alertmanagers: Sequence[str] = ()) -> list[Receiver]:
    """The receivers of `--webhook` and `--alertmanager` flags."""
    return [parse(w) for w in webhooks] + [parse(a, ALERTMANAGER) for a in alertmanagers]


def _build(url: str, fmt: str, options: Mapping[str, Any], shown: str) -> Receiver:
    severity = options.get("min_severity", "warning")
    if severity not in ("info", "warning", "critical"):
        raise ReceiverError(f"{shown}: min_severity must be info, warning or critical, not {severity!r}")
    on = tuple(options.get("on", ("firing", "resolved")))
    bad = [c for c in on if c not in CHANGES]
    if bad or not on:
        raise ReceiverError(f"{shown}: on must list some of firing, updated, resolved, not {','.join(on)!r}")
    kinds = tuple(options.get("kinds", ()))
    known = {k.value for k in Kind}
    for pattern in kinds:
        if not any(fnmatchcase(k, pattern) for k in known):
            raise ReceiverError(f"{shown}: kinds: {pattern!r} matches no alert kind")
    runs = tuple(options.get("runs", ()))
    receiver = Receiver(url, fmt, severity, on, kinds, runs)
    return Receiver(url, fmt, severity, on, kinds, runs, spec=_spec(receiver))


def _spec(r: Receiver) -> str:
    """The canonical form kept in the outbox: the prefix of the format, the URL, and the
    options that differ from the defaults, in a fixed order."""
    prefix = {SLACK: "slack+", ALERTMANAGER: "alertmanager+"}.get(r.format, "")
    options = []
    if r.min_severity != "warning":
        options.append(("min_severity", r.min_severity))
    if r.on != ("firing", "resolved"):
        options.append(("on", ",".join(r.on)))
    if r.kinds:
        options.append(("kinds", ",".join(r.kinds)))
    if r.runs:
        options.append(("runs", ",".join(r.runs)))
    if not options:
        return prefix + r.url
    parts = urlsplit(r.url)
    query = "&".join(filter(None, [parts.query, urlencode(options, safe=",*?[]")]))
    return prefix + urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


def route(specs: Sequence[str], changes: Sequence[tuple[int, Any]], peak: Mapping[str, str]) -> dict[str, list[int]]:
    """Receiver spec -> the changes it hears of (event ids, in order), for one run's changes
    of one analysis: each receiver gets them as one message.  `changes` are (event id,
    `app.alerts.lifecycle.Event`); `peak` is each alert's highest severity yet."""
    out: dict[str, list[int]] = {}
    for receiver in parse_all(specs):
        out[receiver.spec] = [
            event_id for event_id, e in changes
            if receiver.wants(e.change.value, peak.get(e.record.id, e.record.severity), e.record.kind, e.record.run)
        ]
    return out

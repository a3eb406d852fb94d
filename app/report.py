"""Alerts for people: one line each, worst first, readable at a glance."""

from __future__ import annotations

from analyzers.health import RunHealth
from app.alerts.lifecycle import AlertRecord
from app.analysis import Alert
from app.updates import Reported

_MARK = {"critical": "CRIT", "warning": "WARN", "info": "info"}
_ALERT_HEADER = ("severity", "run", "kind", "steps", "message")
_CHANGE_HEADER = ("change", "severity", "run", "kind", "onset step", "message")
_OPEN_HEADER = ("state", "severity", "run", "kind", "onset step", "message")


def plural(n: int, word: str) -> str:
    """Counts read as English: "1 run", "2 runs"."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def render_table(alerts: list[Alert], runs: int) -> str:
    if not alerts:
        return f"no alerts in {plural(runs, 'run')}"
    ordered = sorted(alerts, key=lambda a: (-a.finding.severity, a.run, a.finding.start_step))
    rows = [
        (
            _MARK[str(a.finding.severity)],
            a.run,
            a.finding.kind.value + (f"/{a.finding.classification.value}" if a.finding.classification else ""),
            _steps(a),
            a.finding.message,
        )
        for a in ordered
    ]
    lines = _aligned([_ALERT_HEADER, *rows])
    counts = {s: sum(1 for a in alerts if str(a.finding.severity) == s) for s in ("critical", "warning", "info")}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    return "\n".join(lines + [f"{plural(len(alerts), 'alert')} in {plural(runs, 'run')} ({summary})"])


def render_health(runs: list[tuple[str, RunHealth]]) -> str:
    """One line per run, under the alerts: its health word, why, and the numbers."""
    rows = [("health", name, h.status.value, h.summary()) for name, h in sorted(runs, key=lambda r: r[0])]
    return "\n".join(_aligned(rows))


def _steps(alert: Alert) -> str:
    f = alert.finding
    if f.end_step is not None and f.end_step != f.start_step:
        return f"{f.start_step}-{f.end_step}"
    return f"{f.start_step}-" if f.kind.value == "loss_spike" else str(f.start_step)


def merged_changes(reported: list[Reported]) -> list[tuple[str, Reported]]:
    """One entry per alert: its changes in this scan joined ("firing+resolved"), last record."""
    order: dict[str, tuple[list[str], Reported]] = {}
    for r in reported:
        changes, _ = order.get(r.event.record.id, ([], r))
        order[r.event.record.id] = (changes + [r.event.change.value], r)
    return [("+".join(changes), last) for changes, last in order.values()]


def scan_summary(reported: list[Reported], runs: int, changed: int, points: int) -> str:
    """The scan's last line.  Its count is of the rows printed: an alert that fired and resolved
    in one scan is one row ("FIRING+RESOLVED"), so one change."""
    return (f"{plural(len(merged_changes(reported)), 'change')} in {plural(runs, 'run')} "
            f"({changed} with new data, {plural(points, 'new point')})")


def render_changes_table(reported: list[Reported], outcome_line: str) -> str:
    rows = [
        (
            change.upper(),
            _MARK[r.event.record.severity],
            r.event.record.run,
            r.event.record.kind + (f"/{r.event.record.classification}" if r.event.record.classification else ""),
            str(r.event.record.start_step),
            r.event.reason or r.event.record.finding["message"],
        )
        for change, r in merged_changes(reported)
    ]
    if not rows:
        return outcome_line
    return "\n".join(_aligned([_CHANGE_HEADER, *rows]) + [outcome_line])


def render_changes_markdown(reported: list[Reported], outcome_line: str) -> str:
    merged = merged_changes(reported)
    if not merged:
        return outcome_line
    rows = [(change, r.event.record, r.event.reason or r.event.record.finding["message"]) for change, r in merged]
    return "\n".join(_markdown_rows(_CHANGE_HEADER, rows) + ["", outcome_line])


def open_alerts_markdown(records: list[AlertRecord]) -> str:
    """`scan --all --format markdown`'s second part: the open alerts, as markdown too."""
    if not records:
        return "### Open alerts\n\nnone"
    rows = [(r.state.value, r, r.finding["message"]) for r in records]
    return "\n".join(["### Open alerts", "", *_markdown_rows(_OPEN_HEADER, rows)])


def _markdown_rows(header: tuple[str, ...], rows: list[tuple[str, AlertRecord, str]]) -> list[str]:
    """A markdown table of alerts: the first cell, then the record's columns and a message."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for first, rec, message in rows:
        kind = rec.kind + (f" ({rec.classification})" if rec.classification else "")
        cell = message.replace("|", "\\|")  # a pipe in a message would end its cell
        lines.append(f"| {first} | {rec.severity} | `{rec.run}` | {kind} | {rec.start_step} | {cell} |")
    return lines


def open_alerts_table(records: list[AlertRecord]) -> str:
    if not records:
        return "no open alerts"
    rows = [
        (r.state.value.upper(), _MARK[r.severity], r.run, r.kind + (f"/{r.classification}" if r.classification else ""),
         str(r.start_step), r.finding["message"])
        for r in records
    ]
    return "\n".join(_aligned([_OPEN_HEADER, *rows]))


def _aligned(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows as lines with every column but the last (the message) padded to one width."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1] for row in rows]

"""Alerts for people: one line each, worst first, readable at a glance."""

from __future__ import annotations

from analyzers.health import RunHealth
from app.alerts.lifecycle import AlertRecord
from app.analysis import Alert
from app.updates import Reported

_MARK = {"critical": "CRIT", "warning": "WARN", "info": "info"}


def render_table(alerts: list[Alert], runs: int) -> str:
    if not alerts:
        return f"no alerts in {runs} run{'s' if runs != 1 else ''}"
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
    lines = _aligned(rows)
    counts = {s: sum(1 for a in alerts if str(a.finding.severity) == s) for s in ("critical", "warning", "info")}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    n = len(alerts)
    return "\n".join(lines + [f"{n} alert{'s' if n != 1 else ''} in {runs} run{'s' if runs != 1 else ''} ({summary})"])


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
    return "\n".join(_aligned(rows) + [outcome_line])


def render_changes_markdown(reported: list[Reported], outcome_line: str) -> str:
    merged = merged_changes(reported)
    if not merged:
        return outcome_line
    lines = ["| change | severity | run | kind | onset step | message |", "|---|---|---|---|---|---|"]
    for change, r in merged:
        rec = r.event.record
        kind = rec.kind + (f" ({rec.classification})" if rec.classification else "")
        message = (r.event.reason or rec.finding["message"]).replace("|", "\\|")
        lines.append(f"| {change} | {rec.severity} | `{rec.run}` | {kind} | {rec.start_step} | {message} |")
    return "\n".join(lines + ["", outcome_line])


def open_alerts_table(records: list[AlertRecord]) -> str:
    if not records:
        return "no open alerts"
    rows = [
        (r.state.value.upper(), _MARK[r.severity], r.run, r.kind + (f"/{r.classification}" if r.classification else ""),
         str(r.start_step), r.finding["message"])
        for r in records
    ]
    return "\n".join(_aligned(rows))


def _aligned(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows as lines with every column but the last (the message) padded to one width."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1] for row in rows]

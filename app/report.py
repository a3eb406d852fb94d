"""Alerts for people: one line each, worst first, readable at a glance."""

from __future__ import annotations

from app.analysis import Alert

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
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r[:4], widths)) + "  " + r[4] for r in rows]
    counts = {s: sum(1 for a in alerts if str(a.finding.severity) == s) for s in ("critical", "warning", "info")}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    return "\n".join(lines + [f"{len(alerts)} alerts in {runs} runs ({summary})"])


def _steps(alert: Alert) -> str:
    f = alert.finding
    if f.end_step is not None and f.end_step != f.start_step:
        return f"{f.start_step}-{f.end_step}"
    return f"{f.start_step}-" if f.kind.value == "loss_spike" else str(f.start_step)

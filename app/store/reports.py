"""Alert changes a `losswatch scan` committed and has not printed yet.

A scan holds each change it commits (`alert_events.report_by` = the scan's claim, with a
lease) in the transaction that makes it, and lets go once it has printed them.  A scan
killed in between leaves its changes held; a later scan takes them over (see `app.scan`)
and prints them first.  The service never holds its changes: its responses and its webhook
outbox report them.  Every function works inside the caller's transaction.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.alerts.lifecycle import AlertRecord, Change, Event, State
from app.store.schema import alert_events, alerts, runs


@dataclass(frozen=True)
class Held:
    """A change some scan holds: the candidate for taking over."""

    id: int
    holder: str
    lease: float | None


def hold(conn: Connection, event_ids: list[int], claim: str, until: float) -> None:
    """Hold these new changes for the scan `claim`, and extend its lease on all it holds to `until`."""
    if event_ids:
        conn.execute(alert_events.update().where(alert_events.c.id.in_(event_ids)).values(report_by=claim))
    conn.execute(alert_events.update().where(alert_events.c.report_by == claim).values(report_lease=until))


def held(conn: Connection, sources: list[str]) -> list[Held]:
    """The changes held by any scan for runs under these sources."""
    query = (
        sa.select(alert_events.c.id, alert_events.c.report_by, alert_events.c.report_lease)
        .join(alerts, alerts.c.id == alert_events.c.alert_id)
        .join(runs, runs.c.id == alerts.c.run_id)
        .where(alert_events.c.report_by.is_not(None), runs.c.source.in_(sources))
    )
    return [Held(i, holder, lease) for i, holder, lease in conn.execute(query)]


def take_over(conn: Connection, changes: list[Held], claim: str, until: float) -> None:
    """Hold `changes` for `claim` instead, each only if its holder has not changed meanwhile
    (two scans taking over at once: one of them gets each change)."""
    for change in changes:
        conn.execute(
            alert_events.update()
            .where(alert_events.c.id == change.id, alert_events.c.report_by == change.holder)
            .values(report_by=claim, report_lease=until)
        )


def load(conn: Connection, claim: str) -> list[tuple[str, int, Event]]:
    """(source, id, change) of each change `claim` holds, oldest first, as it was made: the
    alert's state, severity and class from the change, the rest from the alert."""
    query = (
        sa.select(alert_events, alerts, runs.c.name, runs.c.source)
        .join(alerts, alerts.c.id == alert_events.c.alert_id)
        .join(runs, runs.c.id == alerts.c.run_id)
        .where(alert_events.c.report_by == claim)
        .order_by(alert_events.c.id)
    )
    out = []
    for row in conn.execute(query):
        m = row._mapping
        event_id, state, severity, classification = (m[alert_events.c.id], m[alert_events.c.state],
                                                      m[alert_events.c.severity], m[alert_events.c.classification])
        record = AlertRecord(
            id=m[alerts.c.id], run=m[runs.c.name], tag=m[alerts.c.tag], kind=m[alerts.c.kind], state=State(state),
            severity=severity, classification=classification, start_step=m[alerts.c.start_step],
            finding=m[alerts.c.finding], since_step=m[alerts.c.since_step], since_time=m[alerts.c.since_time],
            inhibited_by=m[alerts.c.inhibited_by],
        )
        message = m[alert_events.c.message]
        reason = "" if message == record.finding.get("message") else message
        out.append((m[runs.c.source], event_id, Event(Change(m[alert_events.c.change]), record, m[alert_events.c.step], reason)))
    return out


def release(conn: Connection, claim: str) -> None:
    """The scan `claim` printed what it held."""
    conn.execute(
        alert_events.update().where(alert_events.c.report_by == claim).values(report_by=None, report_lease=None)
    )

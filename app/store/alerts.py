"""Alerts at rest: their records, their history of changes, and the outbox of webhook
deliveries (written in the same transaction as the change, so a crash after the commit
still delivers on the next scan)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.alerts.lifecycle import AlertRecord, Event, State
from app.store.schema import alert_events, alerts, deliveries, runs


def load_alerts(conn: Connection, run_id: int) -> dict[str, AlertRecord]:
    return {row.id: _record(row) for row in conn.execute(_LOAD_ALERTS, {"run_id": run_id})}


def load_alerts_to_evaluate_of_runs(
    conn: Connection, run_ids: list[int], ids: Iterable[str], inhibiting: Iterable[str], tags: Iterable[str]
) -> dict[int, dict[str, AlertRecord]]:
    """Of these runs' alerts, those an evaluation of their analyses (`lifecycle.evaluate`) can
    change or consult, in one query (one per `MAX_IDS` ids; every run id is a key): the open
    ones (each resolves once no longer seen), those of these ids (the analyses report them:
    a resolved one reported over again is left as it is, not fired again) and those of
    these kinds on these tags (a resolved NaN or divergence still inhibits the lesser spikes
    after it on its tag).  The others are resolved and cannot change: a run's history of
    alerts grows without bound, and reading it all (decoding every finding) was a third of
    an analysed append to a long run.  Ids and tags of a batch's runs are asked of all of
    them: an alert read beyond a run's own needs changes nothing of its evaluation.  More
    than `MAX_IDS` ids (a first analysis of a long run reporting its whole history, a batch
    of 32 runs reporting 40 each) are asked `MAX_IDS` at a time: a statement takes a bounded
    number of parameters, and reading each run's whole history instead cost a statement per
    run."""
    ids = sorted(set(ids))
    out: dict[int, dict[str, AlertRecord]] = {run_id: {} for run_id in run_ids}
    params = {"run_ids": run_ids, "kinds": sorted(set(inhibiting)), "tags": sorted(set(tags))}
    for at in range(0, max(len(ids), 1), MAX_IDS):
        for row in conn.execute(_LOAD_TO_EVALUATE, params | {"ids": ids[at : at + MAX_IDS]}):
            out[row.run_id][row.id] = _record(row)
    return out


MAX_IDS = 1000  # well within SQLite's 32,766 and PostgreSQL's 65,535 parameters a statement


# Built once: every analysed append runs one.
_LOAD_ALERTS = sa.select(alerts, runs.c.name).join(runs, runs.c.id == alerts.c.run_id).where(alerts.c.run_id == sa.bindparam("run_id"))
_LOAD_TO_EVALUATE = (
    sa.select(alerts, runs.c.name).join(runs, runs.c.id == alerts.c.run_id)
    .where(alerts.c.run_id.in_(sa.bindparam("run_ids", expanding=True)))
).where(
    sa.or_(
        alerts.c.state != State.RESOLVED.value,
        alerts.c.id.in_(sa.bindparam("ids", expanding=True)),
        sa.and_(alerts.c.kind.in_(sa.bindparam("kinds", expanding=True)), alerts.c.tag.in_(sa.bindparam("tags", expanding=True))),
    )
)


def open_of_kind(conn: Connection, kind: str, run_ids: list[int] | None = None) -> dict[int, dict[str, AlertRecord]]:
    """Run id -> its open (not resolved) alerts of one kind (of these runs; None: all)."""
    query = (
        sa.select(alerts, runs.c.name).join(runs, runs.c.id == alerts.c.run_id)
        .where(alerts.c.kind == kind, alerts.c.state != State.RESOLVED.value)
    )
    out: dict[int, dict[str, AlertRecord]] = {}
    batches = [None] if run_ids is None else [run_ids[i : i + 500] for i in range(0, len(run_ids), 500)]
    for batch in batches:
        for row in conn.execute(query if batch is None else query.where(alerts.c.run_id.in_(batch))):
            out.setdefault(row.run_id, {})[row.id] = _record(row)
    return out


def save_alerts(conn: Connection, run_id: int, records: Iterable[AlertRecord]) -> None:
    for r in records:
        values = {
            "run_id": run_id, "tag": r.tag, "kind": r.kind, "state": r.state.value, "severity": r.severity,
            "classification": r.classification, "inhibited_by": r.inhibited_by, "start_step": r.start_step,
            "finding": r.finding, "since_step": r.since_step, "since_time": r.since_time,
        }
        if conn.execute(alerts.update().where(alerts.c.id == r.id).values(**values)).rowcount == 0:
            conn.execute(alerts.insert().values(id=r.id, **values))


def add_events(conn: Connection, events: list[Event], now: float) -> list[int]:
    """Store the changes; returns their ids, in order."""
    ids = []
    for e in events:
        result = conn.execute(
            alert_events.insert().values(
                alert_id=e.record.id, change=e.change.value, state=e.record.state.value,
                severity=e.record.severity, classification=e.record.classification, step=e.step,
                time=now, message=e.reason or e.record.finding["message"],
            )
        )
        ids.append(result.inserted_primary_key[0])
    return ids


def open_alerts(conn: Connection, sources: list[str]) -> list[AlertRecord]:
    """Pending and firing alerts of the runs under these sources (for `scan --all`)."""
    query = (
        sa.select(alerts, runs.c.name)
        .join(runs, runs.c.id == alerts.c.run_id)
        .where(runs.c.source.in_(sources), alerts.c.state != State.RESOLVED.value, alerts.c.inhibited_by.is_(None))
        .order_by(runs.c.name, alerts.c.start_step)
    )
    return [_record(row) for row in conn.execute(query)]


@dataclass(frozen=True)
class Delivery:
    id: int
    key: str  # the idempotency key: the same for every resend of this delivery
    url: str  # the receiver's spec (app.alerts.receivers)
    attempts: int
    events: list[dict]  # the changes it carries, in order, each with its alert, as payloads need them


def peak_severities(conn: Connection, alert_ids: list[str]) -> dict[str, str]:
    """Alert id -> the highest severity any of its changes had (routing by severity: a
    receiver that heard an alert fire as a warning hears it resolve as info)."""
    rank = {"info": 1, "warning": 2, "critical": 3}
    return {alert_id: max(had, key=lambda s: rank.get(s, 0)) for alert_id, had in severities(conn, alert_ids).items()}


def enqueue(conn: Connection, run_id: int, groups: dict[str, list[int]], now: float) -> None:
    """One delivery per receiver spec, carrying that receiver's changes (event ids, in order)."""
    rows = [
        {"event_id": ids[0], "event_ids": ids, "run_id": run_id, "url": url, "key": uuid.uuid4().hex,
         "status": "pending", "attempts": 0, "next_attempt_at": now}
        for url, ids in groups.items()
        if ids
    ]
    if rows:
        conn.execute(deliveries.insert(), rows)


def claim_due(conn: Connection, due_by: float, lease_until: float, limit: int, claim: str) -> list[Delivery]:
    """Up to `limit` deliveries due by `due_by`, claimed by `claim` until `lease_until`.  The caller
    commits the claim before sending: until the lease ends no other process (PostgreSQL:
    `FOR UPDATE SKIP LOCKED`; SQLite: the write lock) claims them, and only the holder of
    the claim may record how the sending went.  A claim whose lease ended (its process
    died, or was too slow) is due again, under the same key.

    A delivery waits while an earlier one of its run to its receiver is not delivered: each
    receiver gets a run's changes in order, so a batch holds at most one of each queue and
    may send them all at once."""
    earlier = deliveries.alias("earlier")
    blocked = sa.exists().where(
        earlier.c.run_id == deliveries.c.run_id, earlier.c.url == deliveries.c.url, earlier.c.id < deliveries.c.id,
        earlier.c.status != "delivered",
    )
    due = (
        sa.select(deliveries.c.id, deliveries.c.key, deliveries.c.url, deliveries.c.attempts, deliveries.c.event_id,
                  deliveries.c.event_ids)
        .where(deliveries.c.status.in_(("pending", "failed", "sending")), deliveries.c.next_attempt_at <= due_by, ~blocked)
        .order_by(deliveries.c.next_attempt_at, deliveries.c.id)
        .limit(limit)
    )
    if conn.dialect.name == "postgresql":
        due = due.with_for_update(of=deliveries, skip_locked=True)
    rows = conn.execute(due).all()
    if not rows:
        return []
    conn.execute(
        deliveries.update()
        .where(deliveries.c.id.in_([r.id for r in rows]))
        .values(status="sending", claimed_by=claim, next_attempt_at=lease_until)
    )
    changes = _changes(conn, {e for r in rows for e in (r.event_ids or [r.event_id])})
    return [Delivery(r.id, r.key, r.url, r.attempts, [changes[e] for e in (r.event_ids or [r.event_id]) if e in changes])
            for r in rows]


def _changes(conn: Connection, event_ids: set[int]) -> dict[int, dict]:
    """Event id -> the change as payloads carry it, with when its alert first fired."""
    query = (
        sa.select(alert_events, alerts.c.finding)
        .join(alerts, alerts.c.id == alert_events.c.alert_id)
        .where(alert_events.c.id.in_(event_ids))
    )
    rows = conn.execute(query).all()
    ids = list({r.alert_id for r in rows})
    first, had = first_fired(conn, ids), severities(conn, ids)
    return {
        r.id: {"change": r.change, "state": r.state, "step": r.step, "time": r.time, "severity": r.severity,
               "classification": r.classification, "alert": r.finding, "fired_at": first.get(r.alert_id, r.time),
               "severities": sorted(had.get(r.alert_id, {r.severity}))}
        for r in rows
    }


def severities(conn: Connection, alert_ids: list[str]) -> dict[str, set[str]]:
    """Alert id -> every severity its changes had."""
    out: dict[str, set[str]] = {}
    if alert_ids:
        query = sa.select(alert_events.c.alert_id, alert_events.c.severity).where(alert_events.c.alert_id.in_(alert_ids))
        for alert_id, severity in conn.execute(query.distinct()):
            out.setdefault(alert_id, set()).add(severity)
    return out


def first_fired(conn: Connection, alert_ids: list[str]) -> dict[str, float]:
    """Alert id -> when it first fired (Alertmanager's startsAt)."""
    if not alert_ids:
        return {}
    query = (
        sa.select(alert_events.c.alert_id, sa.func.min(alert_events.c.time))
        .where(alert_events.c.alert_id.in_(alert_ids))
        .group_by(alert_events.c.alert_id)
    )
    return dict(conn.execute(query).all())


def _held(delivery_id: int, claim: str):
    return sa.and_(deliveries.c.id == delivery_id, deliveries.c.claimed_by == claim, deliveries.c.status == "sending")


def renew(conn: Connection, delivery_id: int, claim: str, until: float) -> bool:
    """Extend the claim's lease to `until`; False when the claim is no longer held (its lease
    ended and another process claimed the delivery): then it must not be sent."""
    return conn.execute(deliveries.update().where(_held(delivery_id, claim)).values(next_attempt_at=until)).rowcount == 1


def record_attempt(conn: Connection, delivery_id: int, claim: str, error: str | None, now: float, retry_at: float) -> bool:
    """Record how sending went, if `claim` still holds the delivery; False when it does not
    (another process took it over, and will record its own outcome)."""
    values = (
        {"status": "delivered", "delivered_at": now, "last_error": None}
        if error is None
        else {"status": "failed", "last_error": error, "next_attempt_at": retry_at}
    )
    update = deliveries.update().where(_held(delivery_id, claim))
    return conn.execute(update.values(attempts=deliveries.c.attempts + 1, claimed_by=None, **values)).rowcount == 1


def release(conn: Connection, delivery_ids: list[int], claim: str, now: float) -> None:
    """Give back claimed deliveries not sent (the service is stopping): due again at once."""
    if not delivery_ids:
        return
    status = sa.case((deliveries.c.attempts > 0, "failed"), else_="pending")
    conn.execute(
        deliveries.update()
        .where(deliveries.c.id.in_(delivery_ids), deliveries.c.claimed_by == claim, deliveries.c.status == "sending")
        .values(status=status, claimed_by=None, next_attempt_at=now)
    )


def _record(row) -> AlertRecord:
    return AlertRecord(
        id=row.id, run=row.name, tag=row.tag, kind=row.kind, state=State(row.state), severity=row.severity,
        classification=row.classification, start_step=row.start_step, finding=row.finding,
        since_step=row.since_step, since_time=row.since_time, inhibited_by=row.inhibited_by,
    )


def query_alerts(
    conn: Connection,
    *,
    run_id: int | None = None,
    alert_id: str | None = None,
    state: str | None = None,
    severity: str | None = None,
    since: float | None = None,
    limit: int = 1000,
) -> list[tuple[AlertRecord, str, bool, bool]]:
    """(record, source, acknowledged, silenced) of the alerts matching every filter given."""
    query = sa.select(alerts, runs.c.name, runs.c.source).join(runs, runs.c.id == alerts.c.run_id)
    if run_id is not None:
        query = query.where(alerts.c.run_id == run_id)
    if alert_id is not None:
        query = query.where(alerts.c.id == alert_id)
    if state is not None:
        query = query.where(alerts.c.state == state)
    if severity is not None:
        query = query.where(alerts.c.severity == severity)
    if since is not None:
        query = query.where(alerts.c.since_time >= since)
    query = query.order_by(alerts.c.since_time.desc(), alerts.c.id).limit(limit)
    return [(_record(row), row.source, bool(row.acknowledged), bool(row.silenced)) for row in conn.execute(query)]


def set_flags(conn: Connection, alert_id: str, **flags: bool) -> bool:
    """Set `acknowledged` and/or `silenced`; False if there is no such alert."""
    values = {k: int(v) for k, v in flags.items()}
    return conn.execute(alerts.update().where(alerts.c.id == alert_id).values(**values)).rowcount == 1


def silenced_ids(conn: Connection, ids: list[str]) -> set[str]:
    if not ids:
        return set()
    query = sa.select(alerts.c.id).where(alerts.c.id.in_(ids), alerts.c.silenced == 1)
    return set(conn.execute(query).scalars())


def count_by_state(conn: Connection) -> dict[tuple[str, str], int]:
    """(state, severity) -> how many alerts (for the metrics endpoint)."""
    query = sa.select(alerts.c.state, alerts.c.severity, sa.func.count()).group_by(alerts.c.state, alerts.c.severity)
    return {(state, severity): n for state, severity, n in conn.execute(query)}


def open_counts(conn: Connection) -> dict[int, dict[str, int]]:
    """Run id -> severity -> open (pending or firing, not inhibited) alerts."""
    query = (
        sa.select(alerts.c.run_id, alerts.c.severity, sa.func.count())
        .where(alerts.c.state != State.RESOLVED.value, alerts.c.inhibited_by.is_(None))
        .group_by(alerts.c.run_id, alerts.c.severity)
    )
    out: dict[int, dict[str, int]] = {}
    for run_id, severity, n in conn.execute(query):
        out.setdefault(run_id, {})[severity] = n
    return out


def firing(conn: Connection) -> list[tuple[AlertRecord, float]]:
    """(record, when it first fired) of every firing alert neither inhibited nor silenced:
    what Alertmanager is told again, so it keeps them firing."""
    query = (
        sa.select(alerts, runs.c.name)
        .join(runs, runs.c.id == alerts.c.run_id)
        .where(alerts.c.state == State.FIRING.value, alerts.c.inhibited_by.is_(None), alerts.c.silenced == 0)
        .order_by(alerts.c.id)
    )
    records = [_record(row) for row in conn.execute(query)]
    fired = first_fired(conn, [r.id for r in records])
    return [(r, fired.get(r.id, r.since_time)) for r in records]


def incident_counts(conn: Connection) -> dict[int, int]:
    """Run id -> resolved warning or critical alerts: incidents a run had and got over, which
    its open counts no longer show (the runs page says "had incidents")."""
    query = (
        sa.select(alerts.c.run_id, sa.func.count())
        .where(alerts.c.state == State.RESOLVED.value, alerts.c.severity.in_(("warning", "critical")),
               alerts.c.inhibited_by.is_(None))
        .group_by(alerts.c.run_id)
    )
    return {run_id: n for run_id, n in conn.execute(query)}

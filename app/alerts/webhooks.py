"""Delivery to receivers: a generic JSON payload, a Slack message, or Alertmanager's v2 API.

Deliveries come from the store's outbox, each carrying one run's changes of one analysis
for one receiver (one message: "3 alerts on run X").  A batch is sent at once, each
delivery tried a few times with backoff; one that still fails is recorded and retried
later, and never holds up the rest.  A scan gives delivery a total budget: past it
nothing more is tried and what is left stays in the outbox.  Each delivery carries an
idempotency key (`X-Losswatch-Delivery`, and `delivery_id` in the generic payload):
delivery is at least once, and a resend after a crash has the same key.  The HTTP client
is injected, so tests script the failures.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

import httpx

from app.alerts import receivers
from app.alerts.receivers import ALERTMANAGER, SLACK, Receiver, ReceiverError
from app.store import alerts as stored
from app.store import silences as stored_silences
from app.store.db import Store

log = logging.getLogger("losswatch.webhooks")

SCHEMA = "losswatch.alert.v1"
KEY_HEADER = "X-Losswatch-Delivery"  # the delivery's idempotency key: the same on every resend
AM_PATH = "/api/v2/alerts"
_ICON = {"critical": ":rotating_light:", "warning": ":warning:", "info": ":information_source:"}
BUDGET_SPENT = "not sent: the delivery budget was spent"


@dataclass(frozen=True)
class DeliveryConfig:
    attempts: int = 3  # within one claim
    backoff: float = 0.5  # seconds before the second attempt, doubling
    timeout: float = 5.0  # for each step of one request: connecting, sending, awaiting the answer
    retry_after: float = 60.0  # a failed delivery is due again after this, doubling per attempt
    lease: float = 120.0  # a claimed delivery no one finished is due again after this
    batch: int = 10  # deliveries claimed, and sent side by side, at a time
    external_url: str | None = None  # the service's address, for links to the run and alert pages

    def __post_init__(self) -> None:
        if self.lease <= longest_send(self.timeout, self.attempts, self.backoff):
            raise ValueError(
                f"a delivery lease of {self.lease:g} s is shorter than sending one delivery may take "
                f"({longest_send(self.timeout, self.attempts, self.backoff):g} s with a {self.timeout:g} s timeout)"
            )


def longest_send(timeout: float, attempts: int = DeliveryConfig.attempts, backoff: float = DeliveryConfig.backoff) -> float:
    """The longest one delivery's attempts may take: each request connects, sends and awaits
    the answer within `timeout` each, with the backoff in between.  A claim's lease must be
    longer, or a slow receiver would let a second process send it too."""
    return attempts * 3 * timeout + sum(backoff * 2**i for i in range(attempts - 1))


@dataclass(frozen=True)
class DeliveryReport:
    delivered: int
    failed: list[str]  # "url: error" for each that failed this time


def links(alert: dict[str, Any], external_url: str | None) -> dict[str, str]:
    """The alert's and its run's pages on the service (none without its address)."""
    if not external_url:
        return {}
    base = external_url.rstrip("/")
    query = urlencode({"name": alert.get("run", ""), "source": alert.get("source", "")})
    return {"alert_url": f"{base}/alert/{quote(str(alert.get('id', '')))}", "run_url": f"{base}/run?{query}"}


def summary(changes: Sequence[dict[str, Any]]) -> str:
    """"3 alerts on run X": the alerts one message is about."""
    count = len({c["alert"].get("id") for c in changes})
    return f"{count} alert{'s' if count != 1 else ''} on run {changes[0]['alert'].get('run')}"


def _change(change: dict[str, Any], external_url: str | None) -> dict[str, Any]:
    return {**{k: v for k, v in change.items() if k not in ("fired_at", "severities")}, **links(change["alert"], external_url)}


def generic_payload(changes: Sequence[dict[str, Any]], key: str, external_url: str | None = None) -> dict[str, Any]:
    """The first change at the top level, as `losswatch.alert.v1` always had it, and every
    change the message carries in `changes`."""
    items = [_change(c, external_url) for c in changes]
    return {"schema": SCHEMA, "delivery_id": key, **items[0], "summary": summary(changes), "count": len(items),
            "changes": items}


def slack_payload(changes: Sequence[dict[str, Any]], external_url: str | None = None) -> dict[str, Any]:
    if len(changes) == 1:
        event = changes[0]
        alert, change = event["alert"], event["change"]
        head = f"{_ICON.get(event['severity'], '')} *{event['severity'].upper()}* {change}: `{alert['run']}` {alert['tag'] or alert['kind']}"
        text = f"{head}\n{alert['message']}"
        if change != "resolved":
            text += f"\n> {alert['remediation']}"
    else:
        worst = max(changes, key=lambda c: ("info", "warning", "critical").index(c["severity"]))
        lines = [f"{_ICON.get(worst['severity'], '')} *{summary(changes)}*"]
        for event in changes:
            alert = event["alert"]
            lines.append(f"• *{event['severity'].upper()}* {event['change']}: {_subject(alert)}: {alert['message']}")
        text = "\n".join(lines)
    page = links(changes[0]["alert"], external_url)
    if page:
        text += f"\n<{page['run_url']}|run page> · <{page['alert_url']}|alert>"
    return {"text": text}


def _subject(alert: dict[str, Any]) -> str:
    """"train/loss nonfinite"; a run-wide alert (`stale`) has no tag: its kind alone."""
    return f"{alert['tag']} {alert['kind']}" if alert["tag"] else alert["kind"]


def alertmanager_payload(changes: Sequence[dict[str, Any]], external_url: str | None = None) -> list[dict[str, Any]]:
    """Alertmanager's v2 alerts, the last change of each alert: a resolved one with
    `endsAt`, a firing one without (Alertmanager holds it for its `resolve_timeout`, so
    firing alerts are sent again: `resend_firing`)."""
    last = {c["alert"].get("id"): c for c in changes}
    out = []
    for c in last.values():
        resolved = c["state"] == "resolved"
        out.append(am_alert(c["alert"], c["severity"], c["fired_at"], c["time"] if resolved else None, external_url))
        if c["change"] != "firing":
            # the severity is a label, so a changed severity is another Alertmanager alert:
            # the alert under the other severities it had ends here
            out += [am_alert(c["alert"], other, c["fired_at"], c["time"], external_url)
                    for other in c.get("severities", ()) if other != c["severity"]]
    return out


def am_alert(alert: dict[str, Any], severity: str, fired_at: float, ended_at: float | None,
             external_url: str | None) -> dict[str, Any]:
    page = links(alert, external_url)
    labels = {"alertname": alert["kind"], "run": alert["run"], "tag": alert["tag"], "severity": severity,
              "source": alert.get("source", ""), "alert_id": alert["id"]}
    # Alertmanager drops a label with an empty value (a run-wide alert's `tag`): so do we, and
    # what is sent is what it shows
    labels = {name: value for name, value in labels.items() if value}
    annotations = {"summary": alert["message"], "remediation": alert.get("remediation", "")}
    if page:
        annotations |= {"url": page["alert_url"], "run_url": page["run_url"]}
    out: dict[str, Any] = {"labels": labels, "annotations": annotations, "startsAt": _iso(fired_at)}
    if ended_at is not None:
        out["endsAt"] = _iso(max(ended_at, fired_at))
    if page:
        out["generatorURL"] = page["alert_url"]
    return out


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def deliver_due(
    store: Store,
    client: httpx.Client,
    config: DeliveryConfig = DeliveryConfig(),
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    stopping: Callable[[], bool] = lambda: False,
    budget: float | None = None,
) -> DeliveryReport:
    """Send the deliveries that are due, `config.batch` at a time side by side, until none
    is left, `stopping()` says so (claimed ones not sent are given back), or `budget`
    seconds are spent: then no request outlasts it, and what is left stays due.

    At least once, never twice on purpose: each batch is claimed in a committed transaction
    of its own before anything is sent, its leases are renewed just before it is sent, and
    each outcome is recorded only while the claim still holds it.  A process killed
    mid-send leaves a claim whose lease runs out; the delivery is then sent again with the
    same `X-Losswatch-Delivery` key, for the receiver to recognise."""
    deadline = None if budget is None else time.monotonic() + budget
    claim, started = uuid.uuid4().hex, clock()
    delivered, failed = 0, []
    with ThreadPoolExecutor(max_workers=config.batch, thread_name_prefix="delivery") as pool:
        while not stopping() and not _spent(deadline):
            with store.write() as conn:
                batch = stored.claim_due(conn, started, clock() + config.lease, config.batch, claim)
            if not batch:
                break
            with store.write() as conn:
                if stopping():
                    stored.release(conn, [d.id for d in batch], claim, clock())
                    break
                lease = clock() + config.lease
                held = [d for d in batch if stored.renew(conn, d.id, claim, lease)]  # the rest: taken over
            sends = {pool.submit(_send, client, d, config, sleep, deadline): d for d in held}
            for done in as_completed(sends):
                delivery, error = sends[done], done.result()
                now = clock()
                retry_at = now + config.retry_after * 2 ** min(delivery.attempts, 6)
                with store.write() as conn:
                    if not stored.record_attempt(conn, delivery.id, claim, error, now, retry_at):
                        log.warning("delivery taken over before its outcome was recorded", extra={"key": delivery.key})
                if error is None:
                    delivered += 1
                else:
                    failed.append(f"{_shown(delivery.url)}: {error}")
    return DeliveryReport(delivered, failed)


def _spent(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _shown(spec: str) -> str:
    try:
        return receivers.parse(spec).url
    except ReceiverError:
        return spec


def _body(receiver: Receiver, delivery: stored.Delivery, external_url: str | None) -> tuple[str, Any]:
    if receiver.format == SLACK:
        return receiver.url, slack_payload(delivery.events, external_url)
    if receiver.format == ALERTMANAGER:
        return receiver.url.rstrip("/") + AM_PATH, alertmanager_payload(delivery.events, external_url)
    return receiver.url, generic_payload(delivery.events, delivery.key, external_url)


def _send(client: httpx.Client, delivery: stored.Delivery, config: DeliveryConfig, sleep,
          deadline: float | None) -> str | None:
    if not delivery.events:
        return None  # its changes are gone (the run was deleted): nothing to say
    try:
        url, body = _body(receivers.parse(delivery.url), delivery, config.external_url)
    except ReceiverError as e:
        return str(e)
    return post(client, url, body, {KEY_HEADER: delivery.key}, config, sleep, deadline)


def post(client: httpx.Client, url: str, body: Any, headers: dict[str, str], config: DeliveryConfig,
         sleep: Callable[[float], None] = time.sleep, deadline: float | None = None) -> str | None:
    """POST with retries; None when the receiver took it, else what went wrong.  No attempt,
    backoff or request outlasts `deadline` (time.monotonic)."""
    error = None
    for attempt in range(config.attempts):
        if attempt:
            pause = config.backoff * 2 ** (attempt - 1)
            if deadline is not None and time.monotonic() + pause >= deadline:
                return f"{error} ({BUDGET_SPENT} before trying again)"
            sleep(pause)
        timeout = config.timeout if deadline is None else min(config.timeout, deadline - time.monotonic())
        if timeout <= 0:
            return error or BUDGET_SPENT
        try:
            # streamed: the answer's status is all that counts, its body is never read
            with client.stream("POST", url, json=body, headers=headers, timeout=timeout) as response:
                status = response.status_code
        except httpx.HTTPError as e:
            error = f"{type(e).__name__}: {e}"
            continue
        if 200 <= status < 300:
            return None
        error = f"HTTP {status}"
        if status < 500 and status != 429:
            break  # the receiver refuses it; trying again now will not help
    return error


def resend_firing(
    store: Store,
    client: httpx.Client,
    specs: Sequence[str],
    config: DeliveryConfig = DeliveryConfig(),
    budget: float | None = None,
) -> DeliveryReport:
    """Tell each Alertmanager receiver again about every firing alert it routes: Alertmanager
    resolves an alert it has not heard of for its `resolve_timeout`.  Not from the outbox:
    a state, sent again whole each time, so nothing is lost when one send fails."""
    managers = [r for r in receivers.parse_all(specs) if r.format == ALERTMANAGER]
    if not managers:
        return DeliveryReport(0, [])
    deadline = None if budget is None else time.monotonic() + budget
    with store.read() as conn:
        current = stored.firing(conn)
        quiet = stored_silences.silenced(conn, [r for r, _ in current], time.time())
    current = [(r, fired_at) for r, fired_at in current if r.id not in quiet]
    delivered, failed = 0, []
    for manager in managers:
        body = [am_alert(r.finding, r.severity, fired_at, None, config.external_url)
                for r, fired_at in current if manager.wants("firing", r.severity, r.kind, r.run)]
        if not body:
            continue
        error = post(client, manager.url.rstrip("/") + AM_PATH, body, {}, config, deadline=deadline)
        if error is None:
            delivered += 1
        else:
            failed.append(f"{manager.url}: {error}")
    return DeliveryReport(delivered, failed)

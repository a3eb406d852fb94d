"""Webhook delivery: a generic JSON payload, or a Slack-compatible one for Slack URLs.

Deliveries come from the store's outbox.  Each is tried a few times with backoff; one that
still fails is recorded and retried on a later scan, later each time, and never holds up
the rest.  Each carries an idempotency key (`X-Losswatch-Delivery`, and `delivery_id` in
the generic payload): delivery is at least once, and a resend after a crash has the same
key.  The HTTP client is injected, so tests script the failures.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from app.store import alerts as stored
from app.store.db import Store

log = logging.getLogger("losswatch.webhooks")

SCHEMA = "losswatch.alert.v1"
KEY_HEADER = "X-Losswatch-Delivery"  # the delivery's idempotency key: the same on every resend
_SLACK_PREFIX = "slack+"
_ICON = {"critical": ":rotating_light:", "warning": ":warning:", "info": ":information_source:"}


@dataclass(frozen=True)
class DeliveryConfig:
    attempts: int = 3  # within one claim
    backoff: float = 0.5  # seconds before the second attempt, doubling
    timeout: float = 5.0  # for each step of one request: connecting, sending, awaiting the answer
    retry_after: float = 60.0  # a failed delivery is due again after this, doubling per attempt
    lease: float = 120.0  # a claimed delivery no one finished is due again after this
    batch: int = 10  # deliveries claimed at a time

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


def target(url: str) -> tuple[str, bool]:
    """The URL to post to, and whether it takes the Slack format (`slack+https://...`, or a
    Slack incoming-webhook host)."""
    if url.startswith(_SLACK_PREFIX):
        return url[len(_SLACK_PREFIX) :], True
    return url, urlsplit(url).hostname == "hooks.slack.com"


def generic_payload(event: dict[str, Any], key: str) -> dict[str, Any]:
    return {"schema": SCHEMA, "delivery_id": key, **event}


def slack_payload(event: dict[str, Any]) -> dict[str, Any]:
    alert = event["alert"]
    change = event["change"]
    head = f"{_ICON.get(event['severity'], '')} *{event['severity'].upper()}* {change}: `{alert['run']}` {alert['tag']}"
    text = f"{head}\n{alert['message']}"
    if change != "resolved":
        text += f"\n> {alert['remediation']}"
    return {"text": text}


def deliver_due(
    store: Store,
    client: httpx.Client,
    config: DeliveryConfig = DeliveryConfig(),
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    stopping: Callable[[], bool] = lambda: False,
) -> DeliveryReport:
    """Send the deliveries that are due, `config.batch` at a time, until none is left or
    `stopping()` says so (the claimed ones not sent are given back).

    At least once, never twice on purpose: each batch is claimed in a committed transaction
    of its own before anything is sent, each delivery's lease is renewed just before it is
    sent (so it outlasts that send however long the batch before it took), and its outcome
    is recorded only while the claim still holds it.  A process killed mid-send leaves a
    claim whose lease runs out; the delivery is then sent again with the same
    `X-Losswatch-Delivery` key, for the receiver to recognise."""
    claim, started = uuid.uuid4().hex, clock()
    delivered, failed = 0, []
    while not stopping():
        with store.write() as conn:
            batch = stored.claim_due(conn, started, clock() + config.lease, config.batch, claim)
        if not batch:
            break
        for index, delivery in enumerate(batch):
            if stopping():
                with store.write() as conn:
                    stored.release(conn, [d.id for d in batch[index:]], claim, clock())
                break
            with store.write() as conn:
                if not stored.renew(conn, delivery.id, claim, clock() + config.lease):
                    continue  # its lease ran out and another process took it over
            error = _send(client, delivery, config, sleep)
            now = clock()
            retry_at = now + config.retry_after * 2 ** min(delivery.attempts, 6)
            with store.write() as conn:
                if not stored.record_attempt(conn, delivery.id, claim, error, now, retry_at):
                    log.warning("delivery taken over before its outcome was recorded", extra={"key": delivery.key})
            if error is None:
                delivered += 1
            else:
                failed.append(f"{target(delivery.url)[0]}: {error}")
    return DeliveryReport(delivered, failed)


def _send(client: httpx.Client, delivery: stored.Delivery, config: DeliveryConfig, sleep) -> str | None:
    url, slack = target(delivery.url)
    body = slack_payload(delivery.event) if slack else generic_payload(delivery.event, delivery.key)
    headers = {KEY_HEADER: delivery.key}
    error = None
    for attempt in range(config.attempts):
        if attempt:
            sleep(config.backoff * 2 ** (attempt - 1))
        try:
            # streamed: the answer's status is all that counts, its body is never read
            with client.stream("POST", url, json=body, headers=headers, timeout=config.timeout) as response:
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

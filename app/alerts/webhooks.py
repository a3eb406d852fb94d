"""Webhook delivery: a generic JSON payload, or a Slack-compatible one for Slack URLs.

Deliveries come from the store's outbox.  Each is tried a few times with backoff; one that
still fails is recorded and retried on a later scan, later each time, and never holds up
the rest.  The HTTP client is injected, so tests script the failures.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from app.store import alerts as stored
from app.store.db import Store

SCHEMA = "losswatch.alert.v1"
_SLACK_PREFIX = "slack+"
_ICON = {"critical": ":rotating_light:", "warning": ":warning:", "info": ":information_source:"}


@dataclass(frozen=True)
class DeliveryConfig:
    attempts: int = 3  # within one scan
    backoff: float = 0.5  # seconds before the second attempt, doubling
    timeout: float = 5.0
    retry_after: float = 60.0  # a failed delivery is due again after this, doubling per attempt
    lease: float = 120.0  # a claimed delivery no one finished is due again after this


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


def generic_payload(event: dict[str, Any]) -> dict[str, Any]:
    return {"schema": SCHEMA, **event}


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
) -> DeliveryReport:
    """Send every delivery that is due, each in its own short transaction."""
    with store.write() as conn:
        due = stored.claim_due(conn, clock(), config.lease)
    delivered, failed = 0, []
    for delivery in due:
        error = _send(client, delivery, config, sleep)
        now = clock()
        retry_at = now + config.retry_after * 2 ** min(delivery.attempts, 6)
        with store.write() as conn:
            stored.record_attempt(conn, delivery.id, error, now, retry_at)
        if error is None:
            delivered += 1
        else:
            failed.append(f"{target(delivery.url)[0]}: {error}")
    return DeliveryReport(delivered, failed)


def _send(client: httpx.Client, delivery: stored.Delivery, config: DeliveryConfig, sleep) -> str | None:
    url, slack = target(delivery.url)
    body = slack_payload(delivery.event) if slack else generic_payload(delivery.event)
    error = None
    for attempt in range(config.attempts):
        if attempt:
            sleep(config.backoff * 2 ** (attempt - 1))
        try:
            response = client.post(url, json=body, timeout=config.timeout)
        except httpx.HTTPError as e:
            error = f"{type(e).__name__}: {e}"
            continue
        if response.is_success:
            return None
        error = f"HTTP {response.status_code}"
        if response.status_code < 500 and response.status_code != 429:
            break  # the receiver refuses it; trying again now will not help
    return error

"""Prometheus metrics, one registry per app (never the process-global one: each test builds
its own app).  Alerts by state are counted from the store when scraped."""

from __future__ import annotations

import logging

import sqlalchemy as sa
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily

from app.store import alerts as stored_alerts
from app.store.db import Store, StoreError, unavailable

log = logging.getLogger("losswatch.metrics")


class Metrics:
    def __init__(self, store: Store) -> None:
        self.registry = CollectorRegistry()
        self.points_ingested = Counter(
            "losswatch_points_ingested", "Points stored, by how they arrived", ["via"], registry=self.registry
        )
        self.scan_duration = Histogram(
            "losswatch_scan_duration_seconds", "Duration of one logdir scan by the poller", registry=self.registry
        )
        self.webhook_failures = Counter(
            "losswatch_webhook_failures", "Webhook deliveries that failed (and will be retried)", registry=self.registry
        )
        self.registry.register(_StoreCollector(store))


class _StoreCollector:
    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self):
        up = GaugeMetricFamily("losswatch_database_up", "1 when the database answered this scrape, else 0")
        try:
            with self.store.read() as conn:
                counts = stored_alerts.count_by_state(conn)
        except (sa.exc.SQLAlchemyError, StoreError) as e:
            if not unavailable(e):
                raise
            log.warning("database unavailable", extra={"error": str(e).strip().splitlines()[0]})
            up.add_metric([], 0)
            yield up
            return
        family = GaugeMetricFamily("losswatch_alerts", "Alerts by state and severity", labels=["state", "severity"])
        for (state, severity), n in sorted(counts.items()):
            family.add_metric([state, severity], n)
        yield family
        up.add_metric([], 1)
        yield up

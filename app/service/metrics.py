"""Prometheus metrics, one registry per app (never the process-global one: each test builds
its own app).  Alerts by state and the per-run series are read from the store when scraped.

Per-run series let Prometheus users alert and graph per run (route on
`losswatch_run_open_alerts`, graph `losswatch_run_last_value{role="loss"}`), but every run
is a few series more: a store of 100k runs must not become a scrape of a million series.
So only the `max_runs` (default 1,000) runs that advanced most recently are exported."""

from __future__ import annotations

import logging
import math

import sqlalchemy as sa
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily

from analyzers.config import AnalysisConfig
from app import liveness
from app.store import alerts as stored_alerts
from app.store import runs as stored_runs
from app.store.db import Store, StoreError, unavailable

log = logging.getLogger("losswatch.metrics")

RUN_LABELS = ["run", "source"]  # two logdirs may each hold a run of one name


class Metrics:
    def __init__(self, store: Store, max_runs: int = 1000, config: AnalysisConfig = AnalysisConfig()) -> None:
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
        self.registry.register(_StoreCollector(store, max_runs, config))


class _StoreCollector:
    def __init__(self, store: Store, max_runs: int, config: AnalysisConfig) -> None:
        self.store, self.max_runs, self.config = store, max_runs, config

    def collect(self):
        up = GaugeMetricFamily("losswatch_database_up", "1 when the database answered this scrape, else 0")
        try:
            with self.store.read() as conn:
                counts = stored_alerts.count_by_state(conn)
                runs = stored_runs.recent_runs(conn, self.max_runs)
                open_counts = stored_alerts.open_counts(conn)
                total = stored_runs.count_runs(conn)
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
        yield from self._runs(runs, open_counts, total)
        up.add_metric([], 1)
        yield up

    def _runs(self, runs: list[stored_runs.RunPace], open_counts: dict[int, dict[str, int]], total: int):
        stored = GaugeMetricFamily("losswatch_runs", "Runs in the store (the per-run series cover the most recent "
                                                     "losswatch_runs_exported of them)")
        stored.add_metric([], total)
        exported = GaugeMetricFamily("losswatch_runs_exported", "Runs with per-run series in this scrape (the cap: "
                                                                "serve --metrics-max-runs)")
        exported.add_metric([], len(runs))
        step = GaugeMetricFamily("losswatch_run_last_step", "The run's highest step stored", labels=RUN_LABELS)
        seen = GaugeMetricFamily("losswatch_run_last_seen_timestamp_seconds",
                                 "Unix wall time of the run's newest point (or of when it was first seen)", labels=RUN_LABELS)
        alerts = GaugeMetricFamily("losswatch_run_open_alerts", "The run's open alerts by severity",
                                   labels=[*RUN_LABELS, "severity"])
        values = GaugeMetricFamily("losswatch_run_last_value", "The last value of the run's first tag of each role "
                                   "(loss, eval_loss, grad_norm, learning_rate, loss_scale)", labels=[*RUN_LABELS, "role"])
        for run in runs:
            labels = [run.name, run.source]
            if run.last_step is not None:
                step.add_metric(labels, run.last_step)
            if run.last_seen_at is not None:
                seen.add_metric(labels, run.last_seen_at)
            counts = open_counts.get(run.id, {})
            for severity in ("critical", "warning", "info"):
                alerts.add_metric([*labels, severity], counts.get(severity, 0))
            roles = self.config.for_run(run.source, run.name).roles
            for role, value in sorted(liveness.last_values(run.name, run.pace, roles).items()):
                if role != "other" and math.isfinite(value):
                    values.add_metric([*labels, role], value)
        yield from (stored, exported, step, seen, alerts, values)

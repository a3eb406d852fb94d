"""What dead receivers cost a scan: 20 runs whose loss turns NaN (20 changes), scanned with
three receivers that refuse connections, accept and never answer, and answer 500; beside
the same scan with no receiver, and with the alternative losswatch had before: every
delivery one after the other, with no budget.

    .venv/bin/python bench/delivery.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.alerts.webhooks import DeliveryConfig  # noqa: E402
from app.scan import DELIVERY_BUDGET, scan  # noqa: E402
from app.store.db import open_store  # noqa: E402
from tests.eventfiles import scalar_event, write_events  # noqa: E402
from tests.receiver import Receiver, running  # noqa: E402
from tests.service_helpers import free_port  # noqa: E402

RUNS = 20


def logdir(root: Path) -> Path:
    for r in range(RUNS):
        (root / f"run{r:02d}").mkdir(parents=True)
        v = np.linspace(3.0, 2.0, 600)
        v[500:] = np.nan
        write_events(root / f"run{r:02d}" / "events.out.tfevents.1",
                     [scalar_event(i, "train/loss", float(x)) for i, x in enumerate(v)])
    return root


def timed_scan(work: Path, logs: Path, name: str, webhooks: list[str], delivery: DeliveryConfig,
               budget: float | None) -> tuple[float, int]:
    store = open_store(f"sqlite:///{work / (name + '.db')}")
    try:
        with httpx.Client() as client:
            started = time.perf_counter()
            outcome = scan(store, [str(logs)], webhooks=webhooks, client=client, delivery=delivery, budget=budget)
            return time.perf_counter() - started, len(outcome.deliveries.failed)
    finally:
        store.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        logs = logdir(work / "logs")
        with running(Receiver(hang=True)) as hanging, running(Receiver(status=500)) as broken:
            dead = [f"http://127.0.0.1:{free_port()}/hook", hanging.url, broken.url]
            rows = [
                ("no receiver", *timed_scan(work, logs, "none", [], DeliveryConfig(), DELIVERY_BUDGET)),
                (f"3 dead receivers, side by side, {DELIVERY_BUDGET:g} s budget (now)",
                 *timed_scan(work, logs, "now", dead, DeliveryConfig(), DELIVERY_BUDGET)),
                ("3 dead receivers, side by side, no budget",
                 *timed_scan(work, logs, "nobudget", dead, DeliveryConfig(), None)),
                ("3 dead receivers, one at a time, no budget (before)",
                 *timed_scan(work, logs, "before", dead, DeliveryConfig(batch=1), None)),
            ]
    print(f"scan of {RUNS} runs, {RUNS} changes, receivers: refusing, hanging, HTTP 500 (webhook timeout 5 s)")
    print(f"{'case':<58} {'seconds':>8} {'failed':>7}  (failed: tried and failed; the rest stay in the outbox)")
    for name, seconds, failed in rows:
        print(f"{name:<58} {seconds:>8.1f} {failed:>7}")


if __name__ == "__main__":
    main()

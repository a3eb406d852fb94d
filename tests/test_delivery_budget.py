"""Delivery off the scan's critical path: receivers that refuse connections, hang, or answer
500 cost a scan at most its delivery budget, and what was not delivered stays in the outbox
for the next scan."""

from __future__ import annotations

import time

import numpy as np
import sqlalchemy as sa
from click.testing import CliRunner

from app.cli import main
from app.store.db import open_store
from app.store.schema import deliveries
from tests.eventfiles import scalar_event, write_events
from tests.receiver import Receiver, running
from tests.service_helpers import free_port

RUNS = 6


def failing_logdir(path) -> None:
    """RUNS runs whose loss turns NaN: one critical alert each."""
    for r in range(RUNS):
        (path / f"run{r}").mkdir(parents=True)
        v = np.linspace(3.0, 2.0, 600)
        v[500:] = np.nan
        write_events(path / f"run{r}" / "events.out.tfevents.1", [scalar_event(i, "train/loss", float(x)) for i, x in enumerate(v)])


def timed_scan(*args: str) -> tuple[float, object]:
    started = time.monotonic()
    result = CliRunner().invoke(main, ["scan", *args, "--fail-on", "never"])
    return time.monotonic() - started, result


def outbox(url: str) -> list[sa.Row]:
    store = open_store(url)
    try:
        with store.read() as conn:
            return conn.execute(sa.select(deliveries)).all()
    finally:
        store.close()


def test_dead_receivers_cost_a_scan_at_most_its_delivery_budget(tmp_path):
    failing_logdir(tmp_path / "logs")
    logs = str(tmp_path / "logs")
    own, alone = timed_scan(logs, "--db", f"sqlite:///{tmp_path / 'alone.db'}")
    assert alone.exit_code == 0, alone.output
    budget = 2.0
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with running(Receiver(hang=True)) as hanging, running(Receiver(status=500)) as broken:
        refused = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens there
        elapsed, result = timed_scan(
            logs, "--db", url, "--webhook", refused, "--webhook", hanging.url, "--webhook", broken.url,
            "--delivery-budget", str(budget),
        )
        assert result.exit_code == 0, result.output
        assert hanging.count() >= 1 and broken.count() >= 1  # both were tried
    # Unbounded, the hanging receiver alone would take 3 attempts x 5 s each.  A generous
    # bound: the scan's own time twice over, the budget, and 2 s of slack for the rest.
    assert elapsed < 2 * own + budget + 2.0, (elapsed, own)
    assert elapsed < 15.0
    assert "6 changes in 6 runs" in result.output
    rows = outbox(url)
    assert len(rows) == 3 * RUNS  # each run's change, for each receiver
    assert {r.status for r in rows} <= {"pending", "failed"} and all(r.delivered_at is None for r in rows)
    messages = [line for line in result.stderr.splitlines() if line.startswith("losswatch: delivery failed")]
    assert any(hanging.url in m for m in messages) and any(f"{broken.url}: HTTP 500" in m for m in messages)
    assert any(refused in m and "ConnectError" in m for m in messages)

    # the next scan, the receivers now working, delivers what was left
    with running(Receiver()) as receiver:
        store = open_store(url)
        try:
            with store.write() as conn:
                conn.execute(deliveries.update().values(url=receiver.url, next_attempt_at=0.0, status="failed"))
        finally:
            store.close()
        _, again = timed_scan(logs, "--db", url)
        assert again.exit_code == 0, again.output
        assert receiver.count() == 3 * RUNS
    assert {r.status for r in outbox(url)} == {"delivered"}

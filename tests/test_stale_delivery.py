"""A `stale` alert is about a whole run, so it has no tag: the messages receivers get must
still read well (no dangling empty tag in Slack's lines, no empty label to Alertmanager)."""

from __future__ import annotations

import httpx

from app.alerts.webhooks import DeliveryConfig
from app.scan import scan
from app.store.db import open_store
from tests.eventfiles import scalar_event, write_events
from tests.receiver import Receiver, running

T0 = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC
EXTERNAL = "https://lw.example"
FIRED = "no new point since 2027-01-15 08:16:30 UTC at step 99 (usual interval 10 s; stale after 10 min)"
RESOLVED = "advanced again, to step 120 after being stale since step 99"
REMEDIATION = ("Check whether the job crashed, hung or was pre-empted (scheduler state, the last lines of its log, "
               "GPU utilisation). If it ended normally, mark it finished: POST /v1/runs/<its name>/finish (the losswatch "
               "client does so when it closes cleanly).")


def write_run(path, last: int, pause_after: int = 0, pause: float = 0.0) -> None:
    """train/loss every 10 s of wall time from T0, steps 0..last, `pause` seconds later after `pause_after`."""
    path.mkdir(parents=True, exist_ok=True)
    write_events(path / "events.out.tfevents.1", [
        scalar_event(s, "train/loss", 2.0 - 1e-4 * s, T0 + 10 * s + (pause if s > pause_after else 0.0)) for s in range(last + 1)
    ])


def test_a_stale_alert_reads_well_in_every_receivers_message(tmp_path):
    logs = tmp_path / "logs"
    write_run(logs / "job", 99)
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    config = DeliveryConfig(external_url=EXTERNAL)
    with running(Receiver()) as generic, running(Receiver()) as slack, running(Receiver()) as manager, \
            httpx.Client() as client:
        specs = [generic.url, "slack+" + slack.url, "alertmanager+" + manager.url]

        def scan_at(now: float) -> None:
            outcome = scan(store, [str(logs)], webhooks=specs, client=client, delivery=config, clock=lambda: now)
            assert outcome.deliveries.failed == []

        scan_at(T0 + 990)  # read as it was written: nothing to say
        assert generic.count() == slack.count() == 0
        scan_at(T0 + 990 + 601)  # silent for over 10 minutes
        [(_, fired)] = generic.received
        assert (fired["change"], fired["alert"]["kind"], fired["alert"]["tag"]) == ("firing", "stale", "")
        assert (fired["alert"]["message"], fired["summary"]) == (FIRED, "1 alert on run job")
        links = f"<{fired['run_url']}|run page> · <{fired['alert_url']}|alert>"
        assert slack.received[-1][1]["text"] == f":warning: *WARNING* firing: `job` stale\n{FIRED}\n> {REMEDIATION}\n{links}"
        [sent] = manager.received[-1][1]
        assert sent["labels"] == {"alertname": "stale", "run": "job", "severity": "warning",
                                  "source": str(logs.resolve()), "alert_id": fired["alert"]["id"]}  # no empty tag
        assert sent["annotations"]["summary"] == FIRED and "endsAt" not in sent

        write_run(logs / "job", 120, pause_after=99, pause=4000.0)  # the job came back
        scan_at(T0 + 5210)
        resolved = generic.received[-1][1]
        assert [(c["change"], c["alert"]["kind"], c["alert"]["message"]) for c in resolved["changes"]] == [
            ("resolved", "stale", RESOLVED)]
        assert slack.received[-1][1]["text"] == f":warning: *WARNING* resolved: `job` stale\n{RESOLVED}\n{links}"
        [ended] = [a for a in manager.received[-1][1] if a["labels"]["alertname"] == "stale"]
        assert ended["annotations"]["summary"] == RESOLVED and "endsAt" in ended
    store.close()

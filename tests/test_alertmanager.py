"""losswatch as an Alertmanager client, against a real Alertmanager: alerts arrive with their
labels and annotations, Alertmanager groups them by run for its own receiver, a silence made
in Alertmanager holds, resolution ends them, and firing alerts are posted again."""

from __future__ import annotations

import numpy as np
from click.testing import CliRunner

from app.cli import main
from tests.alertmanager import alertmanager
from tests.eventfiles import scalar_event, write_events
from tests.receiver import Receiver, running
from tests.service_helpers import wait_for

EXTERNAL = "https://lw.example"


def nan_run(path, tags: list[str]) -> None:
    path.mkdir(parents=True)
    v = np.linspace(3.0, 2.0, 600)
    v[500:] = np.nan
    write_events(path / "events.out.tfevents.1", [scalar_event(i, tag, float(x)) for i, x in enumerate(v) for tag in tags])


def am_alerts(base: str, **filters) -> list[dict]:
    import httpx

    return httpx.get(f"{base}/api/v2/alerts", params=filters, timeout=10).json()


def notifications(receiver: Receiver) -> list[dict]:
    """What Alertmanager sent its webhook receiver: (status, run, alert count) per message."""
    return [(body["status"], body["groupLabels"].get("run"), len(body["alerts"])) for _, body in list(receiver.received)]


def test_alerts_reach_a_real_alertmanager_grouped_silenced_and_resolved(tmp_path):
    import httpx

    logs = tmp_path / "logs"
    nan_run(logs / "prod-a", ["train/loss", "train/aux_loss"])
    nan_run(logs / "dev-b", ["train/loss"])
    db = f"sqlite:///{tmp_path / 'store.db'}"
    with running(Receiver()) as hook, alertmanager(tmp_path / "am", hook.url) as am:
        def scan() -> None:
            result = CliRunner().invoke(main, ["scan", str(logs), "--db", db, "--alertmanager", am,
                                               "--external-url", EXTERNAL, "--fail-on", "never"])
            assert result.exit_code == 0 and "delivery failed" not in result.stderr, result.output

        scan()
        wait_for(lambda: len(am_alerts(am)) == 3, timeout=30)
        by_run = {}
        for alert in am_alerts(am):
            by_run.setdefault(alert["labels"]["run"], []).append(alert)
        [b] = by_run["dev-b"]
        assert set(b["labels"]) == {"alertname", "run", "tag", "severity", "source", "alert_id"}
        assert (b["labels"]["alertname"], b["labels"]["tag"], b["labels"]["severity"], b["labels"]["source"]) == (
            "nonfinite", "train/loss", "critical", str(logs.resolve()))
        alert_id = b["labels"]["alert_id"]
        assert b["annotations"]["url"] == f"{EXTERNAL}/alert/{alert_id}" == b["generatorURL"]
        assert b["annotations"]["run_url"].startswith(f"{EXTERNAL}/run?name=dev-b&source=")
        assert b["annotations"]["summary"].startswith("train/loss is NaN at 100 points from step 500")
        assert b["annotations"]["remediation"]
        assert sorted(a["labels"]["tag"] for a in by_run["prod-a"]) == ["train/aux_loss", "train/loss"]

        # Alertmanager groups by run: one message for prod-a's two alerts, one for dev-b's
        wait_for(lambda: len(hook.received) >= 2, timeout=30)
        assert sorted(notifications(hook)) == [("firing", "dev-b", 1), ("firing", "prod-a", 2)]

        # a silence made in Alertmanager holds for what losswatch sends
        silence = {"matchers": [{"name": "run", "value": "dev-b", "isRegex": False, "isEqual": True}],
                   "startsAt": "2020-01-01T00:00:00Z", "endsAt": "2099-01-01T00:00:00Z",
                   "createdBy": "test", "comment": "known"}
        assert httpx.post(f"{am}/api/v2/silences", json=silence, timeout=10).status_code == 200
        wait_for(lambda: [a["status"]["state"] for a in am_alerts(am) if a["labels"]["run"] == "dev-b"] == ["suppressed"],
                 timeout=30)

        # a scan with nothing new posts the firing alerts again, so Alertmanager keeps them
        updated = {a["fingerprint"]: a["updatedAt"] for a in am_alerts(am)}
        scan()
        wait_for(lambda: all(a["updatedAt"] != updated[a["fingerprint"]] for a in am_alerts(am)), timeout=30)

        # prod-a resumes from step 300 with finite values: its alerts resolve, with endsAt
        v = np.linspace(3.0, 2.0, 600)[300:]
        write_events(logs / "prod-a" / "events.out.tfevents.2",
                     [scalar_event(300 + i, tag, float(x)) for i, x in enumerate(v) for tag in ("train/loss", "train/aux_loss")])
        scan()
        wait_for(lambda: [a["labels"]["run"] for a in am_alerts(am)] == ["dev-b"], timeout=30)
        wait_for(lambda: ("resolved", "prod-a", 2) in notifications(hook), timeout=30)
        assert ("firing", "dev-b", 1) in notifications(hook) and ("resolved", "dev-b", 1) not in notifications(hook)


def test_the_service_delivers_to_alertmanager_from_its_background_loop_and_posts_firing_alerts_again(tmp_path):
    from tests.service_helpers import service

    points = [{"step": i, "tag": "train/loss", "value": "NaN" if i >= 250 else 3.0 - i / 300} for i in range(300)]
    with running(Receiver()) as hook, alertmanager(tmp_path / "am", hook.url) as am:
        with service(f"sqlite:///{tmp_path / 'store.db'}", webhooks=(f"alertmanager+{am}",), background=True,
                     alertmanager_resend=1.0, analysis_interval=0) as client:
            assert client.post("/v1/runs/svc/points", json={"points": points}).status_code == 200
            [alert] = wait_for(lambda: am_alerts(am), timeout=30)
            assert (alert["labels"]["run"], alert["labels"]["source"], alert["labels"]["alertname"]) == ("svc", "http", "nonfinite")
            assert "url" not in alert["annotations"]  # no --external-url: no links
            first = alert["updatedAt"]
            wait_for(lambda: am_alerts(am)[0]["updatedAt"] != first, timeout=30)

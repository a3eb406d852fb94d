"""Routing: receivers parsed from URLs and `[[receivers]]` tables, losswatch's options
taken out of the URL, warnings and worse by default, one message per run and scan with a
count and links, and each receiver's messages of a run kept in order."""

from __future__ import annotations

import time

import httpx
import numpy as np
import pytest
from click.testing import CliRunner

from app.alerts import receivers
from app.alerts.lifecycle import AlertRecord, Change, Event, State
from app.alerts.receivers import ReceiverError
from app.alerts.webhooks import DeliveryConfig
from app.cli import main
from app.scan import scan
from app.store import alerts as stored_alerts
from app.store.db import open_store
from tests.eventfiles import scalar_event, write_events
from tests.receiver import Receiver, running

EXTERNAL = "https://lw.example"


def test_options_are_taken_out_of_the_url_and_the_rest_kept():
    r = receivers.parse("slack+https://chat.example/hook?token=abc&min_severity=info&on=firing,updated&runs=prod-*,rl-?")
    assert (r.url, r.format, r.min_severity, r.on, r.runs, r.kinds) == (
        "https://chat.example/hook?token=abc", "slack", "info", ("firing", "updated"), ("prod-*", "rl-?"), ())
    assert r.spec == "slack+https://chat.example/hook?token=abc&min_severity=info&on=firing,updated&runs=prod-*,rl-?"
    assert receivers.parse(r.spec) == r
    plain = receivers.parse("https://hooks.slack.com/services/T/B/X")
    assert (plain.format, plain.min_severity, plain.on, plain.spec) == (
        "slack", "warning", ("firing", "resolved"), "slack+https://hooks.slack.com/services/T/B/X")
    table = receivers.from_table({"url": "https://chat.example/hook?token=abc", "format": "slack", "min_severity": "info",
                                  "on": ["firing", "updated"], "runs": ["prod-*", "rl-?"]}, "receivers[0]")
    assert table.spec == r.spec  # one receiver, however given


@pytest.mark.parametrize("text, message", [
    ("ftp://x/h", "'ftp://x/h' is not an http(s) URL"),
    ("https://x/h?min_severity=high", "'https://x/h?min_severity=high': min_severity must be info, warning or critical, not 'high'"),
    ("https://x/h?on=fired", "'https://x/h?on=fired': on must list some of firing, updated, resolved, not 'fired'"),
    ("https://x/h?kinds=spike", "'https://x/h?kinds=spike': kinds: 'spike' matches no alert kind"),
    ("https://x/h?runs=a&runs=b", "'https://x/h?runs=a&runs=b': runs is given twice"),
])
def test_a_bad_receiver_is_refused_saying_why(text, message):
    with pytest.raises(ReceiverError) as refused:
        receivers.parse(text)
    assert str(refused.value) == message


def test_bad_receiver_tables_name_the_table(tmp_path):
    with pytest.raises(ReceiverError) as refused:
        receivers.from_settings([{"url": "https://x/h", "min_sev": "info"}])
    assert str(refused.value) == "receivers[0]: unknown key 'min_sev' (known: format, kinds, min_severity, on, runs, url)"
    settings = tmp_path / "settings.toml"
    settings.write_text('[[receivers]]\nurl = "https://x/h"\non = "firing"\n')
    result = CliRunner().invoke(main, ["scan", str(tmp_path), "--db", f"sqlite:///{tmp_path / 's.db'}", "--config", str(settings)])
    assert result.exit_code == 2
    assert result.stderr == f"losswatch: {settings}: receivers[0]: on must be a list of strings\n"
    flag = CliRunner().invoke(main, ["scan", str(tmp_path), "--db", f"sqlite:///{tmp_path / 's.db'}",
                                     "--webhook", "https://x/h?min_severity=high"])
    assert flag.exit_code == 2
    assert flag.stderr == ("losswatch: 'https://x/h?min_severity=high': min_severity must be info, warning or critical, "
                           "not 'high'\n")


def event(alert_id: str, change: str, severity: str, kind: str = "loss_spike", run: str = "prod-a") -> Event:
    record = AlertRecord(alert_id, run, "train/loss", kind, State.FIRING, severity, None, 1, {}, 1, 0.0)
    return Event(Change(change), record, 1)


def test_routing_by_severity_change_kind_and_run_judges_an_alerts_highest_severity():
    changes = [
        (1, event("a", "firing", "info")),
        (2, event("b", "firing", "critical", kind="nonfinite")),
        (3, event("c", "resolved", "info")),  # fired as a warning earlier
        (4, event("d", "updated", "critical")),
        (5, event("e", "firing", "warning", run="dev-b")),
    ]
    peak = {"c": "warning"}
    routed = receivers.route(
        ["https://x/default", "https://x/all?min_severity=info&on=firing,updated,resolved",
         "https://x/spikes?kinds=loss_*&runs=prod-*", "https://x/crit?min_severity=critical"],
        changes, peak,
    )
    assert routed == {
        "https://x/default": [2, 3, 5],
        "https://x/all?min_severity=info&on=firing,updated,resolved": [1, 2, 3, 4, 5],
        "https://x/spikes?kinds=loss_*&runs=prod-*": [3],
        "https://x/crit?min_severity=critical": [2],
    }


def nan_run(path, tags: list[str]) -> None:
    path.mkdir(parents=True)
    v = np.linspace(3.0, 2.0, 600)
    v[500:] = np.nan
    write_events(path / "events.out.tfevents.1",
                 [scalar_event(i, tag, float(x)) for i, x in enumerate(v) for tag in tags])


def test_one_message_per_run_and_scan_for_each_receiver_with_counts_and_links(tmp_path):
    logs = tmp_path / "logs"
    nan_run(logs / "prod-a", ["train/loss", "train/aux_loss"])
    nan_run(logs / "dev-b", ["train/loss"])
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    config = DeliveryConfig(external_url=EXTERNAL)
    with running(Receiver()) as every, running(Receiver()) as prod, running(Receiver()) as slack, httpx.Client() as client:
        specs = [every.url, prod.url + "?runs=prod-*&min_severity=info&team=ml", "slack+" + slack.url + "?runs=prod-*"]
        outcome = scan(store, [str(logs)], webhooks=specs, client=client, delivery=config)
        assert outcome.deliveries.delivered == 4 and outcome.deliveries.failed == []
        by_run = {body["alert"]["run"]: body for _, body in every.received}
        assert sorted(by_run) == ["dev-b", "prod-a"]
        a = by_run["prod-a"]
        assert (a["count"], a["summary"]) == (2, "2 alerts on run prod-a")
        assert [(c["change"], c["alert"]["tag"]) for c in a["changes"]] == [("firing", "train/aux_loss"), ("firing", "train/loss")]
        assert a["change"] == "firing" and a["alert"] == a["changes"][0]["alert"]  # v1's fields: the first change
        source = str(logs.resolve())
        assert a["changes"][1]["run_url"] == f"{EXTERNAL}/run?name=prod-a&source={source.replace('/', '%2F')}"
        assert a["changes"][1]["alert_url"] == f"{EXTERNAL}/alert/{a['changes'][1]['alert']['id']}"
        assert (by_run["dev-b"]["count"], by_run["dev-b"]["summary"]) == (1, "1 alert on run dev-b")
        assert prod.paths == ["/hook?team=ml"]  # the options are losswatch's, the rest is the receiver's
        [(_, text)] = slack.received
        aux, loss = a["changes"]
        assert text["text"] == (
            ":rotating_light: *2 alerts on run prod-a*\n"
            f"• *CRITICAL* firing: train/aux_loss nonfinite: {aux['alert']['message']}\n"
            f"• *CRITICAL* firing: train/loss nonfinite: {loss['alert']['message']}\n"
            f"<{aux['run_url']}|run page> · <{aux['alert_url']}|alert>"
        )

        # prod-a resumes from step 300: its NaNs are rewritten (resolved, critical) and the
        # restart is info: it goes only where info was asked for
        v = np.linspace(3.0, 2.0, 600)[300:]  # the same curve, finite this time
        write_events(logs / "prod-a" / "events.out.tfevents.2",
                     [scalar_event(300 + i, tag, float(x)) for i, x in enumerate(v) for tag in ("train/loss", "train/aux_loss")])
        again = scan(store, [str(logs)], webhooks=specs, client=client, delivery=config)
        assert again.deliveries.failed == []
        kinds = {(r.event.change.value, r.event.record.kind) for r in again.events}
        assert ("firing", "restart") in kinds and ("resolved", "nonfinite") in kinds
        latest = every.received[-1][1]
        assert [(c["change"], c["alert"]["kind"]) for c in latest["changes"]] == [("resolved", "nonfinite")] * 2
        assert {c["alert"]["kind"] for c in prod.received[-1][1]["changes"]} == {"nonfinite", "restart"}
        assert len(every.received) == 3 and len(prod.received) == 2 and len(slack.received) == 2
    store.close()


def test_a_receivers_messages_of_a_run_go_out_in_order(store_url, tmp_path):
    store = open_store(store_url)
    logs = tmp_path / "logs"
    nan_run(logs / "r", ["train/loss"])
    scan(store, [str(logs)])  # a run and an alert change to queue against
    try:
        with store.write() as conn:
            run_id, event_id = conn.exec_driver_sql("SELECT a.run_id, e.id FROM alert_events e JOIN alerts a ON a.id = e.alert_id").one()
            for _ in range(2):
                stored_alerts.enqueue(conn, run_id, {"https://x/h": [event_id], "https://x/other": [event_id]}, now=0.0)
        now = time.time()
        with store.write() as conn:
            first = stored_alerts.claim_due(conn, now, now + 60, 10, "a" * 32)
        assert [(d.url, d.id) for d in first] == [("https://x/h", 1), ("https://x/other", 2)]  # the heads of the queues
        with store.write() as conn:
            assert stored_alerts.record_attempt(conn, 1, "a" * 32, "HTTP 500", now, retry_at=now - 1)
            assert stored_alerts.record_attempt(conn, 2, "a" * 32, None, now, retry_at=0.0)
        with store.write() as conn:
            second = stored_alerts.claim_due(conn, now, now + 60, 10, "b" * 32)
        assert sorted(d.id for d in second) == [1, 4]  # 3 waits: 1, before it to that receiver, failed
        assert all(d.events[0]["alert"]["kind"] == "nonfinite" for d in second)
    finally:
        store.close()


def test_an_updated_severity_ends_the_alertmanager_alert_under_the_severity_it_had():
    from app.alerts.webhooks import alertmanager_payload

    alert = {"id": "ab12", "run": "r", "tag": "train/loss", "kind": "loss_spike", "source": "http", "message": "m",
             "remediation": "do"}
    change = {"change": "updated", "state": "firing", "severity": "critical", "time": 200.0, "fired_at": 100.0, "alert": alert,
              "severities": ["critical", "warning"]}
    sent = alertmanager_payload([change])
    assert [(a["labels"]["severity"], a.get("endsAt")) for a in sent] == [("critical", None), ("warning", "1970-01-01T00:03:20Z")]
    assert {a["startsAt"] for a in sent} == {"1970-01-01T00:01:40Z"}
    first = alertmanager_payload([{**change, "change": "firing"}])
    assert [(a["labels"]["severity"], a.get("endsAt")) for a in first] == [("critical", None)]

"""Silences as data: matchers (globs) on run, kind, tag, severity and alert id, who and why,
an end honoured to the second; made, listed and expired from the API and the command line.
Silenced changes are stored and reported, and delivered nowhere."""

from __future__ import annotations

import time

import httpx
import numpy as np
import pytest
from click.testing import CliRunner

from app.alerts.lifecycle import AlertRecord, State
from app.alerts.silences import SilenceError, new_silence, parse_duration
from app.alerts.webhooks import deliver_due
from app.cli import main
from tests.eventfiles import scalar_event, write_events
from tests.receiver import Receiver, running
from tests.service_helpers import service


def record(**changes) -> AlertRecord:
    fields = dict(id="ab12", run="rl-7", tag="train/loss", kind="loss_spike", state=State.FIRING, severity="warning",
                  classification=None, start_step=1, finding={}, since_step=1, since_time=0.0)
    return AlertRecord(**{**fields, **changes})


def test_matchers_are_globs_and_all_must_match():
    s = new_silence({"run": "rl-*", "severity": "warn*"}, "ann", "", now=100.0, duration="1h")
    assert (s.ends_at, s.matchers) == (3700.0, {"run": "rl-*", "severity": "warn*"})
    assert s.matches(record()) and not s.matches(record(run="pretrain")) and not s.matches(record(severity="critical"))
    assert s.active(3699.0) and not s.active(3700.0)
    assert new_silence({"alert_id": "ab12"}, "ann", "", 0.0, ends_at=5.0).matches(record())
    assert parse_duration("1h30m") == 5400 and parse_duration("2d") == 172800 and parse_duration("45s") == 45


@pytest.mark.parametrize("matchers, kwargs, message", [
    ({}, {"duration": "2h"}, "a silence needs at least one matcher: run, kind, tag, severity, alert_id"),
    ({"kind": "spike"}, {"duration": "2h"}, "kind 'spike' matches no alert kind"),
    ({"severity": "high"}, {"duration": "2h"}, "severity 'high' matches no severity (info, warning, critical)"),
    ({"run": "x"}, {"duration": "2 hours"}, "duration '2 hours' is not like 2h, 90m or 1d12h (units s, m, h, d, w)"),
    ({"run": "x"}, {"duration": "0h"}, "duration '0h' must be longer than 0"),
    ({"run": "x"}, {}, "give the silence's end as ends_at (a Unix time) or as a duration (e.g. 2h), not both"),
    ({"run": "x"}, {"ends_at": 50.0}, "ends_at is not in the future"),
    ({"run": ""}, {"duration": "2h"}, "matcher run must be 1 to 1000 characters, without NUL"),
])
def test_a_bad_silence_says_why(matchers, kwargs, message):
    with pytest.raises(SilenceError) as refused:
        new_silence(matchers, "ann", "", now=100.0, **kwargs)
    assert str(refused.value) == message


def test_the_api_makes_lists_and_expires_silences_and_refuses_unknown_fields(store_url):
    with service(store_url) as c:
        made = c.post("/v1/silences", json={"run": "rl-*", "kind": "loss_spike", "created_by": "ann",
                                            "comment": "tuning", "duration": "2h"})
        assert made.status_code == 201
        body = made.json()
        assert body["matchers"] == {"run": "rl-*", "kind": "loss_spike"} and body["active"] is True
        assert abs(body["ends_at"] - (body["created_at"] + 7200)) < 1e-6
        assert [s["id"] for s in c.get("/v1/silences").json()] == [body["id"]]

        unknown = c.post("/v1/silences", json={"runs": "rl-*", "created_by": "ann", "duration": "2h"})
        assert unknown.status_code == 422
        assert "runs" in str(unknown.json())
        none = c.post("/v1/silences", json={"created_by": "ann", "duration": "2h"})
        assert none.status_code == 422
        assert none.json() == {"error": {"code": "invalid_silence",
                                         "message": "a silence needs at least one matcher: run, kind, tag, severity, alert_id"}}

        expired = c.delete(f"/v1/silences/{body['id']}")
        assert expired.status_code == 200 and expired.json()["active"] is False
        assert c.get("/v1/silences").json() == []
        assert [s["id"] for s in c.get("/v1/silences", params={"expired": "true"}).json()] == [body["id"]]
        missing = c.delete("/v1/silences/999")
        assert missing.status_code == 404
        assert missing.json() == {"error": {"code": "not_found", "message": "no silence 999"}}


def points(nan_from: int | None = None, start: int = 0, stop: int = 300) -> dict:
    return {"points": [{"step": i, "tag": "train/loss",
                        "value": "NaN" if nan_from is not None and i >= nan_from else 3.0 - i / 300} for i in range(start, stop)]}


def delivered_runs(store) -> list[tuple[str, str]]:
    """Deliver what is due; (run, change) of every change that went out."""
    seen = []

    def handle(request: httpx.Request) -> httpx.Response:
        import json

        for change in json.loads(request.content)["changes"]:
            seen.append((change["alert"]["run"], change["change"]))
        return httpx.Response(200)

    with httpx.Client(transport=httpx.MockTransport(handle)) as client:
        deliver_due(store, client)
    return sorted(seen)


def test_silenced_changes_are_stored_but_not_delivered_until_the_silence_ends(store_url):
    with service(store_url, webhooks=("https://hooks.example/x",), analysis_interval=0) as c:
        store = c.app.state.store
        c.post("/v1/silences", json={"run": "rl-*", "created_by": "ann", "duration": "1h"})
        short = c.post("/v1/silences", json={"run": "brief", "created_by": "ann", "ends_at": time.time() + 1.0}).json()
        fired = c.post("/v1/runs/rl-1/points", json=points(nan_from=250)).json()
        assert [a["change"] for a in fired["alerts"]] == ["firing"]  # stored and reported ...
        c.post("/v1/runs/pretrain/points", json=points(nan_from=250))
        assert delivered_runs(store) == [("pretrain", "firing")]  # ... and not delivered

        [silence] = [s for s in c.get("/v1/silences").json() if s["matchers"] == {"run": "rl-*"}]
        c.delete(f"/v1/silences/{silence['id']}")
        resolved = c.post("/v1/runs/rl-1/points", json=points(start=300, stop=360)).json()
        assert [a["change"] for a in resolved["alerts"]] == ["resolved"]
        assert delivered_runs(store) == [("rl-1", "resolved")]  # expired: delivered again

        time.sleep(max(0.0, short["ends_at"] - time.time()) + 0.1)
        c.post("/v1/runs/brief/points", json=points(nan_from=250))
        assert delivered_runs(store) == [("brief", "firing")]  # its end has passed


def test_the_command_line_makes_lists_and_expires_silences_and_scan_honours_them(tmp_path):
    db = f"sqlite:///{tmp_path / 'store.db'}"
    runner = CliRunner()
    made = runner.invoke(main, ["silence", "add", "--db", db, "--run", "rl-*", "--kind", "nonfinite", "--by", "ann",
                                "--comment", "known NaNs", "--duration", "1h"])
    assert (made.exit_code, made.output) == (0, "1\n")
    listed = runner.invoke(main, ["silence", "list", "--db", db])
    ends = time.strftime("%Y-%m-%d %H:%M", time.gmtime(time.time() + 3600))
    assert listed.output.startswith(f"1\trun=rl-* kind=nonfinite\tactive until {ends}")
    assert listed.output.endswith(" UTC\tann\tknown NaNs\n")
    bad = runner.invoke(main, ["silence", "add", "--db", db, "--by", "ann"])
    assert (bad.exit_code, bad.stderr) == (2, "losswatch: a silence needs at least one matcher: run, kind, tag, severity, alert_id\n")

    logs = tmp_path / "logs"
    for run in ("rl-1", "pretrain"):
        (logs / run).mkdir(parents=True)
        v = np.linspace(3.0, 2.0, 600)
        v[500:] = np.nan
        write_events(logs / run / "events.out.tfevents.1", [scalar_event(i, "train/loss", float(x)) for i, x in enumerate(v)])
    with running(Receiver()) as receiver:
        scanned = runner.invoke(main, ["scan", str(logs), "--db", db, "--webhook", receiver.url, "--fail-on", "never"])
        assert scanned.exit_code == 0 and "2 changes in 2 runs" in scanned.output  # both reported
        assert [body["alert"]["run"] for _, body in receiver.received] == ["pretrain"]  # one delivered

    assert runner.invoke(main, ["silence", "expire", "--db", db, "1"]).exit_code == 0
    assert runner.invoke(main, ["silence", "list", "--db", db]).output == ""
    assert runner.invoke(main, ["silence", "list", "--db", db, "--expired"]).output.startswith("1\trun=rl-* kind=nonfinite\texpired until ")
    missing = runner.invoke(main, ["silence", "expire", "--db", db, "7"])
    assert (missing.exit_code, missing.stderr) == (2, "losswatch: no silence 7\n")

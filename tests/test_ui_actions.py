"""The UI's buttons in a real browser (Debian's Chromium): acknowledge an alert, silence it or
its run for a chosen while, and on the alerts page list, add and expire silences; what the
API refuses is said on the page."""

from __future__ import annotations

import time

import httpx

from tests.service_helpers import server_process
from tests.test_ui import browser, watched_page  # noqa: F401 (browser is a fixture)


def nan_points() -> dict:
    return {"points": [{"step": i, "tag": "train/loss", "value": "NaN" if i >= 250 else 3.0 - i / 300} for i in range(300)]}


def test_in_a_real_browser_acknowledge_silence_and_expire(tmp_path, browser):  # noqa: F811
    with server_process(f"sqlite:///{tmp_path / 'ui.db'}") as (base, _):
        assert httpx.post(f"{base}/v1/runs/rl-1/points", json=nan_points(), timeout=30).status_code == 200
        [alert] = httpx.get(f"{base}/v1/alerts").json()
        errors: list[str] = []
        page = watched_page(browser, errors)

        page.goto(f"{base}/alert/{alert['id']}")
        page.click("button:has-text('Acknowledge')")
        page.wait_for_selector(".action-status:has-text('Acknowledged.')")
        assert httpx.get(f"{base}/v1/alerts").json()[0]["acknowledged"] is True
        page.select_option(".silence-duration", "1h")
        page.click("button:has-text('Silence this alert')")
        page.wait_for_selector(".action-status:has-text('(silence 1)')")
        assert page.inner_text(".action-status") == f"Silenced alert_id={alert['id']} for 1h (silence 1)."
        [made] = httpx.get(f"{base}/v1/silences").json()
        assert made["matchers"] == {"alert_id": alert["id"]} and made["created_by"] == "web UI"
        assert abs(made["ends_at"] - time.time() - 3600) < 120

        page.goto(f"{base}/run?name=rl-1")
        page.click("button:has-text('Silence this run')")
        page.wait_for_selector(".action-status:has-text('(silence 2)')")
        assert page.inner_text(".action-status") == "Silenced run=rl-1 for 2h (silence 2)."

        page.goto(f"{base}/alerts")
        page.wait_for_selector("#silences tbody tr >> nth=1")
        assert page.locator("#silences tbody tr").count() == 2
        page.fill("#silences input[name=kind]", "spike")
        page.click("#silences button:has-text('Add silence')")
        page.wait_for_selector("#silences .action-status.error")
        assert page.inner_text("#silences .action-status") == "kind 'spike' matches no alert kind"
        page.fill("#silences input[name=run]", "dev-*")
        page.fill("#silences input[name=kind]", "loss_spike")
        page.fill("#silences input[name=comment]", "<b>tuning</b>")
        page.click("#silences button:has-text('Add silence')")
        page.wait_for_selector("#silences tbody tr >> nth=2")
        cells = page.locator("#silences tbody tr >> nth=0 >> td").all_inner_texts()
        assert [cells[0], *cells[2:4]] == ["run=dev-* kind=loss_spike", "web UI", "<b>tuning</b>"]  # as text, not HTML
        page.click("#silences tbody tr >> nth=0 >> button:has-text('Expire')")
        page.wait_for_selector("#silences .action-status:has-text('Silence 3 expired.')")
        assert page.locator("#silences tbody tr").count() == 2
        assert [s["id"] for s in httpx.get(f"{base}/v1/silences").json()] == [2, 1]
        assert [e for e in errors if "422" not in e] == []  # the refused silence is the one console error

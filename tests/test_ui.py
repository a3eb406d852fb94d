"""The web UI: its pages through the test client, and end to end in headless Chromium
(Debian's package, installed by .ci/run): open a sample run, see its charts and alerts,
click through to an alert."""

from __future__ import annotations

import re
import shutil

import httpx
import pytest

from app.store import tokens
from app.store.db import open_store
from tests.conftest import REPO
from tests.service_helpers import server_process, service, wait_for

SAMPLES = str(REPO / "sample_runs")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def samples(tmp_path):
    """A service whose poller has read the sample runs."""
    with service(f"sqlite:///{tmp_path / 'ui.db'}", allowed_roots=(SAMPLES,), background=True, poll_interval=600) as c:
        c.post("/v1/logdirs", json={"path": SAMPLES})
        wait_for(lambda: len(c.get("/v1/runs").json()) == 9)  # the walk finds json/ and hf_trainer/ too
        yield c


def test_runs_page_lists_runs_worst_first_with_their_health(samples):
    page = samples.get("/").text
    names = re.findall(r'class="run-link"[^>]*>([^<]+)<', page)
    assert names[0] == "fp16_overflow" and set(names) >= {"clean", "bad_batch", "resume"}
    assert '<span class="badge critical" title="critical">4 critical</span>' in page


def test_run_page_has_a_chart_per_tag_and_the_alerts(samples):
    page = samples.get("/run", params={"name": "bad_batch"}).text
    assert re.findall(r'data-tag="([^"]+)"', page) == ["train/loss", "train/grad_norm", "train/lr"]
    assert "train/loss spiked at step 1500" in page
    assert samples.get("/run", params={"name": "nope"}).status_code == 404


def test_alerts_page_filters(samples):
    critical = samples.get("/alerts", params={"severity": "critical"}).text
    assert critical.count('class="alert-row') == 5
    assert samples.get("/alerts", params={"severity": "critical", "state": "resolved"}).text.count('class="alert-row') == 0
    assert samples.get("/alerts", params={"severity": "bogus"}).status_code == 422


def test_alert_page_says_what_to_do(samples):
    [alert] = [a for a in samples.get("/v1/alerts").json() if a["run"] == "bad_batch" and a["kind"] == "loss_spike"]
    page = samples.get(f"/alert/{alert['id']}").text
    assert "fast_recovering" in page and "What to do:" in page
    assert 'data-focus-start="1441" data-focus-end="1572"' in page  # the spike and its recovery, padded


def test_with_tokens_a_browser_signs_in_and_gets_a_cookie(tmp_path):
    url = f"sqlite:///{tmp_path / 'ui.db'}"
    store = open_store(url)
    with store.write() as conn:
        token = tokens.create_token(conn, "me", "read", 0.0)
    store.close()
    with service(url) as c:
        redirected = c.get("/", headers={"Accept": "text/html"}, follow_redirects=False)
        assert redirected.status_code == 303 and redirected.headers["location"].endswith("/login?next=%2F")
        assert c.post("/login", content="token=wrong", headers={"Content-Type": "application/x-www-form-urlencoded"}).status_code == 401
        signed = c.post("/login", content=f"token={token}", headers={"Content-Type": "application/x-www-form-urlencoded"},
                        follow_redirects=False)
        assert signed.status_code == 303 and "httponly" in signed.headers["set-cookie"].lower()
        assert c.get("/").status_code == 200 and c.get("/v1/runs").status_code == 200  # the cookie is sent along


@pytest.fixture
def browser():
    """Debian's Chromium, driven by playwright; skips saying why when either is missing."""
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run"],
        )
        yield browser
        browser.close()


def watched_page(browser, errors: list[str]):
    """A page whose script errors and console errors (a Content-Security-Policy violation is
    one: "Refused to execute inline script ...") land in `errors`."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    return page


def test_in_a_real_browser_open_a_run_see_its_chart_and_alerts_and_click_through(tmp_path, browser):
    with server_process(f"sqlite:///{tmp_path / 'ui.db'}", "--allow-root", SAMPLES, "--poll-interval", "600") as (base, _):
        httpx.post(f"{base}/v1/logdirs", json={"path": SAMPLES})
        wait_for(lambda: len(httpx.get(f"{base}/v1/runs").json()) == 9)  # the walk finds json/ and hf_trainer/ too
        errors = []
        page = watched_page(browser, errors)
        first = page.goto(base + "/")
        assert "script-src 'self'" in first.headers["content-security-policy"]  # the policy is on, and holds:
        page.click('text="bad_batch"')  # exactly: json/bad_batch is listed too
        page.wait_for_selector("#charts[data-ready=true]", timeout=20_000)
        assert page.locator(".chart canvas").count() == 3  # uPlot drew every tag
        assert page.locator("tr.alert-row").count() >= 2
        page.click("a.alert-link:has-text('train/loss spiked at step 1500')")
        page.wait_for_selector("#charts[data-ready=true]", timeout=20_000)
        assert "back in" in page.inner_text(".message")
        assert page.locator(".chart canvas").count() == 1
        page.goto(base + "/docs")  # Swagger UI, bundled, under the same policy
        page.wait_for_selector(".opblock", timeout=20_000)
        assert page.locator(".opblock").count() >= 10
        assert errors == []


def test_in_a_real_browser_a_tag_name_is_shown_as_text_when_its_series_fails(tmp_path, browser):
    tag = '<img src=x onerror="document.title=\'owned\'">'
    with server_process(f"sqlite:///{tmp_path / 'ui.db'}") as (base, _):
        httpx.post(f"{base}/v1/runs/xss/points", json={"points": [{"step": i, "tag": tag, "value": 1.0} for i in range(50)]})
        errors = []
        page = watched_page(browser, errors)
        page.route("**/series?*", lambda route: route.fulfill(status=503, body="{}"))  # the series request fails
        page.goto(base + "/run?name=xss")
        page.wait_for_selector("#charts p.error", timeout=20_000)
        assert page.inner_text("#charts p.error") == f"series {tag}: HTTP 503"
        assert page.locator("#charts img").count() == 0 and page.title() != "owned"
        assert [e for e in errors if "503" not in e] == []  # the failed fetch itself is the one console error

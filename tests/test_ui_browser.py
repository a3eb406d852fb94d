"""The web UI's charts and pages in headless Chromium (Debian's package, as in test_ui): labels
that do not overlap, one zoom for every chart, readable readouts, the compare view, smoothing,
search, live refresh, the dark scheme, error pages and the sign-in that returns to its page."""

from __future__ import annotations

import re

import httpx
import numpy as np
import pytest

from analyzers.baseline import trailing_baseline
from analyzers.config import AnalysisConfig
from analyzers.running_mean import worked_back
from app.store import tokens
from app.store.db import open_store
from tests.curves import running_mean_curve
from tests.service_helpers import server_process, wait_for
from tests.test_ui import SAMPLES, browser, watched_page  # noqa: F401 (browser is a fixture)

READY = "#charts[data-ready=true]"


@pytest.fixture(scope="module")
def samples_server(tmp_path_factory):
    """One `losswatch serve` over the sample runs for the module (reading them takes a while)."""
    db = tmp_path_factory.mktemp("ui") / "ui.db"
    with server_process(f"sqlite:///{db}", "--allow-root", SAMPLES, "--poll-interval", "600") as (base, _):
        httpx.post(f"{base}/v1/logdirs", json={"path": SAMPLES}, timeout=120)
        wait_for(lambda: len(httpx.get(f"{base}/v1/runs").json()) == 9, timeout=60)
        yield base


def opened(browser, url: str, errors: list[str], **options):  # noqa: F811
    page = watched_page(browser, errors) if not options else browser.new_page(viewport={"width": 1280, "height": 900}, **options)
    page.goto(url)
    page.wait_for_selector(READY, timeout=20_000)
    return page


def boxes(page, selector: str) -> list[dict]:
    return [page.locator(selector).nth(i).bounding_box() for i in range(page.locator(selector).count())]


def overlap(a: dict, b: dict) -> bool:
    return a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"] and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"]


def inside(a: dict, box: dict) -> bool:
    return a["x"] >= box["x"] - 0.5 and a["x"] + a["width"] <= box["x"] + box["width"] + 0.5 \
        and a["y"] >= box["y"] - 0.5 and a["y"] + a["height"] <= box["y"] + box["height"] + 0.5


def x_ranges(page) -> list[str]:
    return page.eval_on_selector_all(".chart", "els => els.map(e => e.dataset.x)")


def drag(page, chart: int, x0: float, x1: float) -> None:
    """Drag across chart `chart` from x0 to x1 (shares of the plot's width)."""
    page.locator(".u-over").nth(chart).scroll_into_view_if_needed()
    over = page.locator(".u-over").nth(chart).bounding_box()
    y = over["y"] + over["height"] / 2
    page.mouse.move(over["x"] + over["width"] * x0, y)
    page.mouse.down()
    page.mouse.move(over["x"] + over["width"] * (x0 + x1) / 2, y, steps=5)
    page.mouse.move(over["x"] + over["width"] * x1, y, steps=5)
    page.mouse.up()


def test_alert_labels_do_not_overlap_and_stay_inside_the_plot(samples_server, browser):  # noqa: F811
    errors = []
    page = opened(browser, samples_server + "/run?name=fp16_overflow", errors)
    charts = page.locator(".chart")
    labelled = 0
    for i in range(charts.count()):
        plot = charts.nth(i).locator(".u-over").bounding_box()
        labels = boxes(page, f".chart >> nth={i} >> .mark-label")
        labelled += len(labels)
        assert all(inside(label, plot) for label in labels), i
        assert not any(overlap(a, b) for j, a in enumerate(labels) for b in labels[j + 1:]), i
    assert labelled >= 8  # fp16_overflow has a burst of nonfinite grad norms: they are labelled, in lanes
    # Those that do not fit are named when hovered.
    page.locator(".chart[data-tag='train/grad_norm']").scroll_into_view_if_needed()
    grad = page.locator(".chart[data-tag='train/grad_norm'] .u-over").bounding_box()
    texts = set()
    for k in range(200):
        page.mouse.move(grad["x"] + grad["width"] * (0.75 + k * 0.0012), grad["y"] + 40)
        texts.add(page.locator(".chart-box:has(.chart[data-tag='train/grad_norm']) .mark-hover").inner_text())
    assert any("nonfinite" in t and "train/grad_norm is +Inf" in t for t in texts)
    assert errors == []


def test_one_zoom_for_every_chart_drag_double_click_and_url(samples_server, browser):  # noqa: F811
    errors = []
    page = opened(browser, samples_server + "/run?name=bad_batch", errors)
    full = x_ranges(page)
    assert len(set(full)) == 1 and full[0] == "0..2999"
    drag(page, 2, 0.4, 0.6)  # on the last chart: every chart follows
    page.wait_for_selector("#charts:not([data-zoom=''])")
    zoomed = x_ranges(page)
    lo, hi = (int(v) for v in zoomed[0].split(".."))
    assert len(set(zoomed)) == 1 and 1000 < lo < hi < 2000
    assert re.search(rf"from={lo}&to={hi}", page.url)
    page.locator(".u-over").nth(0).dblclick()  # double-click on the first: every chart zooms out
    page.wait_for_selector("#charts[data-zoom='']")
    assert x_ranges(page) == full and "from=" not in page.url
    # The URL opens on the zoom it names.
    page = opened(browser, samples_server + "/run?name=bad_batch&from=1400&to=1600", errors)
    assert set(x_ranges(page)) == {"1400..1600"}
    assert errors == []


def test_the_lr_readout_and_ticks_keep_significant_figures(samples_server, browser):  # noqa: F811
    errors = []
    page = opened(browser, samples_server + "/run?name=clean", errors)
    lr = page.locator(".chart[data-tag='train/lr']")
    lr.scroll_into_view_if_needed()
    over = lr.locator(".u-over").bounding_box()
    page.mouse.move(over["x"] + over["width"] * 0.01, over["y"] + over["height"] / 2)  # in the warm-up: LR about 1e-5
    readout = lr.locator(".u-legend .u-series").nth(1).locator(".u-value").inner_text()
    assert re.fullmatch(r"\d(\.\d+)?e-\d", readout) and float(readout) > 0, readout
    assert page.evaluate("chartkit.fmt(3e-5)") == "3e-5" and page.evaluate("chartkit.fmt(0.0004567)") == "4.567e-4"
    # A zoomed log axis's ticks are told apart, never "2e-4, 2e-4, 2e-4".
    assert page.evaluate("chartkit.ticks([2.1e-4, 2.2e-4, 2.3e-4])") == ["2.1e-4", "2.2e-4", "2.3e-4"]
    assert page.evaluate("chartkit.ticks([1e-4, 2e-4, 3e-4, 1e-3])") == ["1e-4", "2e-4", "3e-4", "0.001"]
    assert errors == []


def test_log_axis_follows_the_plot_rule_and_toggles(samples_server, browser):  # noqa: F811
    errors = []
    page = opened(browser, samples_server + "/run?name=bad_batch", errors)
    loss = page.locator(".chart[data-tag='train/loss']")
    assert loss.get_attribute("data-log") == "true"  # a 45x spike: log, as `losswatch plot` draws it
    page.locator(".chart-box:has(.chart[data-tag='train/loss']) button.log-toggle").click()
    assert loss.get_attribute("data-log") == "false"
    assert errors == []


def test_charts_follow_the_window_size(samples_server, browser):  # noqa: F811
    errors = []
    page = opened(browser, samples_server + "/run?name=clean", errors)
    wide = page.locator(".chart .u-over").first.bounding_box()["width"]
    page.set_viewport_size({"width": 800, "height": 900})
    page.wait_for_function(f"() => document.querySelector('.chart .u-over').getBoundingClientRect().width < {wide - 200}")
    assert errors == []


def test_compare_overlays_runs_picked_on_the_runs_page(samples_server, browser):  # noqa: F811
    errors = []
    page = watched_page(browser, errors)
    page.goto(samples_server + "/")
    page.check("input[aria-label='compare clean']")
    page.check("input[aria-label='compare bad_batch']")
    page.click("#compare-form button[type=submit]")
    page.wait_for_selector(READY, timeout=20_000)
    assert "/compare?" in page.url
    legend = page.locator(".chart[data-tag='train/loss'] .u-legend .u-series .u-label").all_inner_texts()
    assert legend == ["step", "bad_batch", "clean"]  # in the runs page's order
    assert page.locator(".chart canvas").count() == 3
    page.goto(samples_server + "/compare?runs=clean,lr_burst,resume")
    page.wait_for_selector(READY, timeout=20_000)
    assert page.locator(".chart[data-tag='train/lr'] .u-legend .u-series .u-label").all_inner_texts() == ["step", "clean", "lr_burst", "resume"]
    assert errors == []


def test_smoothing_draws_the_average_over_the_faint_raw_curve(samples_server, browser):  # noqa: F811
    errors = []
    page = opened(browser, samples_server + "/run?name=clean", errors)
    page.fill("#smoothing", "0.9")
    page.dispatch_event("#smoothing", "input")
    loss = page.locator(".chart[data-tag='train/loss']")
    assert loss.locator(".u-legend .u-series .u-label").all_inner_texts() == ["step", "train/loss (raw)", "train/loss"]
    over = loss.locator(".u-over").bounding_box()
    page.mouse.move(over["x"] + over["width"] * 0.5, over["y"] + over["height"] / 2)
    raw, smooth = (float(v) for v in loss.locator(".u-legend .u-value").all_inner_texts()[1:3])
    assert raw != smooth and 0.5 < smooth < 1.2  # the average of a noisy ~0.85 curve
    assert "smooth=0.9" in page.url
    assert errors == []


def test_search_filters_runs_by_substring_and_regex(samples_server, browser):  # noqa: F811
    errors = []
    page = watched_page(browser, errors)
    page.goto(samples_server + "/")
    page.fill("input[name=q]", "lr_")
    page.click("#run-search button[type=submit]")
    assert page.locator("a.run-link").all_inner_texts() == ["lr_too_high", "lr_burst"]  # worst first
    page.fill("input[name=q]", "^(clean|resume)$")
    page.check("input[name=regex]")
    page.click("#run-search button[type=submit]")
    assert sorted(page.locator("a.run-link").all_inner_texts()) == ["clean", "resume"]
    page.fill("input[name=q]", "(")
    page.click("#run-search button[type=submit]")
    assert page.inner_text(".error-message") == "the search '(' is not a regular expression: missing ), unterminated subpattern at position 0"
    assert [e for e in errors if "422" not in e] == []


def test_live_refresh_picks_up_a_posted_point_and_keeps_the_zoom(tmp_path, browser):  # noqa: F811
    with server_process(f"sqlite:///{tmp_path / 'ui.db'}") as (base, _):
        def post(points):
            assert httpx.post(f"{base}/v1/runs/live/points", json={"points": points}).status_code == 200

        post([{"step": i, "tag": "train/loss", "value": 2.0 - i / 400} for i in range(300)])
        errors = []
        page = opened(browser, base + "/run?name=live&refresh=1&from=100&to=400", errors)
        chart = page.locator(".chart[data-tag='train/loss']")
        assert chart.get_attribute("data-last") == "299"
        post([{"step": 300, "tag": "train/loss", "value": 1.2}, {"step": 301, "tag": "train/loss", "value": "NaN"}])
        page.wait_for_selector(".chart[data-tag='train/loss'][data-last='301']", timeout=10_000)
        assert chart.get_attribute("data-x") == "100..400"  # the zoom survives the refresh
        page.wait_for_selector("p.new-alert", timeout=10_000)  # the NaN's alert is announced
        assert "train/loss is NaN" in page.inner_text("p.new-alert")
        assert errors == []


def test_the_dark_scheme_follows_the_system(samples_server, browser):  # noqa: F811
    page = browser.new_page(color_scheme="dark")
    page.goto(samples_server + "/run?name=clean")
    page.wait_for_selector(READY, timeout=20_000)
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert sum(int(c) for c in re.findall(r"\d+", background)[:3]) < 150, background
    light = browser.new_page(color_scheme="light")
    light.goto(samples_server + "/run?name=clean")
    assert light.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(250, 251, 252)"


def test_a_browser_gets_error_pages_and_the_api_json(samples_server, browser):  # noqa: F811
    page = browser.new_page()
    response = page.goto(samples_server + "/run?name=nope")
    assert response.status == 404 and page.inner_text("h1") == "Not found" and page.inner_text(".error-message") == "no run 'nope'"
    response = page.goto(samples_server + "/alert/0123456789abcdef")
    assert response.status == 404 and page.inner_text(".error-message") == "no alert '0123456789abcdef'"
    response = page.goto(samples_server + "/no/such/page")
    assert response.status == 404 and page.inner_text(".error-message") == "there is no page at this address"
    api = httpx.get(samples_server + "/v1/runs/nope", headers={"Accept": "text/html"})
    assert api.status_code == 404 and api.json() == {"error": {"code": "not_found", "message": "no run 'nope'"}}


def test_sign_in_returns_to_the_deep_link(tmp_path, browser):  # noqa: F811
    url = f"sqlite:///{tmp_path / 'ui.db'}"
    store = open_store(url)
    with store.write() as conn:
        token = tokens.create_token(conn, "me", "write", 0.0)
    store.close()
    with server_process(url) as (base, _):
        headers = {"Authorization": f"Bearer {token}"}
        httpx.post(f"{base}/v1/runs/deep%20run/points", json={"points": [{"step": i, "tag": "loss", "value": 1.0} for i in range(20)]},
                   headers=headers).raise_for_status()
        errors = []
        page = watched_page(browser, errors)
        page.goto(base + "/run?name=deep%20run&from=5&to=15")
        assert "/login?next=" in page.url
        page.fill("input[name=token]", token)
        page.click("button:has-text('Sign in')")
        page.wait_for_selector(READY, timeout=20_000)
        assert page.url == base + "/run?name=deep%20run&from=5&to=15" and page.inner_text("h1").startswith("deep run")
        # Only paths on this service are returned to.
        page.context.clear_cookies()
        page.goto(base + "/login?next=//evil.example/")
        page.fill("input[name=token]", token)
        page.click("button:has-text('Sign in')")
        page.wait_for_load_state()
        assert page.url == base + "/"
        assert [e for e in errors if "401" not in e] == []


def test_the_runs_page_draws_each_loss_as_a_sparkline_with_its_alerts(samples_server, browser):  # noqa: F811
    errors = []
    page = watched_page(browser, errors)
    page.goto(samples_server + "/")
    page.wait_for_selector("td.spark[data-run=fp16_overflow][data-drawn=true] canvas", timeout=20_000)
    page.wait_for_selector("td.spark[data-run=clean][data-drawn=true] canvas", timeout=20_000)
    assert int(page.get_attribute("td.spark[data-run=fp16_overflow]", "data-marked")) >= 2  # its divergent spike and NaN
    assert page.get_attribute("td.spark[data-run=clean]", "data-marked") == "0"
    assert "loss_spike at 1897" in page.get_attribute("td.spark[data-run=fp16_overflow]", "title")
    assert errors == []


def test_a_chart_downloads_as_csv_and_png(samples_server, browser):  # noqa: F811
    errors = []
    page = opened(browser, samples_server + "/run?name=bad_batch&from=1400&to=1600", errors)
    box = page.locator(".chart-box:has(.chart[data-tag='train/loss'])")
    with page.expect_download() as csv_download:
        box.locator("button:has-text('CSV')").click()
    assert csv_download.value.suggested_filename == "bad_batch_train_loss.csv"
    lines = open(csv_download.value.path()).read().splitlines()
    assert lines[0] == "step,train/loss" and lines[1].startswith("1400,") and lines[-1].startswith("1600,")
    with page.expect_download() as png_download:
        box.locator("button:has-text('PNG')").click()
    assert open(png_download.value.path(), "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert errors == []


def test_the_x_axis_is_the_step_the_relative_time_or_the_wall_time_kept_in_the_url(samples_server, browser):  # noqa: F811
    errors = []
    page = opened(browser, samples_server + "/run?name=bad_batch", errors)
    assert page.input_value("#x-axis") == "step" and "x=" not in page.url
    page.select_option("#x-axis", "relative")
    page.wait_for_selector(".chart[data-xaxis=relative]")
    assert "x=relative" in page.url
    assert set(x_ranges(page)) == {"0..2999"}  # the same steps, now placed by time
    ticks = page.get_attribute(".chart[data-tag='train/loss']", "data-xticks").split("|")
    assert ticks[0] == "0s" and all(re.fullmatch(r"\d+[smh]( \d+[sm])?", t) for t in ticks) and len(set(ticks)) == len(ticks), ticks
    loss = page.locator(".chart[data-tag='train/loss']")
    over = loss.locator(".u-over").bounding_box()
    page.mouse.move(over["x"] + over["width"] * 0.5, over["y"] + over["height"] / 2)
    readout = loss.locator(".u-legend .u-series").nth(0).locator(".u-value").inner_text()
    assert re.fullmatch(r"2m [23]\ds \(step 1[45]\d\d\)", readout), readout  # 0.1 s a step
    # A zoom in time is a zoom in steps, and the URL keeps both.
    drag(page, 0, 0.4, 0.6)
    page.wait_for_selector("#charts:not([data-zoom=''])")
    lo, hi = (int(v) for v in x_ranges(page)[0].split(".."))
    assert 1000 < lo < hi < 2000 and f"from={lo}&to={hi}" in page.url and "x=relative" in page.url
    # Wall time, from the URL: times of day, and back to steps unchanged.
    page = opened(browser, samples_server + "/run?name=bad_batch&from=1400&to=1600&x=wall", errors)
    assert page.input_value("#x-axis") == "wall" and set(x_ranges(page)) == {"1400..1600"}
    ticks = page.get_attribute(".chart[data-tag='train/loss']", "data-xticks").split("|")
    assert all(re.fullmatch(r"\d\d:\d\d", t) for t in ticks), ticks
    page.select_option("#x-axis", "step")
    page.wait_for_selector(".chart[data-xaxis=step]")
    assert set(x_ranges(page)) == {"1400..1600"} and "x=" not in page.url
    # A run logged without wall times has only steps.
    page = opened(browser, samples_server + "/run?name=hf_trainer&x=relative", errors)
    assert page.input_value("#x-axis") == "step"
    assert page.eval_on_selector_all("#x-axis option:disabled", "os => os.map(o => o.value)") == ["relative", "wall"]
    assert set(page.eval_on_selector_all(".chart", "els => els.map(e => e.dataset.xaxis)")) == {"step"}
    assert errors == []


def test_the_run_clock_maps_steps_to_times_and_back(samples_server, browser):  # noqa: F811
    page = opened(browser, samples_server + "/run?name=clean", [])
    check = """() => {
      const c = chartkit.clock([0, 10, 20, 30, 40], [100, null, 120, 110, 140]);
      return [c.start, c.toTime(10), c.toTime(25), c.toStep(110), c.toStep(130), c.toTime(50),
              chartkit.clock([5], [1]), chartkit.duration(45), chartkit.duration(725), chartkit.duration(12000), chartkit.duration(180000)];
    }"""
    # A wall time missing is skipped; a clock set back (110 after 120) is held, 1 ms on.
    start, at10, at25, step110, step130, at50, *rest = page.evaluate(check)
    assert (start, at10, step110) == (100, 110, 10)
    assert abs(at25 - 120.0005) < 1e-9 and abs(step130 - 34.9995) < 1e-3 and abs(at50 - 160.0) < 1e-2
    assert rest == [None, "45s", "12m 5s", "3h 20m", "2d 2h"]


def test_the_loss_chart_draws_the_detectors_baseline_and_noise_band(samples_server, browser):  # noqa: F811
    series = httpx.get(samples_server + "/v1/runs/bad_batch/series", params={"tag": "train/loss", "max_points": 100_000}).json()
    values = np.array([v for _, v in series["points"] if isinstance(v, float)])
    expected = trailing_baseline(values, AnalysisConfig().spikes.baseline)
    body = httpx.get(samples_server + "/v1/runs/bad_batch/baseline", params={"tag": "train/loss", "max_points": 100_000}).json()
    assert body["sigmas"] == 3.0 and len(body["points"]) == len(values) == 3000
    assert (body["averaged"], body["losses"]) == (0, [])  # logged as it is
    level = np.array([np.nan if p[1] is None else p[1] for p in body["points"]])
    sigma = np.array([np.nan if p[2] is None else p[2] for p in body["points"]])
    np.testing.assert_allclose(level, np.where(np.isfinite(expected.sigma), expected.level, np.nan), equal_nan=True)
    np.testing.assert_allclose(sigma, expected.sigma, equal_nan=True)
    assert np.isnan(level[:39]).all() and np.isfinite(level[40:]).all()  # none before a sigma is known
    zoomed = httpx.get(samples_server + "/v1/runs/bad_batch/baseline", params={"tag": "train/loss", "start": 1400, "end": 1600, "max_points": 50}).json()
    steps = [p[0] for p in zoomed["points"]]
    assert len(steps) == 50 and steps[0] == 1400 and steps[-1] == 1600
    missing = httpx.get(samples_server + "/v1/runs/bad_batch/baseline", params={"tag": "nope"})
    assert missing.status_code == 404 and missing.json()["error"]["message"] == "run 'bad_batch' has no tag 'nope'"
    errors = []
    page = opened(browser, samples_server + "/run?name=bad_batch&from=1400&to=1600", errors)
    loss = page.locator(".chart[data-tag='train/loss']")
    assert int(loss.get_attribute("data-band")) > 100  # drawn, from the zoomed window's baseline
    assert page.locator(".chart[data-tag='train/grad_norm']").get_attribute("data-band") is None  # the loss chart only
    page.locator(".chart-box:has(.chart[data-tag='train/loss']) button.band-toggle").click()
    page.wait_for_selector(".chart[data-tag='train/loss'][data-band=off]")
    assert errors == []


def test_a_loss_logged_as_running_means_is_drawn_worked_back_over_the_means_as_logged(tmp_path, browser):  # noqa: F811
    curve, _ = running_mean_curve(4, 200, points=2000, spike_at=1100)
    steps, means = curve.steps, curve.tags["train/loss"]
    with server_process(f"sqlite:///{tmp_path / 'ui.db'}") as (base, _):
        for at in range(0, len(steps), 500):
            points = [{"step": int(s), "tag": "train/loss", "value": float(v)} for s, v in zip(steps[at : at + 500], means[at : at + 500])]
            assert httpx.post(f"{base}/v1/runs/keras/points", json={"points": points}).status_code == 200
        body = httpx.get(f"{base}/v1/runs/keras/baseline", params={"tag": "train/loss", "max_points": 100_000}).json()
        batches, period = worked_back(steps, means)
        assert body["averaged"] == period == 200
        np.testing.assert_allclose([v for _, v in body["losses"]], batches)
        expected = trailing_baseline(batches, AnalysisConfig().spikes.baseline)  # the band the detectors measure against
        level = np.where(np.isfinite(expected.sigma), expected.level, np.nan)  # none before a sigma is known
        np.testing.assert_allclose([np.nan if p[1] is None else p[1] for p in body["points"]], level, equal_nan=True)
        errors = []
        page = opened(browser, base + "/run?name=keras", errors)
        loss = page.locator(".chart[data-tag='train/loss']")
        assert loss.locator(".u-legend .u-series .u-label").all_inner_texts() == [
            "step", "train/loss (logged: running mean of 200-step epochs)", "train/loss"]
        over = loss.locator(".u-over").bounding_box()
        page.mouse.move(over["x"] + over["width"] * 0.55, over["y"] + over["height"] / 2)
        logged, batch = (float(v) for v in loss.locator(".u-legend .u-value").all_inner_texts()[1:3])
        assert logged != batch  # two curves, not one drawn twice
        # compared with a run that logged those batches as they are, each run's line is its batches
        points = [{"step": int(s), "tag": "train/loss", "value": float(v)} for s, v in zip(steps, batches)]
        assert httpx.post(f"{base}/v1/runs/plain/points", json={"points": points}).status_code == 200
        page = opened(browser, base + "/compare?runs=keras,plain", errors)
        loss = page.locator(".chart[data-tag='train/loss']")
        assert loss.locator(".u-legend .u-series .u-label").all_inner_texts() == [
            "step", "keras (logged: running mean of 200-step epochs)", "keras", "plain"]
        over = loss.locator(".u-over").bounding_box()
        page.mouse.move(over["x"] + over["width"] * 0.55, over["y"] + over["height"] / 2)
        logged, keras, plain = loss.locator(".u-legend .u-value").all_inner_texts()[1:4]
        assert keras == plain != logged
        assert errors == []

"""What the web UI's pages show (app.service.ui_views), without a browser, and the pages that
use it through the test client: runs searched, sorted, paged and with their health; a Hugging
Face run's summaries folded into a table; alert windows and evidence for people."""

from __future__ import annotations

import json
import re

import pytest

from app.service import ui_views as views
from app.service.errors import ApiError
from tests.conftest import REPO
from tests.service_helpers import service


def test_natural_order_puts_seed2_before_seed10():
    names = ["seed10", "seed2", "Seed1", "run-b", "run-a", "seed2b"]
    assert sorted(names, key=views.natural_key) == ["run-a", "run-b", "Seed1", "seed2", "seed2b", "seed10"]


def test_search_by_substring_or_regex_and_a_bad_regex_says_where():
    assert views.matcher("LR", False)("exp/lr-3e-4") and not views.matcher("lr", False)("clean")
    assert views.matcher(r"^seed\d$", True)("seed7") and not views.matcher(r"^seed\d$", True)("seed10")
    with pytest.raises(ApiError) as e:
        views.matcher("seed[", True)
    assert (e.value.status, e.value.message) == (422, "the search 'seed[' is not a regular expression: unterminated character set at position 4")


@pytest.mark.parametrize("query, risk", [
    ("(a+)+$", "a repetition inside a repetition"),
    ("(ab|a)*c", "alternatives inside a repetition"),
    (r"(a)\1", "a back-reference"),
    ("a*b*c*d*e", "more than 3 unbounded repetitions"),
])
def test_a_regex_that_could_backtrack_without_end_is_refused_saying_why(query, risk):
    with pytest.raises(ApiError) as e:
        views.matcher(query, True)
    assert e.value.message == f"the search {query!r} has {risk}, which can backtrack for minutes: simplify it"
    assert views.matcher(r"lr_(1e-3|3e-4)$", True)("exp/lr_3e-4") and views.matcher("a{2,5}b", True)("xaab")


def test_pages_of_runs():
    rows = list(range(250))
    assert views.page_of(rows, 1) == (rows[:100], 3)
    assert views.page_of(rows, 3) == (rows[200:], 3)
    assert views.page_of(rows, 9) == (rows[200:], 3)  # past the end: the last page
    assert views.page_of([], 1) == ([], 1)


@pytest.mark.parametrize("finding, ongoing, window", [
    ({"start_step": 1500, "end_step": 1528}, False, (1441, 1587)),  # a spike: padded by 2% of the run (59 steps)
    ({"start_step": 200, "end_step": None}, True, (0, 2999)),  # a plateau still going: to the run's last step, half again before
    ({"start_step": 1921, "end_step": None}, True, (1382, 2999)),  # a NaN still going: never past the last step
    ({"start_step": 10, "end_step": 20}, False, (0, 79)),  # never before the first step
    ({"start_step": 1500, "peak_step": 1999, "end_step": None}, False, (1251, 2248)),  # a restart: its from and to steps
    ({"start_step": 100, "end_step": 2900}, False, (0, 2999)),
])
def test_an_alert_window_is_sized_to_the_incident_and_clipped_to_the_run(finding, ongoing, window):
    assert views.alert_window(finding, ongoing, 0, 2999) == window


def test_an_alert_charts_the_loss_and_the_tag_that_is_its_point():
    tags = ["train/grad_norm", "train/loss", "train/loss_scale", "train/lr"]
    assert views.alert_charts("restart", "*", tags, "r") == ["train/loss", "train/lr"]
    assert views.alert_charts("loss_scale_collapse", "train/loss_scale", tags, "r") == ["train/loss", "train/loss_scale"]
    assert views.alert_charts("grad_norm_explosion", "train/grad_norm", tags, "r") == ["train/loss", "train/grad_norm"]
    assert views.alert_charts("loss_spike", "train/loss", tags, "r") == ["train/loss"]


def test_evidence_is_written_for_people():
    assert [views.human(v) for v in (True, False, ["NaN"], 0.05232051080192302, 524288.0, 1.9073486328125e-06, 19, 1234567, None)] == [
        "yes", "no", "NaN", "0.05232", "5.243e+05", "1.907e-06", "19", "1,234,567", "none"]
    assert views.human(float("inf")) == "Infinity" and views.human({"a": 1.0, "b": [1, 2]}) == "a: 1; b: 1, 2"


def test_tags_are_grouped_by_prefix_with_one_point_summaries_in_a_table():
    tags = [("train/loss", 900, 0, 899), ("eval/loss", 9, 100, 900), ("train/lr", 900, 0, 899), ("train_runtime", 1, 900, 900)]
    groups, summaries = views.tag_groups(tags, "r")
    assert [(g.prefix, [c["tag"] for c in g.charts]) for g in groups] == [("train/", ["train/loss", "train/lr"]), ("eval/", ["eval/loss"])]
    assert groups[0].charts[0]["extra"] == ["eval/loss"] and summaries == ["train_runtime"]


@pytest.fixture
def client(tmp_path):
    with service(f"sqlite:///{tmp_path / 'ui.db'}") as c:
        yield c


def post(c, run: str, values: list[float]) -> None:
    assert c.post(f"/v1/runs/{run}/points", json={"points": [{"step": i, "tag": "loss", "value": v} for i, v in enumerate(values)]}).status_code == 200


def run_names(page: str) -> list[str]:
    return re.findall(r'class="run-link"[^>]*>([^<]+)<', page)


def test_the_runs_page_sorts_naturally_searches_and_pages(client, monkeypatch):
    for name in ["seed10", "seed2", "seed1", "other"]:
        post(client, name, [1.0] * 20)
    assert run_names(client.get("/").text) == ["other", "seed1", "seed2", "seed10"]
    assert run_names(client.get("/", params={"q": "SEED1"}).text) == ["seed1", "seed10"]
    assert run_names(client.get("/", params={"q": r"seed\d$", "regex": "true"}).text) == ["seed1", "seed2"]
    bad = client.get("/", params={"q": "(", "regex": "true"}, headers={"Accept": "text/html"})
    assert bad.status_code == 422 and "the search &#39;(&#39; is not a regular expression" in bad.text
    monkeypatch.setattr(views, "PAGE_SIZE", 3)
    first, second = client.get("/").text, client.get("/", params={"page": 2}).text
    assert run_names(first) == ["other", "seed1", "seed2"] and run_names(second) == ["seed10"]
    assert "page 1 of 2" in first and 'rel="next" href="?q=&amp;regex=&amp;page=2"' in first and "page 2 of 2" in second


def test_the_runs_page_shows_health_and_had_incidents(client):
    post(client, "calm", [1.0 + 0.01 * (i % 3) for i in range(400)])
    spiky = [1.0 + 0.01 * (i % 3) for i in range(400)]
    spiky[200:320] = [1.0 + 1.5 * 0.97 ** k for k in range(120)]  # a slow-recovering spike: resolved, but it happened
    post(client, "spiky", spiky)
    page = client.get("/").text
    rows = dict(re.findall(r'class="run-link"[^>]*>([^<]+)</a></td>\s*<td class="spark"[^>]*></td>\s*<td>(.*?)</td>', page, re.S))
    assert 'class="health' in rows["calm"] and "had incidents" not in rows["calm"]
    assert "had incidents" in rows["spiky"], rows["spiky"]


def test_a_hugging_face_run_folds_its_summaries_and_draws_eval_loss_with_the_loss(client):
    body = (REPO / "sample_runs" / "hf_trainer" / "trainer_state.json").read_bytes()
    assert client.post("/v1/runs/hf/points", content=body, headers={"Content-Type": "application/json"}).status_code == 200
    page = client.get("/run", params={"name": "hf"}).text
    charts = re.findall(r'data-tag="([^"]+)"', page)
    assert "train_samples_per_second" not in charts and "train_loss" not in charts
    assert re.search(r"<td>train_samples_per_second</td><td>[\d.]+</td><td>3000</td>", page)
    assert "data-tag=\"loss\" data-role=\"loss\" data-extra='[\"eval_loss\"]'" in page
    assert json.loads(re.search(r"data-runs='([^']+)'", page).group(1)) == [{"name": "hf", "source": "http"}]


def test_compare_takes_2_to_12_runs(client):
    for name in ["a", "b"]:
        post(client, name, [1.0] * 20)
    assert client.get("/compare", params={"runs": "a,b"}).status_code == 200
    assert client.get("/compare", params=[("run", "a"), ("run", "b")]).status_code == 200  # as the runs page's form sends
    one = client.get("/compare", params={"runs": "a"}, headers={"Accept": "text/html"})
    assert one.status_code == 422 and "compare takes 2 to 12 runs (?runs=a,b), not 1" in one.text
    assert client.get("/compare", params={"runs": "a,nope"}).json() == {"error": {"code": "not_found", "message": "no run 'nope'"}}


@pytest.mark.parametrize("target, safe", [
    ("/run?name=a%20b&from=5", "/run?name=a%20b&from=5"),
    ("/", "/"),
    ("//evil.example/", None),
    ("/\\evil.example", None),
    ("https://evil.example/", None),
    ("javascript:alert(1)", None),
    ("/login?next=/", None),  # never back to the login form
    ("", None),
])
def test_sign_in_returns_only_to_paths_on_this_service(target, safe):
    from app.service.ui import safe_next

    assert safe_next(target) == safe

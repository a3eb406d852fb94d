"""What the web UI's pages show, decided here rather than in templates or routes: charts
grouped by tag prefix with one-point summaries folded into a table, the window an alert page
opens on, evidence written for people, runs filtered, naturally sorted and paged."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from re import _constants, _parser  # the stdlib parser: to refuse patterns that backtrack without end
from typing import Any

from analyzers.roles import Role, infer_role
from app.service.errors import ApiError

ORDER = [Role.LOSS, Role.EVAL_LOSS, Role.GRAD_NORM, Role.LEARNING_RATE, Role.LOSS_SCALE, Role.OTHER]
MAX_COMPARED = 12  # runs overlaid on one chart: more is a tangle, and a request each per chart
PAGE_SIZE = 100  # runs per page: 10k runs are 100 pages, not a 300,000-pixel table
COMPANION = {"restart": Role.LEARNING_RATE, "loss_scale_collapse": Role.LOSS_SCALE}  # the tag that is the alert's point
MIN_PAD = 20  # steps of context each side of a one-step incident


@dataclass
class TagGroup:
    prefix: str  # "train/", "eval/" ... or "" for tags without one
    charts: list[dict] = field(default_factory=list)


def tag_groups(tags: list[tuple[str, int, int, int]], run_name: str) -> tuple[list[TagGroup], list[str]]:
    """Charts of a run's tags grouped by prefix (as TensorBoard does), loss first, and the
    tags with a single point (a Trainer's `train_runtime`-like summaries) set aside for a
    table: a one-point chart shows nothing.  The loss chart also draws the eval losses."""
    charts, summaries = [], []
    for tag, points, *_ in tags:
        if points == 1:
            summaries.append(tag)
            continue
        charts.append({"tag": tag, "role": infer_role(tag, run_name).value})
    charts.sort(key=lambda c: (ORDER.index(Role(c["role"])), c["tag"]))
    evals = [c["tag"] for c in charts if c["role"] == Role.EVAL_LOSS.value]
    for c in charts:
        c["extra"] = evals if c["role"] == Role.LOSS.value else []
    groups: dict[str, TagGroup] = {}
    for c in charts:
        prefix = c["tag"].split("/", 1)[0] + "/" if "/" in c["tag"] else ""
        groups.setdefault(prefix, TagGroup(prefix)).charts.append(c)
    return list(groups.values()), summaries


def alert_window(finding: dict, ongoing: bool, first: int, last: int) -> tuple[int, int]:
    """The steps an alert page opens on: the incident (from its start to its end or peak;
    to the run's last step while it goes on), with half its length again each side (at least
    `MIN_PAD` steps or 2% of the run), never past the run's first or last step."""
    steps = [s for s in (finding.get("start_step"), finding.get("end_step"), finding.get("peak_step")) if s is not None]
    lo, hi = min(steps, default=first), max(steps, default=last)
    if ongoing and finding.get("end_step") is None:
        hi = last
    pad = max(MIN_PAD, (hi - lo) // 2, (last - first) // 50)
    lo, hi = max(first, lo - pad), min(last, hi + pad)
    return (lo, hi) if lo < hi else (first, max(last, first + 1))


def alert_charts(kind: str, alert_tag: str, tags: list[str], run_name: str) -> list[str]:
    """The tags an alert page charts: the loss, the alert's own tag, and the tag that is its
    point (the learning rate for a restart, the loss scale for a collapse)."""
    roles = {t: infer_role(t, run_name) for t in tags}
    loss = next((t for t in tags if roles[t] is Role.LOSS), None)
    wanted = [loss, alert_tag if alert_tag in tags else None]
    if kind in COMPANION:
        wanted.append(next((t for t in tags if roles[t] is COMPANION[kind]), None))
    out: list[str] = []
    for t in wanted:
        if t is not None and t not in out:
            out.append(t)
    return out or tags[:1]


def human(value: Any) -> str:
    """A finding's value as a person reads it: yes/no, numbers to 4 significant figures,
    lists comma-separated (never a Python repr)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 100_000 else str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(human(v) for v in value) or "none"
    if isinstance(value, dict):
        return "; ".join(f"{k}: {human(v)}" for k, v in value.items()) or "none"
    if value is None:
        return "none"
    return str(value)


def natural_key(name: str) -> list:
    """Sort key putting "seed2" before "seed10"."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part.lower()) for part in re.split(r"(\d+)", name) if part]


def matcher(query: str, regex: bool):
    """A test for run names: a case-insensitive substring, or a regular expression (a bad
    one is a 422 saying where it breaks; one that could backtrack for minutes over a name is
    refused, saying why: the server must not hang on a search)."""
    if not regex:
        needle = query.lower()
        return lambda name: needle in name.lower()
    try:
        pattern = re.compile(query, re.IGNORECASE)
        risk = _backtracking_risk(_parser.parse(query), in_repeat=False, unbounded=[0])
    except re.error as e:
        raise ApiError(422, "invalid_request", f"the search {query!r} is not a regular expression: {e.msg} at position {e.pos}") from e
    if risk is not None:
        raise ApiError(422, "invalid_request", f"the search {query!r} has {risk}, which can backtrack for minutes: simplify it")
    return lambda name: pattern.search(name) is not None


_REPEATS = {_constants.MAX_REPEAT, _constants.MIN_REPEAT, _constants.POSSESSIVE_REPEAT}
MAX_UNBOUNDED = 3  # unbounded repetitions in a search (a*b*c*d*e on a long name is polynomial, but slow)


def _backtracking_risk(items, in_repeat: bool, unbounded: list[int]) -> str | None:
    """What in a parsed pattern can make the backtracking `re` engine take exponential time:
    a repetition or alternatives inside a repetition, a back-reference, too many unbounded
    repetitions; None when there is none."""
    for op, arg in items:
        if op in _REPEATS:
            low, high, sub = arg
            if in_repeat:
                return "a repetition inside a repetition"
            if high == _constants.MAXREPEAT:
                unbounded[0] += 1
                if unbounded[0] > MAX_UNBOUNDED:
                    return f"more than {MAX_UNBOUNDED} unbounded repetitions"
            found = _backtracking_risk(sub, True, unbounded)
        elif op is _constants.BRANCH:
            if in_repeat:
                return "alternatives inside a repetition"
            found = next((r for b in arg[1] if (r := _backtracking_risk(b, in_repeat, unbounded))), None)
        elif op is _constants.SUBPATTERN:
            found = _backtracking_risk(arg[3], in_repeat, unbounded)
        elif op in (_constants.ASSERT, _constants.ASSERT_NOT):
            found = _backtracking_risk(arg[1], in_repeat, unbounded)
        elif op in (_constants.GROUPREF, _constants.GROUPREF_EXISTS):
            found = "a back-reference"
        else:
            found = None
        if found is not None:
            return found
    return None


def page_of(rows: list, page: int) -> tuple[list, int]:
    """Rows of 1-based page `page` (clamped to the pages there are) and the page count."""
    pages = max(1, -(-len(rows) // PAGE_SIZE))
    page = min(max(page, 1), pages)
    return rows[(page - 1) * PAGE_SIZE: page * PAGE_SIZE], pages

"""Alert changes coming back from the service, and the guard that acts on them.

The service answers each post with the alert changes it caused (`firing`, `updated`,
`resolved`).  When it analyses a busy run in the background instead, the watcher reads the
run's alerts and works out the changes itself (`changes_from_listing`), so a callback or the
guard sees every change either way, once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple

SEVERITIES = ("info", "warning", "critical")
GUARD_POLICIES = ("warn", "stop", "raise")
# What stops a run by default: losses gone NaN/Inf, a spike that did not come back, a
# sustained rise.  Never a spike that is still pending or came back (fast or slow).
DEFAULT_GUARD_ON = ("nonfinite", "loss_spike/divergent", "divergence")


@dataclass(frozen=True)
class AlertChange:
    """One change of one alert, as the service reported it."""

    change: str  # firing, updated or resolved
    state: str  # the alert's state after it
    step: Optional[int]  # the training step of the change
    alert: Dict[str, Any]  # id, run, tag, kind, classification, severity, start_step, message, ...
    reason: Optional[str] = None

    @property
    def id(self) -> str:
        return str(self.alert.get("id"))

    @property
    def kind(self) -> str:
        return str(self.alert.get("kind"))

    @property
    def classification(self) -> Optional[str]:
        return self.alert.get("classification")

    @property
    def severity(self) -> str:
        return str(self.alert.get("severity"))

    @property
    def message(self) -> str:
        return str(self.alert.get("message", ""))

    def describe(self) -> str:
        name = self.kind + (f"/{self.classification}" if self.classification else "")
        return f"{self.change.upper()} {self.severity} {name} (alert {self.id}, step {self.step}): {self.message}"


def changes_from_response(body: Any) -> List[AlertChange]:
    """The `alerts` list of an ingest answer."""
    items = body.get("alerts") if isinstance(body, dict) else None
    return [
        AlertChange(str(c.get("change")), str(c.get("state")), c.get("step"), dict(c.get("alert") or {}), c.get("reason"))
        for c in items or () if isinstance(c, dict)
    ]


AlertKey = Tuple[str, Optional[str], Optional[str]]  # state, severity, classification: what a change moves


def key_of(change: AlertChange) -> AlertKey:
    return change.state, change.severity, change.classification


def changes_from_listing(listing: Any, known: Dict[str, AlertKey], since: float) -> List[AlertChange]:
    """The changes that turn `known` (alert id -> key) into a run's alert list
    (`GET /v1/runs/{run}/alerts`): new alerts fire, alerts seen before resolve or update.
    An alert never seen that is already resolved is reported only if it changed at or after
    `since` (the watcher's start): a resumed job is not told its old run's history."""
    changes = []
    for view in listing if isinstance(listing, list) else ():
        if not isinstance(view, dict) or view.get("state") == "pending":
            continue
        finding = dict(view.get("finding") or {})
        finding.setdefault("id", view.get("id"))
        state = str(view.get("state"))
        key = (state, view.get("severity"), view.get("classification"))
        before = known.get(str(view.get("id")))
        if before == key or (before is None and state == "resolved" and (view.get("since_time") or 0) < since):
            continue
        if before is None:
            change = "firing" if state == "firing" else "resolved"
        elif before[0] != state:
            change = "resolved" if state == "resolved" else "firing"
        else:
            change = "updated"
        changes.append(AlertChange(change, state, view.get("since_step"), finding))
    return changes


class LossAlert(Exception):
    """Raised into the training loop by `guard="raise"`: losswatch saw the run go wrong."""

    def __init__(self, decision: GuardDecision) -> None:
        super().__init__(decision.describe())
        self.decision = decision


@dataclass(frozen=True)
class GuardDecision:
    """Why the guard acted, for the run's logs: which alert, at which step."""

    policy: str
    alert: AlertChange
    logged_step: Optional[int]  # the last step the training loop had logged when it acted

    @property
    def alert_id(self) -> str:
        return self.alert.id

    @property
    def step(self) -> Optional[int]:
        return self.alert.step

    def describe(self) -> str:
        verb = {"stop": "stopping training", "raise": "raising LossAlert", "warn": "would stop training"}[self.policy]
        where = f"; last logged step {self.logged_step}" if self.logged_step is not None else ""
        return f"{verb}: {self.alert.describe()}{where}"


@dataclass
class Guard:
    """Which alert changes act on training, and how."""

    policy: str = "warn"
    on: Tuple[str, ...] = DEFAULT_GUARD_ON
    min_severity: str = "critical"
    decision: Optional[GuardDecision] = field(default=None)

    def __post_init__(self) -> None:
        if self.policy not in GUARD_POLICIES:
            raise ValueError(f"guard must be one of {', '.join(GUARD_POLICIES)}, got {self.policy!r}")
        if self.min_severity not in SEVERITIES:
            raise ValueError(f"guard_severity must be one of {', '.join(SEVERITIES)}, got {self.min_severity!r}")
        self.on = tuple(self.on)

    def matches(self, change: AlertChange) -> bool:
        """A change that fires or worsens an alert of a listed kind (`kind` or
        `kind/classification`) at `min_severity` or above."""
        if change.change not in ("firing", "updated") or change.state != "firing":
            return False
        if change.severity not in SEVERITIES or SEVERITIES.index(change.severity) < SEVERITIES.index(self.min_severity):
            return False
        names = {change.kind, f"{change.kind}/{change.classification}"}
        return any(rule in names for rule in self.on)

    def consider(self, changes: Iterable[AlertChange], logged_step: Optional[int]) -> Optional[GuardDecision]:
        """The first decision, once: later alerts do not replace the reason a run stopped."""
        if self.decision is not None:
            return None
        for change in changes:
            if self.matches(change):
                self.decision = GuardDecision(self.policy, change, logged_step)
                return self.decision
        return None

"""Silences, in the manner of Alertmanager: matchers on an alert's run, kind, tag, severity
and id (globs), who made it and why, and when it ends.  A change to an alert a silence
matches while it is active is stored as any other, and delivered nowhere.

Pure: checking and matching only; the store keeps them (`app.store.silences`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase

from analyzers.findings import Kind
from app.alerts.lifecycle import AlertRecord

MATCHERS = ("run", "kind", "tag", "severity", "alert_id")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
MAX_FIELD = 1000  # characters in a matcher, a name or a comment


class SilenceError(ValueError):
    """A silence that cannot be made, saying why."""


@dataclass(frozen=True)
class Silence:
    id: int | None
    matchers: dict[str, str]  # some of MATCHERS -> a glob
    created_by: str
    comment: str
    created_at: float
    ends_at: float

    def active(self, now: float) -> bool:
        return self.ends_at > now

    def matches(self, alert: AlertRecord) -> bool:
        values = {"run": alert.run, "kind": alert.kind, "tag": alert.tag, "severity": alert.severity, "alert_id": alert.id}
        return all(fnmatchcase(values[name], pattern) for name, pattern in self.matchers.items())


def parse_duration(text: str) -> float:
    """Seconds in `2h`, `90m`, `1h30m`, `1d` (units s, m, h, d, w)."""
    cleaned = text.strip()
    if not cleaned or _DURATION.sub("", cleaned):
        raise SilenceError(f"duration {text!r} is not like 2h, 90m or 1d12h (units s, m, h, d, w)")
    seconds = sum(float(n) * _UNITS[unit] for n, unit in _DURATION.findall(cleaned))
    if seconds <= 0:
        raise SilenceError(f"duration {text!r} must be longer than 0")
    return seconds


def new_silence(
    matchers: Mapping[str, str | None],
    created_by: str,
    comment: str,
    now: float,
    ends_at: float | None = None,
    duration: str | None = None,
) -> Silence:
    """A checked silence: at least one matcher (a silence of everything is a mistake more
    often than not), a kind glob that matches some kind, an end in the future given one
    way (an `ends_at` Unix time or a `duration` from now)."""
    given = {name: value for name, value in matchers.items() if value is not None}
    unknown = sorted(set(given) - set(MATCHERS))
    if unknown:
        raise SilenceError(f"unknown matcher {unknown[0]!r} (known: {', '.join(MATCHERS)})")
    if not given:
        raise SilenceError(f"a silence needs at least one matcher: {', '.join(MATCHERS)}")
    for name, value in given.items():
        if not value or len(value) > MAX_FIELD or "\x00" in value:
            raise SilenceError(f"matcher {name} must be 1 to {MAX_FIELD} characters, without NUL")
    if "kind" in given and not any(fnmatchcase(k.value, given["kind"]) for k in Kind):
        raise SilenceError(f"kind {given['kind']!r} matches no alert kind")
    if "severity" in given and not any(fnmatchcase(s, given["severity"]) for s in ("info", "warning", "critical")):
        raise SilenceError(f"severity {given['severity']!r} matches no severity (info, warning, critical)")
    if not created_by.strip() or len(created_by) > MAX_FIELD or "\x00" in created_by:
        raise SilenceError(f"created_by must name who made the silence (1 to {MAX_FIELD} characters)")
    if len(comment) > MAX_FIELD or "\x00" in comment:
        raise SilenceError(f"comment must be at most {MAX_FIELD} characters, without NUL")
    if (ends_at is None) == (duration is None):
        raise SilenceError("give the silence's end as ends_at (a Unix time) or as a duration (e.g. 2h), not both")
    end = now + parse_duration(duration) if duration is not None else float(ends_at)
    if end <= now:
        raise SilenceError("ends_at is not in the future")
    return Silence(None, dict(sorted(given.items(), key=lambda kv: MATCHERS.index(kv[0]))), created_by, comment, now, end)

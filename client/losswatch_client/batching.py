"""Cutting points into requests.  The service keeps the last of several values posted for one
(tag, step) in one request, so a resume (a step logged again, as after restarting from a
checkpoint) must start a request of its own: then the service sees it as the rewrite it is
and records the rollback, as it would have live."""

from __future__ import annotations

import json
from typing import Dict, Iterable, List, Tuple


class ResumeCuts:
    """Where a new request must start in a stream of (tag, step)s."""

    def __init__(self) -> None:
        self._highest: Dict[str, int] = {}

    def rewinds(self, tag: str, step: int) -> bool:
        """True (and start afresh) when `tag` was already seen at `step` or later."""
        highest = self._highest.get(tag)
        if highest is not None and step <= highest:
            self._highest = {tag: step}
            return True
        self._highest[tag] = step
        return False


def batch_ranges(count: int, cuts: Iterable[int], size: int) -> List[Tuple[int, int]]:
    """[start, end) ranges of at most `size` items that never span a cut."""
    ranges, start = [], 0
    for cut in [*cuts, count]:
        while start < cut:
            end = min(cut, start + size)
            ranges.append((start, end))
            start = end
    return ranges


def lines_before_resume(lines: List[bytes]) -> int:
    """How many of these NDJSON records (the spool's) can go in one request."""
    cuts = ResumeCuts()
    for i, line in enumerate(lines):
        record = json.loads(line)
        if cuts.rewinds(record["tag"], record["step"]) and i:
            return i
    return len(lines)

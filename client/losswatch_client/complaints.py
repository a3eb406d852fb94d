"""Saying what went wrong without flooding a training log: each kind of problem is logged
the first time, then at most once a minute with how many times it happened meanwhile."""

from __future__ import annotations

import logging
import threading
import time
from typing import Dict, Tuple

log = logging.getLogger("losswatch_client")


class Complaints:
    def __init__(self, every: float = 60.0) -> None:
        self.every = every
        self._seen: Dict[str, Tuple[float, int]] = {}  # key -> (last logged at, repeats since)
        self._lock = threading.Lock()

    def say(self, key: str, message: str, level: int = logging.WARNING) -> None:
        now = time.monotonic()
        with self._lock:
            last, repeats = self._seen.get(key, (None, 0))
            if last is not None and now - last < self.every:
                self._seen[key] = (last, repeats + 1)
                return
            self._seen[key] = (now, 0)
        suffix = f" ({repeats} more times since)" if repeats else ""
        log.log(level, "losswatch: %s%s", message, suffix)

    def forget(self, key: str) -> None:
        """The problem is over: the next one is logged at once."""
        with self._lock:
            self._seen.pop(key, None)

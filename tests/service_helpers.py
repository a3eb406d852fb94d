"""Building a service for a test: each test its own app and store."""

from __future__ import annotations

import contextlib
import time

from fastapi.testclient import TestClient

from app.service.app import create_app
from app.service.settings import Settings


@contextlib.contextmanager
def service(url: str, **settings):
    """A running app (lifespan entered) and a client for it; no background loop unless asked."""
    settings.setdefault("background", False)
    app = create_app(Settings(db_url=url, **settings))
    with TestClient(app) as client:
        yield client


def wait_for(check, timeout: float = 10.0):
    """Poll `check` until it returns something truthy (the background loop works in rounds)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError("condition not met in time")

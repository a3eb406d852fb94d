"""Re-takes the README's screenshots of the web UI from a running service that has read
sample_runs (`losswatch serve --allow-root sample_runs`, then POST /v1/logdirs), in headless
Chromium; palette-quantised so docs/ stays small.

    python docs/screenshots.py http://127.0.0.1:8000
"""

from __future__ import annotations

import io
import shutil
import sys
from pathlib import Path

import httpx
from PIL import Image
from playwright.sync_api import sync_playwright

HERE = Path(__file__).parent


def alert_id(base: str, run: str, kind: str) -> str:
    return next(a["id"] for a in httpx.get(f"{base}/v1/alerts").json() if a["run"] == run and a["kind"] == kind)


def shoot(page, url: str, out: Path, height: int) -> None:
    page.goto(url)
    page.wait_for_selector("#charts[data-ready=true]", timeout=20_000)
    png = page.screenshot(clip={"x": 0, "y": 0, "width": 1100, "height": height})
    Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=48).save(out, optimize=True)


def main(base: str) -> None:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1100, "height": 1000})
        shoot(page, f"{base}/run?name=lr_burst", HERE / "run-page.png", 1000)
        shoot(page, f"{base}/compare?runs=clean,bad_batch,lr_burst&smooth=0.6", HERE / "compare.png", 760)
        shoot(page, f"{base}/alert/{alert_id(base, 'resume', 'restart')}", HERE / "alert-page.png", 620)
        browser.close()


if __name__ == "__main__":
    main(sys.argv[1])

"""The latency gate's pictures in the real Prefect UI: a flow measures two real model
servers and publishes its CDFs as the handoff does (a markdown artifact with the PNGs
embedded as data: URLs); headless Chromium opens the artifact and each picture is shown
at its full size, not a broken image. A screenshot is kept in artifacts/."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx

from tests.gates.conftest import HALF_TIME, StartServer
from tests.ui.browser import ARTIFACTS, TIMEOUT_MS, chromium
from tests.webhook.servers import PrefectServer

REPO = Path(__file__).resolve().parents[2]


def _artifact_id(api_url: str, key: str) -> str:
    found = httpx.post(
        f"{api_url}/artifacts/filter",
        json={"artifacts": {"key": {"any_": [key]}}, "limit": 1},
        timeout=30,
    )
    found.raise_for_status()
    [artifact] = found.json()
    assert artifact["type"] == "markdown" and "data:image/png;base64," in artifact["data"]
    return str(artifact["id"])


def test_latency_pictures_render_in_the_prefect_ui(
    prefect: PrefectServer, model_server: StartServer, tmp_path: Path
) -> None:
    live = model_server("gptq-30b-a3b-tp1", *HALF_TIME)
    candidate = model_server("gptq-30b-a3b-tp1", *HALF_TIME)
    service = f"chat-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "PREFECT_API_URL": prefect.api_url}
    published = subprocess.run(
        [sys.executable, "-m", "tests.ui.pictures_flow", service, service, candidate.url, live.url],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert published.returncode == 0, published.stdout[-2000:] + published.stderr[-2000:]
    artifact = _artifact_id(prefect.api_url, f"latency-{service}")

    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(f"{prefect.ui_url}/artifacts/artifact/{artifact}")
        picture = page.locator('img[alt="latency CDFs at 2 streams"]')
        picture.wait_for(state="visible")
        page.wait_for_function(
            "img => img.complete && img.naturalWidth > 0", arg=picture.element_handle()
        )
        width, height = picture.evaluate("img => [img.naturalWidth, img.naturalHeight]")
        shown = picture.bounding_box()
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "latency-pictures.png"
        page.screenshot(path=str(shot), full_page=True)
        page.close()
    assert (width, height) == (880, 272)  # the PNG as drawn: 11 x 3.4 in at 80 dpi
    assert shown is not None and shown["width"] > 300 and shown["height"] > 80
    assert shot.stat().st_size > 10_000

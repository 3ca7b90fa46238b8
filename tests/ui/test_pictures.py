"""The gates' and the handoff's pictures in the real Prefect UI: a flow measures real model
servers and publishes the latency CDFs, the parity picture and its timeline as the handoff
does (markdown artifacts with the PNGs embedded as data: URLs); headless Chromium opens each
artifact and each picture is shown at its full size, not a broken image. Screenshots are
kept in artifacts/."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx

from gates.parity.golden_format import Golden
from tests.gates.conftest import FAST, HALF_TIME, StartServer
from tests.ui.browser import ARTIFACTS, chromium, signed_in_page
from tests.webhook.servers import PrefectServer

REPO = Path(__file__).resolve().parents[2]


def _artifact_id(prefect: PrefectServer, key: str) -> str:
    found = httpx.post(
        f"{prefect.api_url}/artifacts/filter",
        json={"artifacts": {"key": {"any_": [key]}}, "limit": 1},
        headers=prefect.headers,
        timeout=30,
    )
    found.raise_for_status()
    [artifact] = found.json()
    assert artifact["type"] == "markdown" and "data:image/png;base64," in artifact["data"]
    return str(artifact["id"])


# (artifact key prefix, the picture's alt text, its natural size as drawn at 80 dpi or None
# where it grows with the data, the screenshot)
PICTURES = [
    ("latency", "latency CDFs at 2 streams", (880, 272), "latency-pictures.png"),
    ("parity", "parity per prompt", None, "parity-picture.png"),
    ("timeline", "handoff timeline", None, "timeline-picture.png"),
]


VIEWPORT = {"width": 1400, "height": 1000}


def test_gate_and_timeline_pictures_render_in_the_prefect_ui(
    prefect: PrefectServer, model_server: StartServer, clef_golden: Golden, tmp_path: Path
) -> None:
    live = model_server("gptq-30b-a3b-tp1", *HALF_TIME)
    candidate = model_server("gptq-30b-a3b-tp1", *HALF_TIME)
    diverging = model_server("clef-flash-candle", *FAST, "--fault", "zero_key_band")
    golden_file = tmp_path / "golden.json"
    clef_golden.save(golden_file)
    service = f"chat-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "PREFECT_API_URL": prefect.api_url}
    flow = [sys.executable, "-m", "tests.ui.pictures_flow", service, service]
    published = subprocess.run(
        [*flow, candidate.url, live.url, diverging.url, str(golden_file)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert published.returncode == 0, published.stdout[-2000:] + published.stderr[-2000:]
    artifacts = {key: _artifact_id(prefect, f"{key}-{service}") for key, *_ in PICTURES}

    with chromium() as browser:
        for key, alt, size, screenshot in PICTURES:
            page = signed_in_page(browser, prefect.auth_string, VIEWPORT)
            page.goto(f"{prefect.ui_url}/artifacts/artifact/{artifacts[key]}")
            picture = page.locator(f'img[alt="{alt}"]')
            picture.wait_for(state="visible")
            page.wait_for_function(
                "img => img.complete && img.naturalWidth > 0", arg=picture.element_handle()
            )
            width, height = picture.evaluate("img => [img.naturalWidth, img.naturalHeight]")
            shown = picture.bounding_box()
            ARTIFACTS.mkdir(exist_ok=True)
            shot = ARTIFACTS / screenshot
            page.screenshot(path=str(shot), full_page=True)
            page.close()
            assert width == 880 and height > 150, (key, width, height)  # 11 in at 80 dpi
            assert size is None or (width, height) == size, (key, width, height)
            assert shown is not None and shown["width"] > 300 and shown["height"] > 80, key
            assert shot.stat().st_size > 10_000, key

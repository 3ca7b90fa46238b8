"""The documentation site builds with `mkdocs build --strict`: a broken link or anchor, a
page missing from the nav, or a hook's warning (the CLI reference and the troubleshooting
page are rendered from the code at build time) fails it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr}"
    assert "WARNING" not in result.stderr, result.stderr
    for page in ("cli", "troubleshooting"):
        assert (tmp_path / page / "index.html").is_file(), f"{page} page not built"
    cli = (tmp_path / "cli" / "index.html").read_text()
    assert "handoff work-pool render" in cli, "the CLI reference lacks a nested command"
    errors = (tmp_path / "troubleshooting" / "index.html").read_text()
    assert 'id="restorenotready"' in errors, "the troubleshooting page lacks an error class"


def test_the_docs_pictures_are_the_screenshots_at_three_quarters(tmp_path: Path) -> None:
    """docs/ui-*.png are made from the browser test's screenshots (its 1400-pixel-wide
    viewport) by tests/ui/docs_pictures.py, not copied by hand at another size."""
    from PIL import Image

    from tests.ui.docs_pictures import SCALE, docs_picture
    from tests.ui.test_pictures import PICTURES, VIEWPORT

    shot = tmp_path / "shot.png"
    Image.new("RGB", (VIEWPORT["width"], VIEWPORT["height"] + 40), "white").save(shot)
    written = docs_picture(shot, tmp_path / "docs.png")
    with Image.open(tmp_path / "docs.png") as made:
        assert made.size == written == (1050, 780), made.size
    for key, _, _, _ in PICTURES:
        with Image.open(ROOT / "docs" / f"ui-{key}.png") as picture:
            assert picture.width == round(VIEWPORT["width"] * SCALE), (key, picture.size)


def test_each_picture_the_browser_test_shoots_is_shown_in_the_docs() -> None:
    """One screenshot per picture, as tests/ui/test_pictures.py takes it (its PICTURES),
    shown on the daily-use page."""
    from tests.ui.test_pictures import PICTURES

    page = (ROOT / "docs" / "daily-use.md").read_text()
    for key, _, _, _ in PICTURES:
        shot = ROOT / "docs" / f"ui-{key}.png"
        assert shot.read_bytes().startswith(b"\x89PNG"), shot
        assert f"]({shot.name})" in page, f"docs/daily-use.md does not show {shot.name}"

"""The daily-use page's pictures of the Prefect UI, made from the browser test's
screenshots rather than copied by hand:

    uv run --frozen pytest -n 0 tests/ui/test_pictures.py
    uv run --frozen python -m tests.ui.docs_pictures

The test writes its screenshots to artifacts/ (tests/ui/test_pictures.py's PICTURES);
this writes each, at three quarters of its size (the page's width in the docs), as
docs/ui-<key>.png, and says which it wrote."""

from __future__ import annotations

import sys
from pathlib import Path

from PIL import Image

from tests.ui.browser import ARTIFACTS
from tests.ui.test_pictures import PICTURES

DOCS = Path(__file__).resolve().parents[2] / "docs"
SCALE = 0.75


def docs_picture(shot: Path, out: Path) -> tuple[int, int]:
    """Write `shot` scaled by SCALE to `out`; return the size written."""
    with Image.open(shot) as image:
        size = (round(image.width * SCALE), round(image.height * SCALE))
        image.resize(size, Image.Resampling.LANCZOS).save(out, optimize=True)
    return size


def main() -> int:
    missing = [s for _, _, _, s in PICTURES if not (ARTIFACTS / s).is_file()]
    if missing:
        print(
            f"no screenshot {', '.join(missing)} in {ARTIFACTS}: run the browser test first "
            "(uv run --frozen pytest -n 0 tests/ui/test_pictures.py)",
            file=sys.stderr,
        )
        return 2
    for key, _, _, screenshot in PICTURES:
        out = DOCS / f"ui-{key}.png"
        width, height = docs_picture(ARTIFACTS / screenshot, out)
        print(f"{out.relative_to(DOCS.parent)}: {width}x{height} from {screenshot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One way from a matplotlib figure to what people look at: PNG bytes, a file, or markdown
with the PNG embedded as a data: URL (Prefect's UI renders those inline in a markdown
artifact; it can reach no file of ours). Headless: figures are built without pyplot."""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def new_figure(width_in: float, height_in: float) -> Figure:
    """A figure drawn by the Agg backend at 80 dpi (no display, no pyplot state)."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width_in, height_in), dpi=80, layout="constrained")


def png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def markdown_image(alt: str, picture: bytes) -> str:
    """The PNG as a markdown image with a data: URL."""
    return f"![{alt}](data:image/png;base64,{base64.b64encode(picture).decode()})"


def write_png(path: Path, picture: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(picture)
    return path

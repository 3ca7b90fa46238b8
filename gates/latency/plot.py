"""Pictures of the latency gate: TTFT, TPOT and ITL as CDFs, baseline against candidate, one
PNG per concurrency level, with the margins and SLOs the verdict used drawn on them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from gates.common.picture import markdown_image, new_figure, png, write_png
from gates.latency.cell import CellFigures
from gates.latency.report import LatencyFigures, LevelFigures, streams, verdict_word

if TYPE_CHECKING:
    from matplotlib.axes import Axes

# (metric in cdf_ms, title, the comparison that gates it, the quantile it compares)
_PANELS = [
    ("ttft", "TTFT (ms)", "ttft", 0.5),
    ("tpot", "TPOT (ms)", "tpot", 0.5),
    ("itl", "ITL (ms)", "itl_p99", 0.99),
]
# Baseline wide and pale under a thin candidate: identical servers still show both curves.
_STYLES: dict[str, dict[str, Any]] = {
    "baseline": {"color": "tab:blue", "linewidth": 4.0, "alpha": 0.5},
    "candidate": {"color": "tab:orange", "linewidth": 1.5},
}
_SLO_REACH = 3.0  # an SLO further than this times the largest sample squashes the curves


def level_png(level: LevelFigures) -> bytes:
    """One row of three CDF panels for one concurrency level, as PNG bytes (Agg: headless)."""
    figure = new_figure(11, 3.4)
    figure.suptitle(f"latency at {streams(level.concurrency)}: {verdict_word(level)}")
    cells = [c for c in (level.baseline, level.candidate) if c is not None]
    for axes, (metric, title, compared, q) in zip(figure.subplots(1, 3), _PANELS, strict=True):
        for cell in cells:
            _cdf(axes, cell, metric)
        _margin(axes, level, compared, metric, q)
        _slo(axes, level, metric, _largest(cells, metric))
        axes.set_xlabel(title)
        axes.set_ylim(0, 1.02)
        axes.grid(alpha=0.3)
        axes.legend(fontsize="small", loc="lower right")
    figure.axes[0].set_ylabel("share of samples ≤ x")
    return png(figure)


def _cdf(axes: Axes, cell: CellFigures, metric: str) -> None:
    values = cell.cdf_ms.get(metric) or []
    if not values:
        return
    shares = [(i + 1) / len(values) for i in range(len(values))]
    axes.step(values, shares, where="post", label=cell.label, **_STYLES.get(cell.label, {}))


def _margin(axes: Axes, level: LevelFigures, compared: str, metric: str, q: float) -> None:
    """The candidate regresses when its quantile q lies past baseline's times the margin."""
    comparison = next((c for c in level.comparisons if c.metric == compared), None)
    values = level.baseline.cdf_ms.get(metric) if level.baseline else None
    if comparison is None or not values:
        return
    at = values[min(len(values) - 1, int(q * (len(values) - 1)))] * comparison.margin
    label = f"margin: baseline p{round(q * 100)} × {comparison.margin}"
    axes.axvline(at, color="tab:red", linestyle="--", linewidth=1, label=label)
    axes.axhline(q, color="grey", linestyle=":", linewidth=0.8)


def _largest(cells: list[CellFigures], metric: str) -> float:
    return max((v for cell in cells for v in cell.cdf_ms.get(metric) or []), default=0.0)


def _slo(axes: Axes, level: LevelFigures, metric: str, largest: float) -> None:
    for check in level.slo_checks:
        if check.metric != metric:
            continue
        label = f"SLO: p95 ≤ {check.limit_ms:g} ms"
        if largest and check.limit_ms > _SLO_REACH * largest:  # named, not drawn
            axes.plot([], [], color="black", label=f"{label} (far right)")
        else:
            axes.axvline(check.limit_ms, color="black", linewidth=1.2, label=label)
        axes.axhline(0.95, color="grey", linestyle=":", linewidth=0.8)


def write_pictures(figures: LatencyFigures, directory: Path) -> list[Path]:
    """latency-cN.png for each level in DIRECTORY; returns the paths written."""
    return [
        write_png(directory / f"latency-c{level.concurrency}.png", level_png(level))
        for level in figures.levels
    ]


def pictures_markdown(figures: LatencyFigures) -> str:
    """The pictures embedded in markdown (gates.common.picture.markdown_image)."""
    return "\n\n".join(
        markdown_image(f"latency CDFs at {streams(level.concurrency)}", level_png(level))
        for level in figures.levels
    )

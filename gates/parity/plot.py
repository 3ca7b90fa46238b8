"""The parity gate's picture: per prompt, how far the candidate's greedy answer stayed the
golden's and where it first diverged, with the KL and the top-k overlap along the tokens
both sides saw the same context for; and, when compared, the same two along the
teacher-forced reference text."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gates.common.picture import markdown_image, new_figure, png, write_png
from gates.parity.compare import PromptParity, TeacherForcedFigures
from gates.parity.report import ParityFigures

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

ALT = "parity per prompt"
FILE = "parity.png"
KL_FLOOR = 1e-4  # the KL colour scale starts here: below it two distributions look alike
_ROW_IN = 0.24
_MARKERS: dict[bool, dict[str, Any]] = {  # a divergence as the verdict sees it
    True: {"marker": "o", "color": "tab:orange", "label": "first divergence: near-tie"},
    False: {"marker": "X", "color": "tab:red", "label": "first divergence: fails"},
}


def parity_png(figures: ParityFigures) -> bytes:
    """One row per prompt in three panels; a fourth row for the teacher-forced text."""
    prompts = figures.prompts
    tf = figures.teacher_forced if figures.teacher_forced_compared else None
    rows = max(1, len(prompts))
    height = 1.3 + _ROW_IN * rows + (1.9 if tf else 0.0)
    figure = new_figure(11, height)
    grid = figure.add_gridspec(
        2 if tf else 1, 3, height_ratios=[_ROW_IN * rows, 1.6][: 2 if tf else 1]
    )
    figure.suptitle(
        f"parity of {figures.candidate_model} against golden {figures.golden_model}: "
        f"{figures.n_tokens_identical}/{figures.n_tokens_golden} golden tokens identical"
    )
    identical = figure.add_subplot(grid[0, 0])
    kl = figure.add_subplot(grid[0, 1], sharey=identical)
    overlap = figure.add_subplot(grid[0, 2], sharey=identical)
    _identical(identical, prompts)
    width = max((len(p.kl) for p in prompts), default=0)
    _heat(figure, kl, [p.kl for p in prompts], width, "KL per position (nats, log)", log=True)
    _heat(figure, overlap, [p.top_overlap for p in prompts], width, "top-k overlap per position")
    for axes in (kl, overlap):
        axes.tick_params(labelleft=False)
    if tf is not None:
        _teacher_forced(figure.add_subplot(grid[1, :]), tf)
    return png(figure)


def _identical(axes: Axes, prompts: list[PromptParity]) -> None:
    ys = np.arange(len(prompts))
    axes.barh(ys, [p.n_golden_tokens for p in prompts], color="lightgrey", label="golden tokens")
    axes.barh(ys, [p.n_identical for p in prompts], color="tab:green", label="identical")
    for near_tie, style in _MARKERS.items():
        at = [
            (p.divergence.position, y)
            for y, p in zip(ys, prompts, strict=True)
            if p.divergence and p.divergence.unit == "token" and p.divergence.near_tie == near_tie
        ]
        if at:
            positions, rows = zip(*at, strict=True)
            axes.scatter(positions, rows, s=40, zorder=3, **style)
    for y, p in enumerate(prompts):
        if p.basis == "text":  # no logprobs on a side: only the texts were compared
            said = f"char {p.divergence.position} differs" if p.divergence else "same text"
            axes.text(0, y, f" text: {said}", va="center", fontsize="x-small")
    axes.set_yticks(ys, [f"{p.prompt_id} ({p.api})" for p in prompts], fontsize="x-small")
    axes.invert_yaxis()
    axes.set_xlabel("greedy tokens (position)")
    axes.legend(fontsize="x-small", loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=2)


def _heat(
    figure: Figure,
    axes: Axes,
    series: list[list[float | None]],
    width: int,
    title: str,
    *,
    log: bool = False,
) -> None:
    """Rows of values along the positions; blank past a row's end (the contexts differ)."""
    from matplotlib.colors import LogNorm, Normalize

    grid = np.full((max(1, len(series)), max(1, width)), np.nan)
    for row, values in enumerate(series):
        grid[row, : len(values)] = [np.nan if v is None else v for v in values]
    if log:
        top = float(np.nanmax(grid)) if np.isfinite(grid).any() else 1.0
        # One scale for every run (from KL_FLOOR to 1 nat, or further): colours compare.
        norm: Normalize = LogNorm(vmin=KL_FLOOR, vmax=max(top, 1.0), clip=True)
        cmap = "magma_r"
    else:
        norm, cmap = Normalize(0.0, 1.0), "viridis"
    shown = axes.imshow(grid, aspect="auto", interpolation="nearest", norm=norm, cmap=cmap)
    figure.colorbar(shown, ax=axes, fraction=0.05, pad=0.02)
    axes.set_xlabel("position")
    axes.set_title(title, fontsize="small")


def _teacher_forced(axes: Axes, tf: TeacherForcedFigures) -> None:
    positions = np.arange(len(tf.kl_along))
    kls = np.array([np.nan if v is None else max(v, KL_FLOOR) for v in tf.kl_along])
    axes.plot(
        positions, kls, color="tab:purple", linewidth=1, label=f"KL (nats, log, floor {KL_FLOOR:g})"
    )
    axes.set_yscale("log")
    axes.set_xlabel(f"teacher-forced reference text: position (of {tf.n_positions})")
    axes.set_ylabel("KL")
    twin = axes.twinx()
    overlap = [np.nan if v is None else v for v in tf.top_overlap_along]
    twin.plot(positions, overlap, color="tab:green", linewidth=1, alpha=0.7, label="top-k overlap")
    twin.set_ylim(0, 1.05)
    twin.set_ylabel("top-k overlap")
    axes.set_title(
        f"teacher-forced: mean KL {tf.kl_mean:.3g}, p99 {tf.kl_p99:.3g}, "
        f"top-token agreement {tf.top_token_agreement:.1%}",
        fontsize="small",
    )
    lines = axes.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    axes.legend(
        lines, [str(line.get_label()) for line in lines], fontsize="x-small", loc="upper right"
    )


def write_picture(figures: ParityFigures, directory: Path) -> Path:
    """parity.png in DIRECTORY."""
    return write_png(directory / FILE, parity_png(figures))


def picture_markdown(figures: ParityFigures) -> str:
    return markdown_image(ALT, parity_png(figures))

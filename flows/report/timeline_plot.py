"""The timeline picture: the handoff's steps as bars on one time axis, over the Service's
ready endpoints stacked per workload (the swap is where the colour changes); the caption
under it says what was measured and what was not."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from flows.report.timeline import CANDIDATE, LIVE, ONE_COUNT, TWIN, UNKNOWN, Timeline
from gates.common.picture import markdown_image, new_figure, png, write_png

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

ALT = "handoff timeline"
COLOURS = {"done": "tab:green", "failed": "tab:red"}
ROLLBACK = "tab:orange"
BAKE = "tab:purple"
SERVING = {
    LIVE: "tab:blue",
    TWIN: "tab:cyan",
    CANDIDATE: "tab:green",
    UNKNOWN: "tab:grey",
    ONE_COUNT: "tab:olive",  # an older record's: of no workload in particular
}
OTHER = "tab:brown"  # a workload the sampler names that the picture has no colour for


def timeline_png(timeline: Timeline) -> bytes:
    return png(timeline_figure(timeline))


def timeline_figure(timeline: Timeline) -> Figure:
    """Two axes: the steps above, the ready endpoints per workload below."""
    spans = timeline.spans()
    starts = [s.start for s in spans] + [at for at, _ in timeline.ready_endpoints]
    zero = min(starts, default=0.0)
    figure = new_figure(11, 1.9 + 0.3 * max(1, len(spans)))
    steps, ready = figure.subplots(
        2, 1, sharex=True, height_ratios=[max(1, len(spans)), 2.2], squeeze=True
    )
    figure.suptitle(
        f"handoff {timeline.spec or '-'} of {timeline.namespace or '-'}/"
        f"{timeline.service or '-'}: {timeline.outcome or '-'}"
    )
    for row, span in enumerate(spans):
        colour = ROLLBACK if span.name == "rollback" else COLOURS.get(span.state, "tab:grey")
        steps.barh(row, max(span.seconds, 0.05), left=span.start - zero, color=colour)
        steps.text(
            span.start - zero + span.seconds,
            row,
            f" {span.seconds:.1f} s",
            va="center",
            fontsize="x-small",
        )
    steps.set_yticks(range(len(spans)), [s.name for s in spans], fontsize="small")
    steps.invert_yaxis()
    steps.grid(axis="x", alpha=0.3)
    steps.set_title(
        "steps" + ("" if timeline.measured_steps else " (end to end from durations)"),
        fontsize="small",
    )
    _ready(ready, timeline, zero)
    _bake(steps, ready, timeline, zero)
    _way_back(ready, timeline, zero)
    ready.set_xlabel("seconds since the first step")
    figure.supxlabel(textwrap.fill(timeline.caption(), 160), fontsize="x-small", color="dimgrey")
    return figure


def _ready(axes: Axes, timeline: Timeline, zero: float) -> None:
    axes.set_ylabel("ready\nendpoints", fontsize="small")
    axes.grid(alpha=0.3)
    layers = timeline.stacked()
    if not layers:
        axes.text(0.5, 0.5, "not sampled", ha="center", va="center", transform=axes.transAxes)
        axes.set_yticks([])
        return
    times = [at - zero for at, _ in layers[0][1]]
    below = [0] * len(times)
    for workload, samples in layers:
        above = [b + n for b, (_, n) in zip(below, samples, strict=True)]
        axes.fill_between(
            times,
            below,
            above,
            step="post",
            color=SERVING.get(workload, OTHER),
            linewidth=0,
            label=timeline.label(workload),
        )
        below = above
    axes.step(times, below, where="post", color="black", linewidth=1)  # the total
    axes.set_ylim(0, max(below) + 1)
    axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="x-small")  # off the data
    from matplotlib.ticker import MaxNLocator

    locator = axes.yaxis.get_major_locator()
    if isinstance(locator, MaxNLocator):  # a linear axis's default, the AutoLocator
        locator.set_params(integer=True)


def _bake(steps: Axes, ready: Axes, timeline: Timeline, zero: float) -> None:
    """The bake window shaded over both axes; a breach's return to the old pods marked."""
    bake = timeline.bake
    if bake is None:
        return
    start = bake.started - zero
    for axes in (steps, ready):
        axes.axvspan(start, start + bake.seconds, color=BAKE, alpha=0.12, linewidth=0)
    steps.text(start, -0.6, f" bake: {bake.verdict}", fontsize="x-small", color=BAKE)
    if bake.restored_s is not None:
        back = start + bake.seconds  # the window ends once the Service is back
        for axes in (steps, ready):
            axes.axvline(back, color=ROLLBACK, linestyle="--", linewidth=1)
        ready.text(
            back, 0.2, f" back on the old pods in {bake.restored_s:.1f} s", fontsize="x-small"
        )


def _way_back(ready: Axes, timeline: Timeline, zero: float) -> None:
    """From the retirement's end, a dashed span as long as the slowest recorded cold start
    of a retired workload: what going back would cost from there."""
    retired = timeline.retired_at()
    known = [w.start_s for w in timeline.way_back if w.start_s is not None]
    if retired is None or not timeline.way_back:
        return
    at = retired - zero
    ready.axvline(at, color=ROLLBACK, linestyle=":", linewidth=1)
    if not known:
        ready.text(at, 0.5, " way back: cold start, length unknown", fontsize="x-small")
        return
    cost = max(known)
    top = ready.get_ylim()[1]
    ready.hlines(top * 0.85, at, at + cost, color=ROLLBACK, linestyle="--", linewidth=1.5)
    ready.text(at, top * 0.9, f" way back: cold start ≈ {cost:.0f} s", fontsize="x-small")


def write_timeline(timeline: Timeline, directory: Path) -> Path:
    """timeline-HANDOFF_ID.png in DIRECTORY."""
    return write_png(directory / f"timeline-{timeline.handoff_id}.png", timeline_png(timeline))


def timeline_markdown(timeline: Timeline) -> str:
    return markdown_image(ALT, timeline_png(timeline))

"""The handoff's pictures in the Prefect UI: markdown artifacts with the PNGs embedded as
data: URLs, which the UI renders inline (it can reach no file of ours). One per gate that
draws (`latency-SERVICE`, `parity-SERVICE`) and the handoff's timeline (`timeline-SERVICE`)."""

from __future__ import annotations

from collections.abc import Callable

from prefect.artifacts import create_markdown_artifact

from flows.evidence import GateSummary
from flows.report.timeline import Timeline
from flows.report.timeline_plot import timeline_markdown
from gates.latency.plot import pictures_markdown
from gates.latency.report import LatencyFigures
from gates.parity.plot import picture_markdown
from gates.parity.report import ParityFigures


def _latency(figures: dict[str, object]) -> str | None:
    return (
        pictures_markdown(LatencyFigures.model_validate(figures)) if figures.get("levels") else None
    )


def _parity(figures: dict[str, object]) -> str | None:
    parsed = ParityFigures.model_validate(figures)
    return picture_markdown(parsed) if parsed.prompts or parsed.teacher_forced else None


# What each gate draws from its figures; None when it measured nothing to draw.
DRAWN: dict[str, Callable[[dict[str, object]], str | None]] = {
    "latency": _latency,
    "parity": _parity,
}
DESCRIBED = {
    "latency": "latency CDFs of {service}'s candidate against its baseline",
    "parity": "parity of {service}'s candidate per prompt: first divergence, KL, top-k overlap",
}


def publish_pictures(service: str, summaries: list[GateSummary]) -> list[str]:
    """Each drawing gate's pictures as the artifact `GATE-SERVICE`; returns their keys."""
    keys = []
    for summary in summaries:
        draw = DRAWN.get(summary.name)
        pictures = draw(summary.figures) if draw and summary.figures else None
        if pictures is None:
            continue
        key = f"{summary.name}-{service}"
        create_markdown_artifact(
            f"## {summary.name} gate: {summary.verdict}\n\n{summary.reason}\n\n{pictures}",
            key=key,
            description=DESCRIBED[summary.name].format(service=service),
        )
        keys.append(key)
    return keys


def publish_timeline(timeline: Timeline) -> str:
    """The handoff's timeline as the artifact `timeline-SERVICE`; returns its key."""
    key = f"timeline-{timeline.service}"
    create_markdown_artifact(
        f"## timeline: {timeline.outcome}\n\n{timeline.caption()}\n\n{timeline_markdown(timeline)}",
        key=key,
        description=f"steps, ready endpoints of {timeline.service} along handoff {timeline.spec}",
    )
    return key

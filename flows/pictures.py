"""The gates' pictures in the Prefect UI: a markdown artifact per Service with the latency
CDFs embedded as data: URLs, which the UI renders inline (it can reach no file of ours)."""

from __future__ import annotations

from prefect.artifacts import create_markdown_artifact

from flows.gating import GateSummary
from gates.latency_plot import pictures_markdown
from gates.latency_report import LatencyFigures


def publish_pictures(service: str, summaries: list[GateSummary]) -> str | None:
    """The latency gate's pictures as the artifact `latency-SERVICE`; returns its key, or
    None when no latency gate measured anything."""
    latency = next((s for s in summaries if s.name == "latency" and s.figures.get("levels")), None)
    if latency is None:
        return None
    figures = LatencyFigures.model_validate(latency.figures)
    key = f"latency-{service}"
    create_markdown_artifact(
        f"## latency gate: {latency.verdict}\n\n{latency.reason}\n\n{pictures_markdown(figures)}",
        key=key,
        description=f"latency CDFs of {service}'s candidate against its baseline",
    )
    return key

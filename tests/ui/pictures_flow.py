"""A flow that runs the latency gate against two real model servers and publishes its
pictures as the handoff does: `python -m tests.ui.pictures_flow RUN_NAME SERVICE CAND BASE`."""

from __future__ import annotations

import sys

from prefect import flow

from flows.gating import GateSummary
from flows.pictures import publish_pictures
from gates.latency import run_latency
from gates.settings import LatencySettings


@flow(name="latency-pictures")
def latency_pictures(service: str, candidate_url: str, baseline_url: str) -> str | None:
    settings = LatencySettings(levels=[2], max_tokens=4, rounds=1, min_requests_per_round=6)
    result = run_latency(candidate_url, baseline_url, settings)
    summary = GateSummary(
        name=result.name,
        verdict=result.verdict,
        reason=result.reason,
        markdown=result.markdown(),
        figures=result.figures.model_dump(mode="json"),
    )
    return publish_pictures(service, [summary])


if __name__ == "__main__":
    latency_pictures.with_options(flow_run_name=sys.argv[1])(*sys.argv[2:5])

"""A flow that runs the latency and parity gates against real model servers and publishes
their pictures as the handoff does, then the timeline of its own two steps (timed as the
handoff times its steps; it has no Service, so no ready endpoints):
`python -m tests.ui.pictures_flow RUN_NAME SERVICE CAND BASE PARITY_CAND GOLDEN_FILE`."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from prefect import flow

from flows.evidence import GateSummary
from flows.report.pictures import publish_pictures, publish_timeline
from flows.report.timeline import StepSpan, Timeline
from gates.common.result import GateResult
from gates.common.settings import LatencySettings
from gates.latency.gate import run_latency
from gates.parity.gate import run_parity
from gates.parity.golden_format import Golden


def _timed(name: str, spans: list[StepSpan], run: Callable[[], GateResult]) -> GateSummary:
    start = time.time()
    result = run()
    spans.append(StepSpan(name=name, start=start, seconds=time.time() - start, state="done"))
    return GateSummary(
        name=result.name,
        verdict=result.verdict,
        reason=result.reason,
        markdown=result.markdown(),
        figures=result.figures.model_dump(mode="json"),
    )


@flow(name="gate-pictures")
def gate_pictures(
    service: str, candidate_url: str, baseline_url: str, parity_url: str, golden_file: str
) -> list[str]:
    settings = LatencySettings(levels=[2], max_tokens=4, rounds=1, min_requests_per_round=6)
    golden = Golden.load(Path(golden_file))
    spans: list[StepSpan] = []
    summaries = [
        _timed("latency", spans, lambda: run_latency(candidate_url, baseline_url, settings)),
        _timed("parity", spans, lambda: run_parity(parity_url, golden)),
    ]
    keys = publish_pictures(service, summaries)
    timeline = Timeline(handoff_id="ui", spec="pictures", service=service, steps=spans)
    return [*keys, publish_timeline(timeline.model_copy(update={"outcome": "done"}))]


if __name__ == "__main__":
    gate_pictures.with_options(flow_run_name=sys.argv[1])(*sys.argv[2:7])

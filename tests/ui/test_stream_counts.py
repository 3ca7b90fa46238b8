"""A count of streams reads as a person says it: "1 stream", "16 streams", in the latency
picture's title, its report's headings and the gate policy an approver reads."""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

import pytest

from gates.latency import plot
from gates.latency.cell import CellFigures
from gates.latency.report import LevelFigures, render_level, streams

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _level(concurrency: int) -> LevelFigures:
    cell = CellFigures(
        label="candidate",
        concurrency=concurrency,
        n_requests=3,
        n_ok=3,
        n_failed=0,
        errors={},
        ttft_ms=None,
        tpot_ms=None,
        itl_ms=None,
        e2el_ms=None,
        queue_ms=None,
        tokens_per_event=None,
        output_tokens=96,
        duration_s=1.0,
        throughput_tok_s=96.0,
        goodput_req_s=3.0,
        little=None,
        cdf_ms={"ttft": [10.0, 11.0, 12.0], "tpot": [2.0, 2.5, 3.0], "itl": [2.0, 3.0, 4.0]},
    )
    return LevelFigures(
        concurrency=concurrency,
        candidate=cell,
        baseline=None,
        comparisons=[],
        slo_checks=[],
        passed=True,
        findings=[],
    )


def test_one_stream_is_singular_and_a_list_agrees_with_its_last_count() -> None:
    assert streams(1) == "1 stream"
    assert streams(16) == "16 streams"
    assert streams(1, 16) == "1 and 16 streams"
    assert streams(16, 1) == "16 and 1 stream"
    assert streams(1, 4, 16) == "1, 4 and 16 streams"


@pytest.mark.parametrize(("concurrency", "said"), [(1, "1 stream"), (16, "16 streams")])
def test_the_latency_picture_and_report_say_the_count(
    concurrency: int, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    titles: list[str] = []

    def title_of(figure: Figure) -> bytes:
        titles.append(figure.get_suptitle())
        return b""

    monkeypatch.setattr(plot, "png", title_of)
    plot.level_png(_level(concurrency))
    assert titles == [f"latency at {said}: pass"]
    assert render_level(_level(concurrency)).startswith(f"#### {said}: pass")


@pytest.mark.parametrize(("levels", "said"), [([1], "1 stream"), ([1, 16], "1 and 16 streams")])
def test_the_gate_policy_names_the_levels_in_words(levels: list[int], said: str) -> None:
    from flows.report.markdown import gate_policy_markdown
    from flows.spec import HandoffSpec
    from gates.common.settings import LatencySettings

    # What the policy reads of a spec: its gates and its approval.
    spec = SimpleNamespace(
        gates=SimpleNamespace(
            model_id="m",
            smoke_deadline_s=60.0,
            parity=None,
            task=None,
            latency=LatencySettings(levels=levels),
            latency_budget_s=300.0,
        ),
        approval=SimpleNamespace(required=False, during_outage=False, outage_timeout_s=0.0),
    )
    policy = gate_policy_markdown(cast(HandoffSpec, spec))
    assert f"latency at {said}, 32 tokens" in policy

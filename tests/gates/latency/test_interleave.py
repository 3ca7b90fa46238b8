"""Baseline and candidate rounds alternate order (A B, B A, ...) so that drift on the machine
falls on both sides alike, every side runs once per round, and a round holds whole waves."""

from __future__ import annotations

import pytest

from gates.common.settings import LatencySettings
from gates.latency.gate import interleave


@pytest.mark.parametrize(
    ("items", "rounds", "expected"),
    [
        (["b", "c"], 1, [(0, "b"), (0, "c")]),
        (["b", "c"], 3, [(0, "b"), (0, "c"), (1, "c"), (1, "b"), (2, "b"), (2, "c")]),
        (["c"], 2, [(0, "c"), (1, "c")]),
        (["b", "c"], 0, []),
    ],
)
def test_rounds_alternate(items: list[str], rounds: int, expected: list[tuple[int, str]]) -> None:
    assert interleave(items, rounds=rounds) == expected


@pytest.mark.parametrize(
    ("concurrency", "waves", "minimum", "expected"),
    [(1, 1, 3, 3), (4, 1, 5, 8), (16, 1, 3, 16), (16, 2, 3, 32), (3, 1, 3, 3)],
)
def test_rounds_hold_whole_waves(concurrency: int, waves: int, minimum: int, expected: int) -> None:
    settings = LatencySettings(waves_per_round=waves, min_requests_per_round=minimum)
    assert settings.requests_per_round(concurrency) == expected


@pytest.mark.parametrize(
    ("rounds", "min_rounds", "sequential", "looks"),
    [
        (12, 3, True, [3, 6, 9, 12]),
        (10, 3, True, [3, 6, 9, 10]),
        (2, 3, True, [2]),
        (9, 3, False, [9]),
    ],
)
def test_looks_and_the_alpha_split_over_them(
    rounds: int, min_rounds: int, sequential: bool, looks: list[int]
) -> None:
    settings = LatencySettings(rounds=rounds, min_rounds=min_rounds, sequential=sequential)
    assert settings.looks() == looks
    at_look = settings.at_each_look()
    assert at_look.alpha == pytest.approx(settings.alpha / len(looks))
    assert 1 - at_look.confidence == pytest.approx((1 - settings.confidence) / len(looks))

"""Baseline and candidate rounds alternate order (A B, B A, ...) so that drift on the machine
falls on both sides alike, and every side runs once per round."""

from __future__ import annotations

import pytest

from gates.latency import interleave


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

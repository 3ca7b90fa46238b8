"""Latency levels and the server's slots: a level past the requests a server runs at once
measures its queue. The flags that set them are read from the pods' command lines (on the
sandbox's control plane); the gate keeps its default levels within them, keeps levels a
spec names and says they exceed them."""

from __future__ import annotations

import uuid

import pytest

from flows.baseline import identify_pod
from flows.kube.client import Kube
from gates.common.settings import LatencySettings
from gates.latency.gate import run_latency
from gates.latency.slots import Slots, slots_in_args, within_slots
from tests.gates.conftest import HALF_TIME, StartServer

FOUR = Slots(count=4, source="`--max-num-seqs 4` of container `vllm`, pod `p`")


@pytest.mark.parametrize(
    ("argv", "found"),
    [
        (["vllm", "serve", "m", "--max-num-seqs", "4"], (4, "--max-num-seqs 4")),
        (["vllm", "serve", "m", "--max-num-seqs=8"], (8, "--max-num-seqs 8")),
        (["llama-server", "-m", "m.gguf", "-np", "2"], (2, "-np 2")),
        (["llama-server", "--parallel", "3"], (3, "--parallel 3")),
        (["vllm", "serve", "m"], None),  # the server's own default: not known here
        (["vllm", "serve", "--max-num-seqs"], None),  # no value
        (["vllm", "serve", "--max-num-seqs", "0"], None),  # the server refuses it
        (["vllm", "serve", "--max-num-seqs", "${SEQS}"], None),  # not expanded here
    ],
)
def test_the_slots_a_command_line_sets(argv: list[str], found: tuple[int, str] | None) -> None:
    assert slots_in_args(argv) == found


def test_default_levels_come_within_the_slots_and_named_ones_stay_with_a_note() -> None:
    default = LatencySettings()
    chosen, note = within_slots(default, FOUR)
    assert chosen.levels == [1, 4] and "default levels 1, 16" in note and "--max-num-seqs 4" in note
    named = LatencySettings(levels=[1, 16])
    kept, note = within_slots(named, FOUR)
    assert kept.levels == [1, 16] and "level(s) 16 exceed the 4 requests" in note
    assert within_slots(default, Slots(count=16, source="x")) == (default, "")
    assert within_slots(default, None) == (default, "")


def test_the_tighter_of_two_sides_slots() -> None:
    two = Slots(count=2, source="other")
    assert FOUR.tighter(two) is two and two.tighter(FOUR) is two and FOUR.tighter(None) is FOUR


def test_a_sides_slots_are_read_from_its_pods_command_line(kube: Kube, namespace: str) -> None:
    name = f"vllm-{uuid.uuid4().hex[:6]}"
    containers = [
        {"name": "sidecar", "image": "busybox", "args": ["--parallel", "many"]},
        {
            "name": "vllm",
            "image": "vllm/vllm-openai",
            "command": ["vllm", "serve"],
            "args": ["m", "--max-num-seqs=4"],
        },
    ]
    kube.core.create_namespaced_pod(
        namespace, {"metadata": {"name": name}, "spec": {"containers": containers}}
    )
    side = identify_pod(kube, namespace, name, 8000)
    assert side.slots == Slots(
        count=4, source=f"`--max-num-seqs 4` of container `vllm`, pod `{name}`"
    )


def test_the_gate_measures_its_default_levels_within_known_slots(
    model_server: StartServer,
) -> None:
    """On a real simulated server run with `--max-num-seqs 2`: the default levels (1 and
    16) are measured at 1 and 2 streams, and the report says why."""
    server = model_server("gptq-30b-a3b-tp1", *HALF_TIME, "--max-num-seqs", "2")
    settings = LatencySettings(max_tokens=8, rounds=1, min_requests_per_round=1)
    two = Slots(count=2, source="`--max-num-seqs 2` of container `vllm`, pod `p`")
    result = run_latency(server.url, None, settings, slots=two)
    assert [level.concurrency for level in result.figures.levels] == [1, 2]
    assert "default levels 1, 16 kept within the 2 requests" in result.markdown()

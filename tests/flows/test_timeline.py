"""The timeline's data: ready endpoints kept at each change (the first and last reading of
each run of equal counts), a failed read named rather than fatal, steps of a record without
start times laid end to end and said to be; each pod classed by workload, and the picture's
stacked areas, colours and legend per workload (an older record's one count too); the way
back after the retirement drawn as the cold start it costs."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.colors import to_rgba

from flows.kube.objects import PodSnapshot
from flows.ledger import REVISION_LABEL
from flows.ready_workloads import compute_workload
from flows.report.timeline import SAMPLES_KEPT, Counts, ReadyEndpoints, Timeline, totals
from flows.report.timeline_plot import SERVING, timeline_figure, timeline_png


def _counter(*readings: int | Counts | Exception) -> Callable[[], Counts]:
    """Counts the Service would show, one per reading (a number: all live); an exception is
    a failed read."""
    left = iter(readings)

    def count() -> Counts:
        reading = next(left)
        if isinstance(reading, Exception):
            raise reading
        return reading if isinstance(reading, dict) else {"live": reading}

    return count


def _numbers(ready: ReadyEndpoints) -> list[int]:
    return [n for _, n in totals(ready.samples())]


def test_ready_endpoints_keep_each_change_and_the_last_reading() -> None:
    ready = ReadyEndpoints(_counter(1, 1, 1, 1, 2, 0, 0, 0, 2))
    for _ in range(8):
        ready.sample()
    kept = ready.samples()
    assert [n for _, n in totals(kept)] == [1, 1, 2, 0, 0, 2]
    assert kept[3][1] == {}, "a workload without ready endpoints is left out"
    times = [at for at, _ in kept]
    assert times == sorted(times) and ready.error is None


def test_a_flapping_count_is_kept_up_to_a_limit_and_the_rest_said_to_be_missing() -> None:
    ready = ReadyEndpoints(_counter(*[i % 2 for i in range(SAMPLES_KEPT + 11)]))
    for _ in range(SAMPLES_KEPT + 10):
        ready.sample()
    assert len(ready.samples()) == SAMPLES_KEPT
    assert ready.error is not None and ready.error.startswith(f"more than {SAMPLES_KEPT} changes")
    caption = Timeline(ready_endpoints=[(0.0, 1)], endpoints_note=ready.error).caption()
    assert f"while it ran ({ready.error})" in caption


def test_a_failed_read_is_named_and_sampling_goes_on() -> None:
    ready = ReadyEndpoints(_counter(1, PermissionError("endpoints is forbidden"), 1))
    ready.sample()
    ready.sample()
    assert _numbers(ready) == [1, 1]
    assert ready.error == "PermissionError: endpoints is forbidden"
    timeline = Timeline(endpoints_note=ready.error)
    assert "ready endpoints: not sampled (PermissionError: endpoints is forbidden)" in (
        timeline.caption()
    )


def test_steps_without_start_times_are_laid_end_to_end_and_said_to_be() -> None:
    timeline = Timeline(
        started_at="2026-11-29T10:00:00Z", durations_s={"warm": 20.5, "gates": 95.0}
    )
    spans = timeline.spans()
    assert [(s.name, s.state) for s in spans] == [("warm", "recorded"), ("gates", "recorded")]
    assert spans[1].start - spans[0].start == 20.5
    assert "laid end to end from their recorded durations" in timeline.caption()
    assert "client error rate: not measured" in timeline.caption()


def test_a_change_of_workload_at_the_same_count_is_a_change() -> None:
    ready = ReadyEndpoints(
        _counter({"live": 2}, {"live": 2}, {"live": 1, "candidate": 1}, {"candidate": 2, "live": 0})
    )
    for _ in range(3):
        ready.sample()
    kept = ready.samples()
    assert [c for _, c in kept] == [
        {"live": 2},
        {"live": 2},
        {"live": 1, "candidate": 1},
        {"candidate": 2},
    ]
    assert _numbers(ready) == [2, 2, 2, 2], "one count alone would not show the swap"


def _pod(owner: str | None, **labels: str) -> PodSnapshot:
    return PodSnapshot(
        name=f"{owner}-x1y2z",
        uid="u",
        labels=labels,
        node="n",
        phase="Running",
        ready=True,
        terminating=False,
        gpus=1,
        restart_count=0,
        owner=owner,
    )


@pytest.mark.parametrize(
    ("pod", "revision", "workload"),
    [
        (_pod("clef-serve-5d8f"), "r2", "live"),
        (_pod("clef-serve-5d8f", **{REVISION_LABEL: "r1"}), "r2", "live"),  # an earlier handoff
        (_pod("clef-candle-77aa", **{REVISION_LABEL: "r2"}), "r2", "candidate"),
        (_pod("clef-candle-77aa", **{REVISION_LABEL: "r2"}), None, "live"),  # not known yet
        (_pod("candle-vllm-handoff-9c", **{REVISION_LABEL: "r2"}), "r2", "twin"),
        (_pod("candle-vllm-31ee", **{REVISION_LABEL: "r2"}), "r2", "candidate"),  # took the spec
        (None, "r2", "unknown"),  # the endpoint's pod is gone, or it names none
    ],
)
def test_each_ready_pod_is_classed_by_its_workload(
    pod: PodSnapshot | None, revision: str | None, workload: str
) -> None:
    assert compute_workload(pod, twin="candle-vllm-handoff", revision=revision) == workload


SWAP = [
    (100.0, {"live": 2}),
    (104.0, {"live": 2, "twin": 1}),
    (110.0, {"twin": 1, "candidate": 1}),
    (115.0, {"candidate": 2}),
]


def test_the_picture_stacks_each_workload_in_its_colour_with_a_legend() -> None:
    timeline = Timeline(
        ready_endpoints=totals(SWAP),
        ready_by_workload=SWAP,
        workloads={"live": "candle-vllm", "twin": "candle-vllm-handoff"},
    )
    assert timeline.stacked() == [
        ("live", [(100.0, 2), (104.0, 2), (110.0, 0), (115.0, 0)]),
        ("twin", [(100.0, 0), (104.0, 1), (110.0, 1), (115.0, 0)]),
        ("candidate", [(100.0, 0), (104.0, 0), (110.0, 1), (115.0, 2)]),
    ]
    figure = timeline_figure(timeline)
    ready = figure.axes[1]
    legend = ready.get_legend()
    assert legend is not None
    assert [t.get_text() for t in legend.get_texts()] == [
        "live (candle-vllm)",
        "twin (candle-vllm-handoff)",
        "candidate",
    ]
    areas = [c for c in ready.collections if isinstance(c, PolyCollection)]
    assert [tuple(a.get_facecolor()[0][:3]) for a in areas] == [
        to_rgba(SERVING[w])[:3] for w in ("live", "twin", "candidate")
    ]
    (total,) = ready.get_lines()
    assert list(total.get_ydata()) == [2, 3, 2, 2], "the stack's top is the total"
    assert list(total.get_xdata()) == [0.0, 4.0, 10.0, 15.0]
    assert "each classed by its pod" in timeline.caption()
    assert timeline_png(timeline).startswith(b"\x89PNG")


def test_an_older_record_of_one_count_still_draws_and_says_so() -> None:
    old = Timeline.model_validate({"ready_endpoints": [[100.0, 1], [104.0, 2], [110.0, 1]]})
    assert old.stacked() == [("ready", [(100.0, 1), (104.0, 2), (110.0, 1)])]
    ready = timeline_figure(old).axes[1]
    legend = ready.get_legend()
    assert legend is not None and [t.get_text() for t in legend.get_texts()] == ["ready"]
    assert "one count: no workloads recorded" in old.caption()
    assert timeline_png(old).startswith(b"\x89PNG")


def _retired(**extra: object) -> Timeline:
    """A record that retired its old pods at 130 s, with the way back it recorded."""
    steps = [
        {"name": "swap", "start": 100.0, "seconds": 10.0, "state": "done"},
        {"name": "retire", "start": 110.0, "seconds": 20.0, "state": "done"},
    ]
    way_back = [{"workload": "clef-serve", "start_s": 240.0, "basis": "its pods' own start"}]
    return Timeline.model_validate(
        {"steps": steps, "ready_endpoints": [[100.0, 1], [130.0, 1]], "way_back": way_back} | extra
    )


def test_the_way_back_after_the_retirement_is_drawn_as_the_cold_start_it_costs() -> None:
    timeline = _retired()
    assert timeline.retired_at() == 130.0
    caption = timeline.caption()
    assert "the way back: after it, clef-serve: about 240 s to serve again from 0" in caption
    ready = timeline_figure(timeline).axes[1]
    (dashed,) = [c for c in ready.collections if isinstance(c, LineCollection)]
    (start, _), (end, _) = dashed.get_segments()[0]
    assert (start, end) == (30.0, 270.0), "from the retirement's end, as long as the start"
    assert any("cold start ≈ 240 s" in t.get_text() for t in ready.texts)
    baked = _retired(bake={"verdict": "pass", "started": 90.0, "seconds": 20.0,
                           "warm_way_back": "clef-serve at 1"})  # fmt: skip
    assert "until then the bake kept it a selector write to the warm old pods" in (baked.caption())
    unretired = Timeline.model_validate({"way_back": _retired().model_dump()["way_back"]})
    assert unretired.way_back_line() is None, "no retirement, no cold start to show"

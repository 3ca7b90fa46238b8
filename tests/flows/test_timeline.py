"""The timeline's data: ready endpoints kept at each change (the first and last reading of
each run of equal counts), a failed read named rather than fatal, and steps of a record
without start times laid end to end and said to be."""

from __future__ import annotations

from collections.abc import Callable

from flows.report.timeline import SAMPLES_KEPT, ReadyEndpoints, Timeline


def _counter(*readings: int | Exception) -> Callable[[], int]:
    """Counts the Service would show, one per reading; an exception is a failed read."""
    left = iter(readings)

    def count() -> int:
        reading = next(left)
        if isinstance(reading, Exception):
            raise reading
        return reading

    return count


def test_ready_endpoints_keep_each_change_and_the_last_reading() -> None:
    ready = ReadyEndpoints(_counter(1, 1, 1, 1, 2, 0, 0, 0, 2))
    for _ in range(8):
        ready.sample()
    kept = ready.samples()
    assert [n for _, n in kept] == [1, 1, 2, 0, 0, 2]
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
    assert [n for _, n in ready.samples()] == [1, 1]
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

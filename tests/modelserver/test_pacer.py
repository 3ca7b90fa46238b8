"""The pacer runs deliveries on the event loop at their deadlines, in order, never early, and
one failing delivery does not hold up the rest."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from sandbox.modelserver.pacer import Pacer

MS = 1_000_000


Ran = list[tuple[int, int, int]]  # (index, deadline, when it ran)


async def _paced(
    offsets_ms: list[float], *, failing: frozenset[int] = frozenset()
) -> tuple[Ran, list[dict]]:
    loop = asyncio.get_running_loop()
    errors: list[dict] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    pacer = Pacer(loop)
    ran: Ran = []
    done = asyncio.Event()
    start = time.monotonic_ns() + 50 * MS  # all scheduled well before the first is due

    def delivery(i: int, due: int) -> Callable[[], None]:
        def run() -> None:
            ran.append((i, due, time.monotonic_ns()))
            if len(ran) == len(offsets_ms):
                done.set()
            if i in failing:
                raise RuntimeError(f"delivery {i} failed")

        return run

    def from_another_thread() -> None:  # as the clock thread does
        for i, offset in enumerate(offsets_ms):
            due = start + round(offset * MS)
            pacer.schedule_threadsafe(due, delivery(i, due))

    threading.Thread(target=from_another_thread).start()
    await asyncio.wait_for(done.wait(), 5)
    pacer.close()
    return ran, errors


def test_deliveries_run_at_their_deadlines_in_deadline_order() -> None:
    offsets = [12.0, 3.0, 7.5, 3.0, 20.0, -60.0]  # out of order, a tie, one already due
    ran, errors = asyncio.run(_paced(offsets))
    assert not errors
    assert [i for i, _, _ in ran] == [5, 1, 3, 2, 0, 4]
    assert all(at >= due for _, due, at in ran)


def test_a_failing_delivery_is_reported_and_the_rest_still_run() -> None:
    ran, errors = asyncio.run(_paced([1.0, 1.0, 2.0], failing=frozenset({0})))
    assert [i for i, _, _ in ran] == [0, 1, 2]
    assert [str(e["exception"]) for e in errors] == ["delivery 0 failed"]


def test_an_overdue_delivery_waits_for_an_earlier_one_whose_timer_fired() -> None:
    """The loop is busy past A's deadline; B (later deadline, also overdue) is scheduled in
    the iteration where A's timer fires, ahead of the timer's callback: A still runs first."""

    async def scenario() -> list[str]:
        loop = asyncio.get_running_loop()
        pacer = Pacer(loop)
        ran: list[str] = []
        finished = asyncio.Event()
        t0 = time.monotonic_ns()

        def busy_then_schedule_b() -> None:
            time.sleep(0.003)  # the loop is held up past both deadlines
            pacer.schedule_threadsafe(t0 + 2 * MS, lambda: (ran.append("B"), finished.set()))

        pacer.schedule_threadsafe(t0 + 1 * MS, lambda: ran.append("A"))
        loop.call_soon(busy_then_schedule_b)
        await asyncio.wait_for(finished.wait(), 5)
        pacer.close()
        return ran

    assert asyncio.run(scenario()) == ["A", "B"]

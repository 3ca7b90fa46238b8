"""An event loop that stamps each wake-up, so reads are timed when they became readable.

The selector records `perf_counter_ns()` the moment epoll returns. Every socket in that batch
was readable by then, so its data arrived no later than the stamp; stamping instead inside
each `data_received` adds the Python time of every read handled before it (16 streams in
lock-step: up to ~0.5 ms for the last one). Outside such a loop, transports stamp per read.
"""

from __future__ import annotations

import asyncio
import selectors
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
_Selector: type[selectors.BaseSelector] = getattr(
    selectors, "EpollSelector", selectors.DefaultSelector
)


class StampingSelector(_Selector):  # type: ignore[misc, valid-type]
    """The default selector, plus `woke_ns`: when the last `select` returned."""

    woke_ns = 0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(timeout)
        self.woke_ns = time.perf_counter_ns()
        return ready


def new_event_loop() -> asyncio.AbstractEventLoop:
    return asyncio.SelectorEventLoop(StampingSelector())


def run(coro: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` on a stamping loop."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(coro)


def stamping_selector(loop: asyncio.AbstractEventLoop) -> StampingSelector | None:
    """The loop's stamping selector, or None for any other loop."""
    selector = getattr(loop, "_selector", None)
    return selector if isinstance(selector, StampingSelector) else None

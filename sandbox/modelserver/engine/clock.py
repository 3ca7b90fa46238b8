"""The clock thread: plans each step and releases its tokens just before its deadline.

The thread waits on a condition with a timeout (a CLOCK_MONOTONIC timed wait) at a 1 ns timer
slack and real-time priority where permitted, until `RELEASE_LEAD_NS` before the step's
deadline, then hands the step's tokens with the deadline to `dispatch`, which writes them at
the deadline itself (see `sandbox.modelserver.pacer`): the clock's own wake-up, late now and
then on a shared machine, stays off the tokens' timing. A batching engine still plans its
next step at the deadline, so what it admits does not change with the lead.

A batch step waits until all of its tokens are computed (a slow GPU step is late for
everyone). A cadence stream whose token is not computed yet is set aside instead, so it
cannot hold up the others, and sent the moment its token arrives.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sandbox.modelserver.engine.link import ComputeLink
from sandbox.modelserver.engine.messages import Grant
from sandbox.modelserver.engine.priority import CLOCK_PRIORITY, use_realtime
from sandbox.modelserver.engine.schedule import RESYNC_NS, Policy, Step
from sandbox.modelserver.engine.sequence import (
    Deliver,
    Event,
    FinishEvent,
    Sequence,
    TokenEvent,
    is_last,
)

Dispatch = Callable[[int, list[tuple[Deliver, Event]]], None]  # (deadline ns, events)

_PR_SET_TIMERSLACK = 29
_READY_TIMEOUT_S = 30.0
# How long before a step's deadline its tokens are released to the writer. The clock's wake-up
# may be late by about this much (a GIL hand-over, a busy core) without the tokens being late.
RELEASE_LEAD_NS = 2_000_000


def set_timer_slack_ns(ns: int) -> bool:
    """Ask Linux to wake this thread's sleeps within `ns` of the deadline (default 50 µs)."""
    try:
        status: int = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_TIMERSLACK, ns, 0, 0, 0)
        return status == 0
    except (OSError, AttributeError):
        return False


@dataclass
class _Released:
    events: list[tuple[Deliver, Event]] = field(default_factory=list)
    grants: list[Grant] = field(default_factory=list)
    sent: list[Sequence] = field(default_factory=list)
    waited: bool = False  # a token had to be waited for


class Clock:
    def __init__(
        self,
        policy: Policy,
        cond: threading.Condition,
        link: ComputeLink,
        *,
        dispatch: Dispatch,
        stall_after: int | None,
        realtime: bool,
    ) -> None:
        self.policy = policy
        self.cond = cond
        self.link = link
        self.inbox: list[Sequence] = []  # guarded by `cond`
        self.late: list[Sequence] = []  # cadence streams waiting for a token; under `cond`
        self.dispatch = dispatch
        self.stall_after = stall_after
        self.realtime = realtime
        self.stop = threading.Event()

    def run(self) -> None:
        set_timer_slack_ns(1)
        if self.realtime:
            use_realtime(CLOCK_PRIORITY)
        while not self.stop.is_set():
            step = self._next_step()
            if step is not None:
                self._wait_until(step.deadline_ns - RELEASE_LEAD_NS)
                self._run(step)
                if self.policy.plans_at_deadline:
                    self._wait_until(step.deadline_ns)

    def _next_step(self) -> Step | None:
        with self.cond:
            for seq in self.inbox:
                self.policy.add(seq)
            self.inbox.clear()
            step = self.policy.plan(time.monotonic_ns())
            if step is None:
                self.cond.wait_for(lambda: self.stop.is_set() or self.inbox or self._late_ready())
        self._send_late()
        return step

    def _wait_until(self, deadline_ns: int) -> None:
        """Sleep until `deadline_ns`, sending late cadence tokens as they arrive meanwhile."""
        while not self.stop.is_set():
            with self.cond:
                remaining_ns = deadline_ns - time.monotonic_ns()
                if remaining_ns <= 0:
                    return
                wake = lambda: self.stop.is_set() or self._late_ready()  # noqa: E731
                self.cond.wait_for(wake, remaining_ns / 1e9)
            self._send_late()

    def _late_ready(self) -> bool:
        return any(s.is_ready or not s.active for s in self.late)

    def _send_late(self) -> None:
        with self.cond:
            ready = [s for s in self.late if s.is_ready or not s.active]
            self.late = [s for s in self.late if s not in ready]
        if ready:
            self._run(Step(time.monotonic_ns(), tuple(ready), prefill=False))

    def _run(self, step: Step) -> None:
        released = self._release(step)
        self.dispatch(step.deadline_ns, released.events)
        self.link.send_grants(released.grants)
        sent = Step(step.deadline_ns, tuple(released.sent), step.prefill)
        self.policy.done(sent, ended_ns=self._ended_ns(step, released.waited))

    @staticmethod
    def _ended_ns(step: Step, waited: bool) -> int:
        """When the step counts as finished, the base of the next deadlines. Sleeping late
        does not move it (absolute deadlines, no drift); waiting for the compute process
        past the deadline does, as a slow GPU step delays every later one. A hiccup beyond
        RESYNC_NS restarts from now rather than sending a burst to catch up."""
        now = time.monotonic_ns()
        if now - step.deadline_ns > RESYNC_NS:
            return now
        return max(now, step.deadline_ns) if waited else step.deadline_ns

    def _release(self, step: Step) -> _Released:
        out = _Released()
        with self.cond:
            for seq in step.seqs:
                self._maybe_stall(seq)
                if not seq.active:
                    continue
                if not seq.is_ready and not self.policy.batch_waits_for_compute:
                    self.late.append(seq)
                    continue
                out.waited |= self._wait_ready(seq)
                if seq.active and seq.is_ready:
                    out.events.append((seq.deliver, self._next_event(seq)))
                    out.sent.append(seq)
                    if (grant := self.link.top_up(seq)) is not None:
                        out.grants.append(grant)
        return out

    def _wait_ready(self, seq: Sequence) -> bool:
        """Wait until `seq` can send; True if the compute process had fallen behind."""
        if seq.is_ready:
            return False
        self.cond.wait_for(lambda: seq.is_ready or not seq.active, _READY_TIMEOUT_S)
        return True

    def _next_event(self, seq: Sequence) -> Event:
        if not seq.ready:  # max_tokens 0: the prefill step only scores the prompt
            seq.finished = True
            return FinishEvent("length")
        token = seq.ready.popleft()
        seq.emitted += 1
        reason = is_last(seq.request, token, seq.emitted)
        seq.finished = reason is not None
        return TokenEvent(token, reason)

    def _maybe_stall(self, seq: Sequence) -> None:
        if self.stall_after is not None and seq.active and seq.emitted >= self.stall_after:
            seq.stalled = True

"""The engine: a compute process running the model ahead, and a clock thread pacing it."""

from __future__ import annotations

import threading

from sandbox.modelserver.engine.clock import Clock, Dispatch
from sandbox.modelserver.engine.link import GRANT, ComputeLink
from sandbox.modelserver.engine.schedule import Policy
from sandbox.modelserver.engine.sequence import Deliver, GenRequest, Sequence
from sandbox.modelserver.lm.model import ModelSpec


class Engine:
    def __init__(
        self,
        spec: ModelSpec,
        policy: Policy,
        *,
        dispatch: Dispatch,
        stall_after: int | None,
        realtime: bool,
    ) -> None:
        self.cond = threading.Condition()
        self.link = ComputeLink(spec, self.cond, realtime=realtime)
        self.clock = Clock(
            policy,
            self.cond,
            self.link,
            dispatch=dispatch,
            stall_after=stall_after,
            realtime=realtime,
        )
        self._thread = threading.Thread(
            target=self.clock.run, name="modelserver-clock", daemon=True
        )

    def start(self) -> None:
        self.link.start()
        self._thread.start()

    def stop(self) -> None:
        with self.cond:
            self.clock.stop.set()
            self.cond.notify_all()
        self._thread.join(timeout=5)
        self.link.stop()

    def submit(self, request: GenRequest, deliver: Deliver) -> Sequence:
        """Queue a request; `deliver` is called (via the dispatcher) with each event."""
        seq = Sequence(request, deliver, granted=GRANT)
        self.link.submit(seq)
        with self.cond:
            self.clock.inbox.append(seq)
            self.cond.notify_all()
        return seq

    def abort(self, seq: Sequence) -> None:
        with self.cond:
            seq.aborted = True
            self.cond.notify_all()
        self.link.abort(seq)

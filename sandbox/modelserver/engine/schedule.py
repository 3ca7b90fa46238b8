"""When each sequence's next token is due: continuous batching, or a fixed cadence.

Both policies keep absolute deadlines: a step is due at the end of the previous one plus its
duration, never at "now plus duration", so sleeping late once does not shift later tokens.
The clock says when a step ended (its deadline, unless it had to wait for the compute
process or hit a hiccup longer than `RESYNC_NS`).
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from dataclasses import dataclass

from sandbox.modelserver.engine.sequence import Sequence
from sandbox.modelserver.profiles import Profile

RESYNC_NS = 50_000_000
_MS = 1_000_000


@dataclass(frozen=True)
class Step:
    deadline_ns: int
    seqs: tuple[Sequence, ...]
    prefill: bool


class ContinuousBatching:
    """Each step either prefills every newly admitted prompt together (running sequences wait,
    as in vLLM's default scheduler) or decodes one token for every running sequence; at most
    `max_num_seqs` run, the rest queue in arrival order."""

    batch_waits_for_compute = True
    # The next step is planned when this one ends, so a request that arrives while the
    # clock has already released this step's tokens still joins the next one.
    plans_at_deadline = True

    def __init__(self, profile: Profile, *, scale: float) -> None:
        self.profile = profile
        self.scale = scale
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.timeline_ns: int | None = None  # end of the last step; None while idle

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def plan(self, now_ns: int) -> Step | None:
        self.running = [s for s in self.running if s.active]
        self.waiting = deque(s for s in self.waiting if s.active)
        room = self.profile.max_num_seqs - len(self.running)
        admitted = [self.waiting.popleft() for _ in range(min(room, len(self.waiting)))]
        base = self._base(now_ns, admitted)
        if admitted:
            tokens = sum(len(s.request.prompt) for s in admitted)
            duration = self.profile.prefill_ms(tokens)
            return Step(base + self._ns(duration), tuple(admitted), prefill=True)
        if self.running:
            duration = self.profile.step_ms(len(self.running))
            return Step(base + self._ns(duration), tuple(self.running), prefill=False)
        self.timeline_ns = None
        return None

    def done(self, step: Step, *, ended_ns: int) -> None:
        self.timeline_ns = ended_ns
        if step.prefill:
            self.running.extend(s for s in step.seqs if s.active)

    def _base(self, now_ns: int, admitted: list[Sequence]) -> int:
        if self.timeline_ns is not None:
            return self.timeline_ns
        # Idle until now: the step starts when its first request arrived, not when the clock
        # thread woke up to notice it.
        arrived = min((s.request.submitted_ns for s in admitted), default=now_ns)
        return max(arrived, now_ns - RESYNC_NS)

    def _ns(self, ms: float) -> int:
        return round(ms * self.scale * _MS)


class Cadence:
    """Every sequence gets a token exactly every `interval`, counted from its arrival, with no
    batching effects and no cap."""

    batch_waits_for_compute = False
    plans_at_deadline = False  # streams are independent: plan the next as soon as possible

    def __init__(self, profile: Profile, *, scale: float) -> None:
        self.interval_ns = round(profile.step_ms_1 * scale * _MS)
        self._due: list[tuple[int, int, Sequence]] = []
        self._order = itertools.count()

    def add(self, seq: Sequence) -> None:
        self._push(seq.request.submitted_ns + self.interval_ns, seq)

    def plan(self, now_ns: int) -> Step | None:
        while self._due and not self._due[0][2].active:
            heapq.heappop(self._due)
        if not self._due:
            return None
        due = self._due[0][0]
        group = []
        while self._due and self._due[0][0] == due:
            group.append(heapq.heappop(self._due)[2])
        return Step(due, tuple(group), prefill=False)

    def done(self, step: Step, *, ended_ns: int) -> None:
        for seq in step.seqs:
            if seq.active:
                self._push(ended_ns + self.interval_ns, seq)

    def _push(self, due_ns: int, seq: Sequence) -> None:
        heapq.heappush(self._due, (due_ns, next(self._order), seq))


Policy = ContinuousBatching | Cadence


def make_policy(profile: Profile, *, scale: float) -> Policy:
    if profile.batching == "cadence":
        return Cadence(profile, scale=scale)
    return ContinuousBatching(profile, scale=scale)

"""A generation request as the engine sees it, and the events it streams back."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from sandbox.modelserver.lm.sampling import SamplingParams, TokenOut
from sandbox.modelserver.lm.weights import EOS_ID


@dataclass(frozen=True)
class GenRequest:
    prompt: tuple[int, ...]
    max_tokens: int
    sampling: SamplingParams
    seed: int | None
    prompt_logprobs: int | None  # top-k at each prompt position (echo); None: not wanted
    submitted_ns: int  # time.monotonic_ns() when the request arrived
    answer: tuple[int, ...] | None = None  # a known answer's tokens (sandbox.modelserver.known)


def is_last(request: GenRequest, token: TokenOut, count: int) -> str | None:
    """The finish reason if `token`, the `count`-th generated, ends the sequence."""
    if token.token_id == EOS_ID and not request.sampling.ignore_eos:
        return "stop"
    if count >= request.max_tokens:
        return "length"
    return None


@dataclass(frozen=True)
class TokenEvent:
    token: TokenOut
    finish_reason: str | None  # set on the last token: "length" or "stop"


@dataclass(frozen=True)
class FinishEvent:
    """The end of a request that emits no token at all (max_tokens 0)."""

    finish_reason: str


Event = TokenEvent | FinishEvent
Deliver = Callable[[Event], None]

_ids = itertools.count(1)


class Sequence:
    """Server-side state of one request, read and written under the engine's lock: the
    tokens computed but not yet sent, and how far the compute process may run ahead."""

    def __init__(self, request: GenRequest, deliver: Deliver, *, granted: int) -> None:
        self.id = next(_ids)
        self.request = request
        self.deliver = deliver
        self.granted = granted
        self.prefilled = False
        self.prompt_logprobs: list[TokenOut | None] | None = None
        self.ready: deque[TokenOut] = deque()
        self.compute_finished = False  # the last token has been computed
        self.emitted = 0
        self.finished = False
        self.aborted = False
        self.stalled = False

    @property
    def active(self) -> bool:
        return not (self.finished or self.aborted or self.stalled)

    @property
    def is_ready(self) -> bool:
        """Whether the next event can be sent: a token, or the end of a max_tokens 0 request."""
        return bool(self.ready) or (self.prefilled and self.compute_finished)

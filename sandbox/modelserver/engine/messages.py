"""What the server and the compute process say to each other over their pipe."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandbox.modelserver.engine.sequence import GenRequest
from sandbox.modelserver.lm.sampling import TokenOut


@dataclass(frozen=True)
class Submit:
    seq_id: int
    request: GenRequest
    grant: int  # tokens it may compute before the next Grant


@dataclass(frozen=True)
class Grant:
    seq_id: int
    tokens: int


@dataclass(frozen=True)
class Abort:
    seq_id: int


@dataclass(frozen=True)
class Stop:
    pass


@dataclass(frozen=True)
class Readout:
    """One forward pass over `tokens` for a read-out ("probes" or "heads")."""

    request_id: int
    kind: str
    tokens: tuple[int, ...]


@dataclass(frozen=True)
class Ready:
    """The compute process has built its model and takes work."""


@dataclass(frozen=True)
class Prefilled:
    seq_id: int
    prompt_logprobs: list[TokenOut | None] | None


@dataclass(frozen=True)
class Computed:
    """New tokens of several sequences; `last` marks a sequence's final token."""

    tokens: list[tuple[int, TokenOut, bool]]


@dataclass(frozen=True)
class ReadoutDone:
    request_id: int
    value: dict[str, Any]


Command = Submit | Grant | Abort | Stop | Readout
Result = Ready | Prefilled | Computed | ReadoutDone

"""One flat, typed record per streamed request, failed requests included.

Times are `time.perf_counter_ns()` stamps (monotonic; on Linux the same clock as the model
server's ground truth). A failed request keeps its error and whatever it received, so a stall
or a 500 shows up in the figures as data instead of vanishing from them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class RequestRecord(BaseModel):
    """What the client saw of one streamed request."""

    index: int = Field(description="position in its run, in dispatch order")
    label: str = Field(default="", description="which side of a comparison sent it")
    round: int = 0
    expected_tokens: int | None = Field(
        default=None,
        description="max_tokens: a stream must deliver this many unless the model ended it",
    )
    finish_reason: str | None = Field(
        default=None, description="the server's: 'stop' (EOS or a stop sequence), 'length', ..."
    )
    t_queued_ns: int = Field(default=0, description="request handed to the client")
    t_send_ns: int | None = Field(default=None, description="request headers start on the wire")
    t_headers_ns: int | None = Field(default=None, description="response headers received")
    t_end_ns: int | None = Field(default=None, description="stream finished or failed")
    token_times_ns: list[int] = Field(
        default_factory=list, description="arrival stamp of each token event (before parsing)"
    )
    n_out: int | None = Field(default=None, description="output tokens, from usage if sent")
    n_out_source: Literal["usage", "events"] | None = None
    n_prompt: int | None = None
    n_comments: int = Field(default=0, description="SSE comments such as keep-alives")
    response_id: str | None = None
    status: int | None = None
    error: str | None = None

    @property
    def ended_early(self) -> bool:
        """The model ended the answer (EOS) before max_tokens: servers that ignore
        `ignore_eos` do this, and it is an answer, not a failure."""
        short = self.expected_tokens is not None and (self.n_out or 0) < self.expected_tokens
        return self.finish_reason == "stop" and short

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.token_times_ns)

    @property
    def queue_ns(self) -> int | None:
        """Time spent inside the client (pool wait, connect) before the headers went out."""
        return None if self.t_send_ns is None else self.t_send_ns - self.t_queued_ns

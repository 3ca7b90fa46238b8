"""The live baseline's load from others: the Service's clients, still routed to it while
the gate measures it.

The baseline's server counts the tokens it generates (`gates.http.counters`); read just
before and just after each candidate round, when the gate sends the baseline nothing,
the difference is what it generated for others meanwhile. That rate, set beside the
gate's own throughput on the baseline, says how loaded the figures the candidate is
compared with were: a loaded baseline is slower, which flatters the candidate. A server
without the counter (llama-cpp-python's, candle-vllm) is named as unseen, not as idle.
"""

from __future__ import annotations

import time

import httpx
from pydantic import BaseModel, Field

from gates.http.counters import generated_tokens

METRICS_PATH = "/metrics"


class OthersLoad(BaseModel):
    """What the baseline generated for others while the gate loaded only the candidate."""

    seen: bool = Field(description="the baseline's /metrics has a generated-tokens counter")
    tokens: float = Field(0.0, description="tokens generated for others over `seconds`")
    seconds: float = Field(0.0, description="time spent in candidate rounds, counter read")
    why_unseen: str | None = None

    @property
    def tokens_per_s(self) -> float | None:
        return self.tokens / self.seconds if self.seen and self.seconds > 0 else None

    def share_of(self, own_tok_s: float | None) -> float | None:
        """Others' rate as a share of the gate's own throughput on the baseline."""
        rate = self.tokens_per_s
        return rate / own_tok_s if rate is not None and own_tok_s else None

    def line(self, own_tok_s: float | None) -> str | None:
        """The report's line on it, beside the gate's own throughput on the baseline."""
        if not self.seen:
            return (
                f"baseline's load from others not seen ({self.why_unseen}): its figures may "
                "include the Service's traffic"
            )
        rate, share = self.tokens_per_s, self.share_of(own_tok_s)
        if rate is None:
            return None
        of_own = f", {share:.0%} of the gate's own" if share is not None else ""
        return (
            f"baseline's load from others: {rate:.1f} tokens/s{of_own}, read from its "
            f"/metrics over {self.seconds:.1f} s of candidate rounds"
        )


class OthersMeter:
    """Reads the baseline's counter around candidate rounds; `load` sums what it saw."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.load = OthersLoad(seen=True)
        self._start: tuple[float, float] | None = None

    async def _read(self) -> float | None:
        if not self.load.seen:
            return None
        url = f"{str(self.client.base_url).rstrip('/')}{METRICS_PATH}"  # as httpx merges it
        try:
            answer = await self.client.get(METRICS_PATH)
        except httpx.HTTPError as exc:
            return self._unseen(f"GET {url}: {type(exc).__name__}: {exc}")
        if answer.status_code != 200:
            return self._unseen(f"GET {url} answered HTTP {answer.status_code}")
        found = generated_tokens(answer.text)
        if found is None:
            return self._unseen(f"{url} has no generated-tokens counter")
        return found

    def _unseen(self, why: str) -> float | None:
        """Unseen from now on: a later read would count from a gap."""
        self.load = OthersLoad(seen=False, why_unseen=why)
        return None

    async def before_round(self) -> None:
        tokens = await self._read()
        self._start = None if tokens is None else (tokens, time.monotonic())

    async def after_round(self) -> None:
        start, self._start = self._start, None
        tokens = await self._read()
        if start is None or tokens is None:
            return
        self.load = self.load.model_copy(
            update={
                "tokens": self.load.tokens + max(0.0, tokens - start[0]),
                "seconds": self.load.seconds + time.monotonic() - start[1],
            }
        )

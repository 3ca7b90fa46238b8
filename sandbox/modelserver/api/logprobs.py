"""Logprobs in the two OpenAI shapes: legacy completions and chat."""

from __future__ import annotations

from typing import Any

from sandbox.modelserver.lm.sampling import TokenOut
from sandbox.modelserver.lm.tokenizer import token_bytes, token_str


class LegacyLogprobs:
    """Completions `logprobs`: parallel lists, with each token's offset into the text."""

    def __init__(self, *, as_ids: bool, offset: int = 0) -> None:
        self.as_ids = as_ids
        self.offset = offset
        self.tokens: list[str] = []
        self.token_logprobs: list[float | None] = []
        self.top_logprobs: list[dict[str, float] | None] = []
        self.text_offset: list[int] = []

    def add(self, token_id: int, scored: TokenOut | None, text: str) -> None:
        """Append one token; `scored` is None for the first prompt token (nothing predicts it)."""
        self.tokens.append(token_str(token_id, as_ids=self.as_ids))
        self.token_logprobs.append(None if scored is None else scored.logprob)
        self.top_logprobs.append(None if scored is None else self._top(scored))
        self.text_offset.append(self.offset)
        self.offset += len(text)

    def _top(self, scored: TokenOut) -> dict[str, float]:
        # vLLM lists the chosen token alongside the top-k, so it is always there.
        top = {token_str(i, as_ids=self.as_ids): lp for i, lp in scored.top}
        top.setdefault(token_str(scored.token_id, as_ids=self.as_ids), scored.logprob)
        return top

    def take(self) -> dict[str, Any]:
        """The lists so far, then start afresh (a stream sends each token's part once)."""
        out = {
            "tokens": self.tokens,
            "token_logprobs": self.token_logprobs,
            "top_logprobs": self.top_logprobs,
            "text_offset": self.text_offset,
        }
        self.tokens, self.token_logprobs, self.top_logprobs, self.text_offset = [], [], [], []
        return out


def chat_entry(token: TokenOut, *, as_ids: bool) -> dict[str, Any]:
    """One element of the chat `logprobs.content` list."""

    def one(token_id: int, logprob: float) -> dict[str, Any]:
        return {
            "token": token_str(token_id, as_ids=as_ids),
            "logprob": logprob,
            "bytes": token_bytes(token_id),
        }

    entry = one(token.token_id, token.logprob)
    entry["top_logprobs"] = [one(i, lp) for i, lp in token.top]
    return entry

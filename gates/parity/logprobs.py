"""The logprobs servers return, as golden-file positions: completions' `logprobs` objects
(with and without echo) and chat's `logprobs.content`, whether tokens come as text or as
vLLM's `token_id:N`."""

from __future__ import annotations

from typing import Any

from gates.http.capabilities import TOKEN_ID_PREFIX
from gates.parity.golden_format import Alternative, TokenStep


def parse_completion_logprobs(logprobs: dict[str, Any], text: str) -> list[TokenStep]:
    """Positions of a completions `logprobs` object (no echo); null positions are skipped.

    `text_offset` counts from the completion (vLLM) or from the prompt (OpenAI's legacy
    convention, llama.cpp): either way the first token starts the completion, so offsets are
    taken relative to the first one.
    """
    tokens = list(logprobs.get("tokens") or [])
    values = logprobs.get("token_logprobs") or []
    tops = logprobs.get("top_logprobs") or [None] * len(tokens)
    offsets = list(logprobs.get("text_offset") or [])
    as_ids = bool(tokens) and all(str(t).startswith(TOKEN_ID_PREFIX) for t in tokens)
    relative = [o - offsets[0] for o in offsets]
    texts = pieces(text, relative, len(tokens), tokens, as_ids=as_ids)
    return [
        step(token, value, top, piece)
        for token, value, top, piece in zip(tokens, values, tops, texts, strict=True)
        if value is not None and top is not None
    ]


def step(token: str, value: float | None, top: dict[str, float], piece: str | None) -> TokenStep:
    token_id = as_id(token)
    return TokenStep(
        token_id=token_id,
        piece=piece if token_id is not None else token,
        logprob=value,
        top=[_alternative(key, lp) for key, lp in top.items()],
    )


def _alternative(key: str, logprob: float) -> Alternative:
    token_id = as_id(key)
    return Alternative(
        token_id=token_id, piece=None if token_id is not None else key, logprob=logprob
    )


def chat_step(entry: dict[str, Any]) -> TokenStep:
    token = str(entry.get("token", ""))
    token_id = as_id(token)
    return TokenStep(
        token_id=token_id,
        piece=None if token_id is not None else token,
        bytes=entry.get("bytes"),
        logprob=entry.get("logprob"),
        top=[
            Alternative(
                token_id=as_id(str(alt.get("token", ""))),
                piece=None if as_id(str(alt.get("token", ""))) is not None else alt.get("token"),
                bytes=alt.get("bytes"),
                logprob=float(alt["logprob"]),
            )
            for alt in entry.get("top_logprobs") or []
            if isinstance(alt, dict) and alt.get("logprob") is not None
        ],
    )


def as_id(token: str) -> int | None:
    """`token_id:N` -> N (vLLM's `return_tokens_as_token_ids`); None for token text."""
    if not token.startswith(TOKEN_ID_PREFIX):
        return None
    try:
        return int(token.removeprefix(TOKEN_ID_PREFIX))
    except ValueError:
        return None


def pieces(
    text: str, offsets: list[int], n: int, tokens: list[str], *, as_ids: bool
) -> list[str | None]:
    if not as_ids:
        return [str(t) for t in tokens[:n]]
    if not offsets or len(offsets) != n or not text:
        return [None] * n
    ends = [*offsets[1:], len(text)]
    return [text[start:end] for start, end in zip(offsets, ends, strict=True)]

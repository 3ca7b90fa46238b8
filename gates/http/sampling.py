"""Greedy decoding, stated explicitly: servers apply their own defaults to whatever a request
leaves out (llama.cpp's server: `repeat_penalty` 1.1, `top_k` 40), so `temperature: 0` alone
is not greedy there. Every sampling parameter a server may apply is sent, neutral.
"""

from __future__ import annotations

from typing import Any

SEED = 0

# The OpenAI parameters: every OpenAI-compatible server accepts these.
STANDARD: dict[str, Any] = {
    "temperature": 0.0,
    "top_p": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "seed": SEED,
}
# Extensions with server defaults that are not neutral. top_k 0 disables the filter in
# llama.cpp and vLLM (llama.cpp's server refuses -1); `repeat_penalty` is llama.cpp's name,
# `repetition_penalty` vLLM's.
EXTENDED: dict[str, Any] = {
    "top_k": 0,
    "min_p": 0.0,
    "repeat_penalty": 1.0,
    "repetition_penalty": 1.0,
}


def neutral(*, extended: bool) -> dict[str, Any]:
    """The sampling fields of a greedy request; `extended` when the server accepts them."""
    return STANDARD | EXTENDED if extended else dict(STANDARD)

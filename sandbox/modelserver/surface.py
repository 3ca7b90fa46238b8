"""Which HTTP routes a simulated server has, as the server it stands for routes them.

``openai``: every route this simulator implements (vLLM-like, plus /health and the
/debug/probes and /v1/heads extensions). ``candle-vllm``: upstream candle-vllm's axum router,
which routes only /v1/models, /v1/chat/completions and /v1/embeddings (the simulator has no
embeddings, so two of them), answers any other path with an empty 404 and opens its port
only once the model is loaded (no /health to probe while loading).
"""

from __future__ import annotations

from typing import Literal

Surface = Literal["openai", "candle-vllm"]

CANDLE_VLLM_ROUTES = ("/v1/models", "/v1/chat/completions")
CANDLE_VLLM_OWNER = "candle-vllm"  # `owned_by` of its /v1/models entries


def routed(surface: Surface, path: str) -> bool:
    """Whether a server with this surface routes `path` at all."""
    return surface == "openai" or path in CANDLE_VLLM_ROUTES

"""A simulated OpenAI-compatible model server (vLLM / candle-vllm look-alike).

Honest numerics from a tiny numpy language model at fp32 or fp16, continuous-batching
latency calibrated per profile, ground-truth token send times, and the seeds' faults.
Run it with `python -m sandbox.modelserver --profile NAME --port N`.

The public names load on first use, so importing the command line stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from sandbox.modelserver.faults import Fault

if TYPE_CHECKING:
    from sandbox.modelserver.config import ServerConfig
    from sandbox.modelserver.profiles import PROFILES, Profile

_LAZY = {
    "PROFILES": "sandbox.modelserver.profiles",
    "Profile": "sandbox.modelserver.profiles",
    "ServerConfig": "sandbox.modelserver.config",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def serve(config: ServerConfig) -> None:
    """Run the server described by `config` until SIGTERM (blocking)."""
    from sandbox.modelserver.server import run_server

    run_server(config)


__all__ = ["PROFILES", "Fault", "Profile", "ServerConfig", "serve"]

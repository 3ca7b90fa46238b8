"""A simulated OpenAI-compatible model server (vLLM / candle-vllm look-alike).

Honest numerics from a tiny numpy language model at fp32 or fp16, continuous-batching
latency calibrated per profile, ground-truth token send times, and the seeds' faults.
Run it with `python -m sandbox.modelserver --profile NAME --port N`.
"""

from sandbox.modelserver.config import Fault, ServerConfig
from sandbox.modelserver.profiles import PROFILES, Profile


def serve(config: ServerConfig) -> None:
    """Run the server described by `config` until SIGTERM (blocking)."""
    from sandbox.modelserver.server import run_server

    run_server(config)


__all__ = ["PROFILES", "Fault", "Profile", "ServerConfig", "serve"]

"""`handoff run` that sends itself SIGTERM at one point of its own code, as a Prefect
worker's cancellation may arrive there on a loaded machine, every time:

    python -m tests.handoff.cancel_at flows.session:workload_names run SPEC --auto-approve

The function named is wrapped: the signal is sent as it is called, then it runs."""

from __future__ import annotations

import functools
import importlib
import os
import signal
import sys
from typing import Any


def cancelled_at(target: str, *args: str) -> list[str]:
    """The command line of `handoff ARGS...` that signals itself as `target`
    (module:function) is called."""
    return [sys.executable, "-m", __name__, target, *args]


def main() -> None:
    target, *argv = sys.argv[1:]
    module_name, name = target.split(":")
    module = importlib.import_module(module_name)
    real = getattr(module, name)

    @functools.wraps(real)
    def cancelled_here(*args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    setattr(module, name, cancelled_here)
    sys.argv = [sys.argv[0], *argv]
    from cli import main as handoff

    handoff()


if __name__ == "__main__":
    main()

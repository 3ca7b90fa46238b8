"""`handoff run` that signals itself at one point of its own code, as a Prefect worker's
cancellation (SIGTERM) or a kill may arrive there on a loaded machine, every time:

    python -m tests.handoff.cancel_at [--kill] flows.session:workload_names run SPEC ...

The function named is wrapped: the signal is sent as it is called, then it runs.
`--kill` sends SIGKILL to the run's whole process group instead (its session, as the
tests start it), as faults.sigkill does from outside."""

from __future__ import annotations

import functools
import importlib
import os
import signal
import sys
from typing import Any


def cancelled_at(target: str, *args: str, kill: bool = False) -> list[str]:
    """The command line of `handoff ARGS...` that signals itself as `target`
    (module:function) is called."""
    return [sys.executable, "-m", __name__, *(["--kill"] if kill else []), target, *args]


def main() -> None:
    argv = sys.argv[1:]
    kill = argv[:1] == ["--kill"]
    target, *rest = argv[1:] if kill else argv
    module_name, name = target.split(":")
    module = importlib.import_module(module_name)
    real = getattr(module, name)

    @functools.wraps(real)
    def signalled_here(*args: Any, **kwargs: Any) -> Any:
        if kill:  # the run ends here
            os.killpg(os.getpgid(0), signal.SIGKILL)
        else:  # held or raised, as the run's own handlers decide
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    setattr(module, name, signalled_here)
    sys.argv = [sys.argv[0], *rest]
    from cli import main as handoff

    handoff()


if __name__ == "__main__":
    main()

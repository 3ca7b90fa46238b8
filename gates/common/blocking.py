"""Blocking entry points to the gates, which are async (the flow awaits them in its loop)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def blocking(fn: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, R]:
    """`fn` for callers outside an event loop: each call runs it in a loop of its own."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        return asyncio.run(fn(*args, **kwargs))

    return run

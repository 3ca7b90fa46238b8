"""Log lines into a file while a command draws its own display on the terminal.

Prefect configures console handlers on the root logger and its own loggers; a live
table redrawn beneath them is unreadable. While `logs_to` runs, every handler that
writes to the terminal writes to the file instead (same level, same format).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _to_terminal(handler: logging.Handler) -> bool:
    from prefect.logging.handlers import PrefectConsoleHandler

    if isinstance(handler, PrefectConsoleHandler):
        return True
    stream = getattr(handler, "stream", None)
    terminal = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
    return isinstance(handler, logging.StreamHandler) and any(stream is s for s in terminal)


def _loggers() -> list[logging.Logger]:
    named = [
        logger
        for logger in logging.Logger.manager.loggerDict.values()
        if isinstance(logger, logging.Logger)
    ]
    return [logging.getLogger(), *named]


def _replace(logger: logging.Logger, old: logging.Handler, new: logging.Handler) -> None:
    """In the same place: handlers keep their order."""
    handlers = list(logger.handlers)
    handlers[handlers.index(old)] = new
    logger.handlers = handlers


@contextmanager
def logs_to(path: Path) -> Iterator[Path]:
    """Send every terminal log handler's lines to `path` (appended) while the block runs."""
    from prefect.logging.configuration import ensure_logging_setup

    ensure_logging_setup()
    path.parent.mkdir(parents=True, exist_ok=True)
    swapped: list[tuple[logging.Logger, logging.Handler, logging.FileHandler]] = []
    for logger in _loggers():
        for handler in list(logger.handlers):
            if not _to_terminal(handler):
                continue
            to_file = logging.FileHandler(path, encoding="utf-8")
            to_file.setLevel(handler.level)
            to_file.setFormatter(handler.formatter)
            _replace(logger, handler, to_file)
            swapped.append((logger, handler, to_file))
    try:
        yield path
    finally:
        for logger, handler, to_file in swapped:
            _replace(logger, to_file, handler)
            to_file.close()

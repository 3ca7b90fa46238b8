"""Exceptions raised by gate internals (a gate's verdict itself is a value, never raised).

GateError
 ├── ServerError   a model server was unreachable or answered outside the OpenAI format
 └── GoldenError   a golden file is missing, unreadable or of another format version
"""

from __future__ import annotations


class GateError(Exception):
    """Base of the gates' errors."""


class ServerError(GateError):
    """A model server did not answer as an OpenAI-compatible server should."""


class GoldenError(GateError):
    """A golden file cannot be used."""

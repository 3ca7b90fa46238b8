"""The UI tests use the session's Prefect server (tests/conftest.py), shared with the
relay tests."""

from __future__ import annotations

# The model servers the pictures measure, and the golden the parity picture compares with.
from tests.gates.conftest import clef_golden, model_server  # noqa: F401

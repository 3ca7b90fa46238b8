"""The relay's settings: where specs and state live, and the limits that bound each delivery.

Light to import (pydantic only): the command line builds its options from it.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_BODY_BYTES = 5 * 1024 * 1024

# The limits a command-line option sets, each the field of the same name (`_s` dropped).
LIMITS = (
    "max_body_bytes",
    "git_timeout_s",
    "max_mirrors",
    "max_mirror_bytes",
    "prefect_timeout_s",
    "max_deliveries",
    "header_timeout_s",
    "body_timeout_s",
    "keep_alive_s",
    "max_connections",
    "max_buffered_bytes",
    "keep_days",
    "max_records",
)


class RelaySettings(BaseModel):
    # An attribute's docstring is its description, and the `--help` of its option.
    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    secret: bytes
    specs_dir: Path  # inside repo_root
    repo_root: Path
    prefect_api_url: str
    state_dir: Path
    branch: str | None = None  # None: each repository's default branch
    max_body_bytes: int = MAX_BODY_BYTES
    """Larger bodies get 413."""
    # where merges are fetched from: this URL, else the payload's on these hosts (none: any)
    clone_url: str | None = None
    clone_hosts: frozenset[str] = frozenset()
    git_timeout_s: float = 60.0
    """Seconds for all the git work of a delivery."""
    max_mirrors: int = 4
    """Git mirrors kept (least recently used go)."""
    max_mirror_bytes: int = 1024 * 1024 * 1024
    """Bytes all git mirrors may take."""
    prefect_timeout_s: float = 10.0  # each phase of the call that emits the events
    """Seconds for Prefect to take the events."""
    max_deliveries: int = Field(default=4, ge=1, le=32)
    """Deliveries processed at once; more: 503."""
    # before the signature check (intake.py, server.py)
    header_timeout_s: float = 10.0
    """Seconds to send a request's headers."""
    body_timeout_s: float = 30.0
    """Seconds to send a body; later: 408."""
    keep_alive_s: float = 5.0
    """Seconds an idle connection stays open."""
    max_connections: int = 64
    """Open connections; more: 503."""
    max_buffered_bytes: int = 4 * MAX_BODY_BYTES  # 20 MiB
    """Bytes of all bodies held at once; more: 503."""
    # the replay guard's records (deliveries.py)
    keep_days: float = 30.0
    """Days a relayed delivery id is remembered."""
    max_records: int = 10_000
    """Delivery ids (and merges) remembered."""

    @model_validator(mode="after")
    def _budget_holds_a_body(self) -> RelaySettings:
        if self.max_buffered_bytes < self.max_body_bytes:
            raise ValueError(
                f"--max-buffered-bytes {self.max_buffered_bytes} is below --max-body-bytes "
                f"{self.max_body_bytes}: no body could ever be taken; raise the first"
            )
        return self

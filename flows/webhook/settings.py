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
    "max_peer_connections",
    "max_buffered_bytes",
    "max_peer_buffered_bytes",
    "retry_for_s",
    "max_backoff_s",
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
    # the repository whose merges count (owner/name as the forge names it); a delivery
    # for another is refused
    repository: str | None = None
    # emit to a Prefect API that takes requests without authentication
    insecure_prefect: bool = False
    event_key_file: Path | None = None  # signs the merge events (event_signature.py)
    reconcile_on_start: bool = False  # ask for one reconcile pass once serving (catchup.py)
    git_timeout_s: float = 60.0
    """Seconds for all the git work of a delivery."""
    max_mirrors: int = 4
    """Git mirrors kept (least recently used go)."""
    max_mirror_bytes: int = 1024 * 1024 * 1024
    """Bytes all git mirrors may take."""
    prefect_timeout_s: float = 10.0  # each phase of the call that emits the events
    """Seconds for Prefect to take the events."""
    max_deliveries: int = Field(default=4, ge=1, le=32)
    """Deliveries (of different repositories) processed at once."""
    retry_for_s: float = 86400.0
    """Seconds a delivery is retried (Prefect, git) before it is refused."""
    max_backoff_s: float = 60.0
    """Seconds between two attempts of a delivery, at most."""
    # before the signature check (intake.py, server.py)
    header_timeout_s: float = 10.0
    """Seconds to send a request's headers."""
    body_timeout_s: float = 30.0
    """Seconds to send a body; later: 408."""
    keep_alive_s: float = 5.0
    """Seconds an idle connection stays open."""
    max_connections: int = 64
    """Open connections; more: 503."""
    max_peer_connections: int = 8
    """Open connections from one address; more: 503."""
    max_buffered_bytes: int = 4 * MAX_BODY_BYTES  # 20 MiB
    """Bytes of all bodies received and not yet stored; more: 503."""
    max_peer_buffered_bytes: int = MAX_BODY_BYTES + 1024 * 1024
    """Bytes of bodies received from one address and not yet stored; more: 503."""
    # the store's records (deliveries.py)
    keep_days: float = 30.0
    """Days a final delivery's outcome is kept."""
    max_records: int = 10_000
    """Final deliveries kept, and queued ones at most (more: 503)."""

    @model_validator(mode="after")
    def _budget_holds_a_body(self) -> RelaySettings:
        for name in ("max_buffered_bytes", "max_peer_buffered_bytes"):
            if getattr(self, name) < self.max_body_bytes:
                flag = "--" + name.replace("_", "-")
                raise ValueError(
                    f"{flag} {getattr(self, name)} is below --max-body-bytes "
                    f"{self.max_body_bytes}: no body could ever be taken; raise the first"
                )
        return self

"""A fresh Prefect server starts from a database migrated once per Prefect version
(sandbox/prefect_server.py): the copy is what the server would have made itself."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from sandbox import prefect_server
from tests.webhook.servers import PrefectServer


def _revision(database: Path, *, live: bool = False) -> list[tuple[str]]:
    """Its alembic revision; read without writing beside it (a live server's: read-only)."""
    mode = "mode=ro" if live else "immutable=1"
    with closing(sqlite3.connect(f"file:{database}?{mode}", uri=True)) as db:
        return db.execute("SELECT version_num FROM alembic_version").fetchall()


def test_the_schema_made_once_is_the_one_a_started_server_runs_on(prefect: PrefectServer) -> None:
    served = prefect.home / prefect_server.DATABASE
    if not served.is_file():
        pytest.skip("the suite attached a Prefect server it did not start")
    template = prefect_server.schema_template()
    assert prefect_server.schema_template() == template  # made once, then reused
    # The server migrates to its head at start: had the copy been behind, the two differ.
    assert _revision(template) == _revision(served, live=True) != []

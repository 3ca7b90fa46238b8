"""The relay's replay guard: deliveries and merges already relayed, in a SQLite file.

A forge redelivers on timeouts and people press "redeliver"; an attacker may replay
a captured, correctly signed body. Each delivery id is claimed once (INSERT OR
IGNORE is atomic across threads and processes), and each (spec, merge commit) is
relayed once, so a push and a pull_request event for the same merge start one
handoff. A claim is released when the event could not be emitted, so the forge's
retry goes through. Entries older than KEEP_DAYS are pruned.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

KEEP_DAYS = 30
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS deliveries (id TEXT PRIMARY KEY, at REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS merges (key TEXT PRIMARY KEY, delivery TEXT NOT NULL, "
    "at REAL NOT NULL)",
)


class DeliveryLog:
    """`log.claim_delivery(id)` is True the first time only."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._db() as db:
            for statement in _SCHEMA:
                db.execute(statement)
            cutoff = time.time() - KEEP_DAYS * 86400
            db.execute("DELETE FROM deliveries WHERE at < ?", (cutoff,))
            db.execute("DELETE FROM merges WHERE at < ?", (cutoff,))

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        with closing(sqlite3.connect(self.path, timeout=10.0)) as db, db:
            yield db

    def claim_delivery(self, delivery_id: str) -> bool:
        with self._db() as db:
            cursor = db.execute(
                "INSERT OR IGNORE INTO deliveries (id, at) VALUES (?, ?)",
                (delivery_id, time.time()),
            )
            return cursor.rowcount == 1

    def claim_merge(self, key: str, delivery_id: str) -> str | None:
        """None when claimed now; else the delivery that relayed this merge before."""
        with self._db() as db:
            cursor = db.execute(
                "INSERT OR IGNORE INTO merges (key, delivery, at) VALUES (?, ?, ?)",
                (key, delivery_id, time.time()),
            )
            if cursor.rowcount == 1:
                return None
            row = db.execute("SELECT delivery FROM merges WHERE key = ?", (key,)).fetchone()
            return str(row[0]) if row else None

    def release(self, delivery_id: str) -> None:
        """Forget a delivery and the merges it claimed (its events were not emitted)."""
        with self._db() as db:
            db.execute("DELETE FROM deliveries WHERE id = ?", (delivery_id,))
            db.execute("DELETE FROM merges WHERE delivery = ?", (delivery_id,))

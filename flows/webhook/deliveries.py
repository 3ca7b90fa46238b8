"""The relay's replay guard: deliveries and merges already relayed, in a SQLite file.

A forge redelivers on timeouts and people press "redeliver"; an attacker may replay
a captured, correctly signed body. A delivery id is claimed (pending) when its
processing starts and counts as seen only once its outcome is final (its events
emitted, or no handoff affected): any failure releases it, so the forge's retry is
processed. While it is pending, another attempt with the same id is told to come back
(the relay answers 503), never that it was relayed. Each (spec, merge commit) is
relayed once, so a push and a pull_request event for the same merge start one
handoff; its claim follows its delivery's (pending, done, released).

A state directory belongs to one relay: pending claims left by a relay that died are
cleared when it starts, and a claim pending longer than `lease_s` (the relay bounds its
own work well below that) is taken over. Records are pruned as they are written: those
older than `keep_days`, and the oldest beyond `max_records` of each kind.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

KEEP_DAYS = 30
MAX_RECORDS = 10_000
LEASE_S = 900.0
_TABLES = {
    "deliveries": "id TEXT PRIMARY KEY, at REAL NOT NULL",
    "merges": "key TEXT PRIMARY KEY, delivery TEXT NOT NULL, at REAL NOT NULL",
}
Claim = Literal["new", "done", "busy"]


class MergeInFlight(RuntimeError):
    """Another delivery of the same merge is being processed right now."""


class DeliveryLog:
    """`begin(id)` is "new" the first time, "done" once finished, "busy" while pending."""

    def __init__(
        self,
        path: Path,
        *,
        keep_days: float = KEEP_DAYS,
        max_records: int = MAX_RECORDS,
        lease_s: float = LEASE_S,
    ) -> None:
        self.path, self.keep_s, self.max_records, self.lease_s = (
            path,
            keep_days * 86400,
            max_records,
            lease_s,
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._tx() as db:
            for table, columns in _TABLES.items():
                db.execute(f"CREATE TABLE IF NOT EXISTS {table} ({columns})")
                have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
                if "state" not in have:  # a log written before claims had states
                    db.execute(f"ALTER TABLE {table} ADD COLUMN state TEXT NOT NULL DEFAULT 'done'")
                db.execute(f"CREATE INDEX IF NOT EXISTS {table}_at ON {table} (state, at)")
                db.execute(f"DELETE FROM {table} WHERE state = 'pending'")
            self._prune(db)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at once (BEGIN IMMEDIATE): check-then-set is atomic
        across threads and processes."""
        db = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        finally:
            db.close()

    def begin(self, delivery_id: str) -> Claim:
        now = time.time()
        with self._tx() as db:
            row = db.execute(
                "SELECT state, at FROM deliveries WHERE id = ?", (delivery_id,)
            ).fetchone()
            if row is None:
                db.execute(
                    "INSERT INTO deliveries (id, at, state) VALUES (?, ?, 'pending')",
                    (delivery_id, now),
                )
                return "new"
            if row[0] == "done":
                return "done"
            if now - row[1] < self.lease_s:
                return "busy"
            db.execute("UPDATE deliveries SET at = ? WHERE id = ?", (now, delivery_id))
            return "new"

    def claim_merge(self, key: str, delivery_id: str) -> str | None:
        """None when this delivery holds the merge now; else the delivery that relayed it.
        MergeInFlight while another delivery of it is pending."""
        now = time.time()
        with self._tx() as db:
            row = db.execute(
                "SELECT m.delivery, m.state, d.state, d.at FROM merges m "
                "LEFT JOIN deliveries d ON d.id = m.delivery WHERE m.key = ?",
                (key,),
            ).fetchone()
            if row is None:
                db.execute(
                    "INSERT INTO merges (key, delivery, at, state) VALUES (?, ?, ?, 'pending')",
                    (key, delivery_id, now),
                )
                return None
            holder, state, holder_state, holder_at = row
            if holder == delivery_id:
                return None
            if state == "done":
                return str(holder)
            if holder_state == "pending" and now - holder_at < self.lease_s:
                raise MergeInFlight(f"merge {key} is being relayed by delivery {holder}")
            db.execute(
                "UPDATE merges SET delivery = ?, at = ? WHERE key = ?", (delivery_id, now, key)
            )
            return None

    def finish(self, delivery_id: str) -> None:
        """The delivery's outcome is final: it and the merges it claimed count as seen."""
        now = time.time()
        with self._tx() as db:
            db.execute(
                "UPDATE deliveries SET state = 'done', at = ? WHERE id = ?", (now, delivery_id)
            )
            db.execute(
                "UPDATE merges SET state = 'done', at = ? WHERE delivery = ?", (now, delivery_id)
            )
            self._prune(db)

    def release(self, delivery_id: str) -> None:
        """Forget a pending delivery and the merges it claimed (it did not finish)."""
        with self._tx() as db:
            db.execute("DELETE FROM deliveries WHERE id = ? AND state = 'pending'", (delivery_id,))
            db.execute(
                "DELETE FROM merges WHERE delivery = ? AND state = 'pending'", (delivery_id,)
            )

    def _prune(self, db: sqlite3.Connection) -> None:
        cutoff = time.time() - self.keep_s
        for table in _TABLES:
            db.execute(f"DELETE FROM {table} WHERE state = 'done' AND at < ?", (cutoff,))
            db.execute(
                f"DELETE FROM {table} WHERE state = 'done' AND at <= (SELECT at FROM {table} "
                "WHERE state = 'done' ORDER BY at DESC LIMIT 1 OFFSET ?)",
                (self.max_records,),
            )

    def count(self) -> dict[str, int]:
        """Records per table (for the relay's own checks and tests)."""
        with self._tx() as db:
            return {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in _TABLES}

"""The relay's store: its inbox of verified deliveries and the merges it has handed to Prefect.

One SQLite file in WAL mode, written with `synchronous=FULL`, so a delivery the relay
has answered 202 for is on disk before the forge hears so. Each write is one immediate
transaction: check-then-set is atomic across the relay's threads.

- deliveries: the verified body and headers, queued until the worker gives them a final
  outcome (`emitted`, `no-handoff`, `ignored`, `refused`), with the attempts, the next
  attempt's time and the last error meanwhile. A final delivery keeps its outcome (the
  body is dropped); final ones are pruned after `keep_days` and beyond `max_records`.
  A redelivery of a final id is a replay, except after `refused`: that one is queued
  again (what refused it may have been fixed).
- merges: one row per (spec, merge commit), written as an intent holding the exact event
  before it is emitted and marked emitted after Prefect took it. A merge is emitted once
  however often it is delivered; a relay that died between emit and mark re-emits the
  same event (same id), which Prefect stores once. Never pruned: a forge can redeliver
  a merge at any time.

A store belongs to one relay process: its worker keeps in memory which repositories it
is working on, so two relays on one store could work one repository's deliveries at
once (never emitting a merge twice, but out of order).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

KEEP_DAYS = 30
MAX_RECORDS = 10_000
FINAL = ("emitted", "no-handoff", "ignored", "refused")
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS inbox (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    " id TEXT NOT NULL UNIQUE, repository TEXT NOT NULL, received REAL NOT NULL,"
    " headers TEXT, body BLOB, state TEXT NOT NULL, outcome TEXT, detail TEXT NOT NULL,"
    " handoffs TEXT NOT NULL DEFAULT '[]', events TEXT NOT NULL DEFAULT '[]',"
    " attempts INTEGER NOT NULL DEFAULT 0, next_at REAL NOT NULL, finished REAL)",
    "CREATE INDEX IF NOT EXISTS inbox_queue ON inbox (state, repository, seq)",
    "CREATE TABLE IF NOT EXISTS emits (key TEXT PRIMARY KEY, delivery TEXT NOT NULL,"
    " event TEXT NOT NULL, state TEXT NOT NULL, at REAL NOT NULL)",
)
Accepted = Literal["queued", "queued-before", "final-before", "full"]


class Delivery(BaseModel):
    """What the store knows of a delivery (its body only while queued)."""

    id: str
    repository: str
    state: Literal["queued", "final"]
    outcome: str | None
    detail: str
    handoffs: list[str]
    events: list[str]
    attempts: int
    received: float
    next_at: float
    finished: float | None

    def public(self) -> dict[str, Any]:
        return {"delivery": self.id, **self.model_dump(exclude={"id"})}


class Queued(BaseModel):
    """A queued delivery as the worker takes it."""

    id: str
    repository: str
    headers: dict[str, str]
    body: bytes
    attempts: int
    received: float


class Emits(BaseModel):
    """What (spec, merge) intents decide: the events to send now (new intents, and
    intents of a relay that died before marking them) and the ones sent before."""

    to_send: list[dict[str, Any]]
    keys: list[str]
    earlier: dict[str, str]  # spec key → the delivery that emitted it


class DeliveryStore:
    def __init__(
        self, path: Path, *, keep_days: float = KEEP_DAYS, max_records: int = MAX_RECORDS
    ) -> None:
        self.path, self.keep_s, self.max_records = path, keep_days * 86400, max_records
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, timeout=30.0, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
        finally:
            db.close()
        with self._tx() as db:
            for statement in _SCHEMA:
                db.execute(statement)
            if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'merges'").fetchone():
                # the replay guard of earlier versions: its relayed merges stay relayed
                db.execute(
                    "INSERT OR IGNORE INTO emits SELECT key, delivery, '{}', 'emitted', at"
                    " FROM merges WHERE state = 'done'"
                )
                db.execute("DROP TABLE merges")
                db.execute("DROP TABLE IF EXISTS deliveries")

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        try:
            db.execute("PRAGMA synchronous=FULL")
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        finally:
            db.close()

    # intake

    def accept(
        self, delivery_id: str, repository: str, headers: dict[str, str], body: bytes
    ) -> tuple[Accepted, Delivery | None]:
        """Queue a verified delivery (durably); what was known of its id, if anything."""
        now = time.time()
        with self._tx() as db:
            row = db.execute("SELECT * FROM inbox WHERE id = ?", (delivery_id,)).fetchone()
            if row is not None:
                known = _delivery(db, row)
                if known.state == "queued":
                    return "queued-before", known
                if known.outcome != "refused":
                    return "final-before", known
                db.execute("DELETE FROM inbox WHERE id = ?", (delivery_id,))
            queued = db.execute("SELECT count(*) FROM inbox WHERE state = 'queued'").fetchone()
            if queued[0] >= self.max_records:
                return "full", None
            db.execute(
                "INSERT INTO inbox (id, repository, received, headers, body, state, detail,"
                " next_at) VALUES (?, ?, ?, ?, ?, 'queued', 'accepted, not yet processed', ?)",
                (delivery_id, repository, now, json.dumps(headers), body, now),
            )
            return "queued", None

    def record_final(self, delivery_id: str, repository: str, outcome: str, detail: str) -> bool:
        """Record a delivery final at once (nothing to do); False when its id is known."""
        now = time.time()
        with self._tx() as db:
            if db.execute("SELECT 1 FROM inbox WHERE id = ?", (delivery_id,)).fetchone():
                return False
            db.execute(
                "INSERT INTO inbox (id, repository, received, state, outcome, detail, next_at,"
                " finished) VALUES (?, ?, ?, 'final', ?, ?, ?, ?)",
                (delivery_id, repository, now, outcome, detail, now, now),
            )
            self._prune(db)
            return True

    def get(self, delivery_id: str) -> Delivery | None:
        with self._tx() as db:
            row = db.execute("SELECT * FROM inbox WHERE id = ?", (delivery_id,)).fetchone()
            return None if row is None else _delivery(db, row)

    def recent(self, limit: int = 50) -> list[Delivery]:
        """The newest deliveries first."""
        with self._tx() as db:
            rows = db.execute("SELECT * FROM inbox ORDER BY seq DESC LIMIT ?", (limit,)).fetchall()
            return [_delivery(db, row) for row in rows]

    # the worker

    def next_due(self, busy: set[str]) -> Queued | None:
        """The earliest-received queued delivery whose time has come, of a repository not
        in busy (one delivery of a repository at a time, taken in the order received; one
        waiting for its next attempt does not hold back the others)."""
        with self._tx() as db:
            due = db.execute(
                "SELECT id, repository FROM inbox WHERE state = 'queued' AND next_at <= ?"
                " ORDER BY seq",
                (time.time(),),
            ).fetchall()
            chosen = next((id_ for id_, repository in due if repository not in busy), None)
            if chosen is None:
                return None
            id_, repository, headers, body, attempts, received = db.execute(
                "SELECT id, repository, headers, body, attempts, received FROM inbox WHERE id = ?",
                (chosen,),
            ).fetchone()
        return Queued(
            id=id_,
            repository=repository,
            headers=json.loads(headers),
            body=body,
            attempts=attempts,
            received=received,
        )

    def seconds_to_next(self) -> float | None:
        with self._tx() as db:
            row = db.execute("SELECT min(next_at) FROM inbox WHERE state = 'queued'").fetchone()
        return None if row[0] is None else max(0.0, row[0] - time.time())

    def retry_later(self, delivery_id: str, detail: str, delay_s: float) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE inbox SET attempts = attempts + 1, next_at = ?, detail = ?"
                " WHERE id = ? AND state = 'queued'",
                (time.time() + delay_s, detail, delivery_id),
            )

    def finish(
        self,
        delivery_id: str,
        outcome: str,
        detail: str,
        *,
        handoffs: list[str] | None = None,
        events: list[str] | None = None,
    ) -> None:
        assert outcome in FINAL, outcome
        now = time.time()
        with self._tx() as db:
            db.execute(
                "UPDATE inbox SET state = 'final', outcome = ?, detail = ?, handoffs = ?,"
                " events = ?, attempts = attempts + 1, finished = ?, headers = NULL,"
                " body = NULL WHERE id = ?",
                (
                    outcome,
                    detail,
                    json.dumps(handoffs or []),
                    json.dumps(events or []),
                    now,
                    delivery_id,
                ),
            )
            self._prune(db)

    # exactly once per (spec, merge)

    def intend(self, delivery_id: str, events: dict[str, dict[str, Any]]) -> Emits:
        """Record the intent to emit each keyed event unless its key was emitted before.
        An intent left by an earlier attempt is sent again as it was recorded."""
        now = time.time()
        to_send: list[dict[str, Any]] = []
        keys: list[str] = []
        earlier: dict[str, str] = {}
        with self._tx() as db:
            for key, event in events.items():
                row = db.execute(
                    "SELECT delivery, event, state FROM emits WHERE key = ?", (key,)
                ).fetchone()
                if row is None:
                    db.execute(
                        "INSERT INTO emits (key, delivery, event, state, at)"
                        " VALUES (?, ?, ?, 'intent', ?)",
                        (key, delivery_id, json.dumps(event), now),
                    )
                    to_send.append(event)
                    keys.append(key)
                elif row[2] == "intent":
                    to_send.append(json.loads(row[1]))
                    keys.append(key)
                else:
                    earlier[key] = str(row[0])
        return Emits(to_send=to_send, keys=keys, earlier=earlier)

    def emitted(self, keys: list[str]) -> None:
        with self._tx() as db:
            db.executemany(
                "UPDATE emits SET state = 'emitted', at = ? WHERE key = ?",
                [(time.time(), key) for key in keys],
            )

    def count(self) -> dict[str, int]:
        """Rows per table (for the relay's own checks and tests)."""
        with self._tx() as db:
            return {
                table: db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                for table in ("inbox", "emits")
            }

    def _prune(self, db: sqlite3.Connection) -> None:
        """Final deliveries older than keep_days, and beyond max_records; never merges."""
        db.execute(
            "DELETE FROM inbox WHERE state = 'final' AND finished < ?",
            (time.time() - self.keep_s,),
        )
        db.execute(
            "DELETE FROM inbox WHERE state = 'final' AND seq <= (SELECT seq FROM inbox"
            " WHERE state = 'final' ORDER BY seq DESC LIMIT 1 OFFSET ?)",
            (self.max_records,),
        )


def _delivery(db: sqlite3.Connection, row: tuple[Any, ...]) -> Delivery:
    names = [c[0] for c in db.execute("SELECT * FROM inbox LIMIT 0").description]
    raw = dict(zip(names, row, strict=True))
    return Delivery(
        id=raw["id"],
        repository=raw["repository"],
        state=raw["state"],
        outcome=raw["outcome"],
        detail=raw["detail"],
        handoffs=json.loads(raw["handoffs"]),
        events=json.loads(raw["events"]),
        attempts=raw["attempts"],
        received=raw["received"],
        next_at=raw["next_at"],
        finished=raw["finished"],
    )

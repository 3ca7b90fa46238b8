"""The relay's bare git mirrors under its state directory: one per repository URL, one
delivery at a time in each, and a bounded number and size in all.

After each use the least recently used mirrors beyond `max_count`, or beyond
`max_bytes` in all, are deleted (a mirror in use is never deleted; a deleted one is
simply fetched again in full the next time). The mirror just used is deleted too when
it alone is larger than `max_bytes`, so the disk they take stays near the cap.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger("handoff.webhook")


class MirrorBusy(TimeoutError):
    """The mirror stayed locked by another delivery past this one's deadline."""


def _size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            # a file may go meanwhile (git's own temporary files)
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


class MirrorPool:
    def __init__(self, root: Path, *, max_count: int, max_bytes: int) -> None:
        self.root, self.max_count, self.max_bytes = root, max_count, max_bytes
        self._locks: dict[Path, threading.Lock] = {}
        self._guard = threading.Lock()

    def path_for(self, url: str) -> Path:
        """A short, safe directory name per URL (readable tail, hash for uniqueness)."""
        tail = re.sub(r"[^A-Za-z0-9._-]", "_", url.rstrip("/").rsplit("/", 1)[-1])[-40:]
        digest = hashlib.sha256(url.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        return self.root / f"{tail}-{digest}.git"

    def _lock(self, path: Path) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(path, threading.Lock())

    @contextmanager
    def use(self, url: str, *, deadline: float) -> Iterator[Path]:
        """The mirror's path, held for this delivery alone; pruned after."""
        path = self.path_for(url)
        lock = self._lock(path)
        if not lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise MirrorBusy(f"mirror {path.name} is busy with another delivery")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            if path.exists():
                os.utime(path)  # the LRU order is the directories' mtimes
            yield path
        finally:
            try:
                self._prune(path)
            finally:
                lock.release()

    def _prune(self, current: Path) -> None:
        mirrors = sorted(
            (p for p in self.root.glob("*.git") if p.is_dir()),
            key=lambda p: (p != current, -p.stat().st_mtime),
        )
        kept, total = 0, 0
        for path in mirrors:
            size = _size(path)
            if kept < self.max_count and total + size <= self.max_bytes:
                kept, total = kept + 1, total + size
                continue
            lock = self._lock(path)
            if path != current and not lock.acquire(blocking=False):
                continue  # in use by another delivery: its own prune will see it
            try:
                log.info(
                    "mirror %s pruned (%d bytes; cap %d mirrors, %d bytes)",
                    *(path.name, size, self.max_count, self.max_bytes),
                )
                shutil.rmtree(path, ignore_errors=True)
                with self._guard:
                    self._locks.pop(path, None)
            finally:
                if path != current:
                    lock.release()

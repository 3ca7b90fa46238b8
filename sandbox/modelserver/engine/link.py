"""The server's side of the compute process: start it, send it work, apply its results.

Results are applied by a reader thread under the engine's lock. Nothing is ever sent while
that lock is held, so a full pipe in one direction cannot deadlock the other.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import sys
import threading
from concurrent.futures import Future
from typing import Any

from sandbox.modelserver.engine.messages import (
    Abort,
    Command,
    Grant,
    Prefilled,
    Readout,
    ReadoutDone,
    Ready,
    Result,
    Stop,
    Submit,
)
from sandbox.modelserver.engine.priority import RESULTS_PRIORITY, use_realtime
from sandbox.modelserver.engine.sequence import Sequence
from sandbox.modelserver.engine.worker import worker_main
from sandbox.modelserver.lm.model import ModelSpec

GRANT = 64  # tokens the compute process may run ahead of what has been sent
REGRANT_BELOW = 32  # top the grant up when less than this is left
STARTUP_TIMEOUT_S = 60.0
ENGINE_DEAD_EXIT_CODE = 3


class ComputeLink:
    def __init__(self, spec: ModelSpec, cond: threading.Condition, *, realtime: bool) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=worker_main, args=(child, spec, realtime), daemon=True)
        self._cond = cond
        self._realtime = realtime
        self._seqs: dict[int, Sequence] = {}  # guarded by `cond`
        self._readouts: dict[int, Future[dict[str, Any]]] = {}  # guarded by `cond`
        self._readout_ids = itertools.count()
        self._stopping = False
        self._send_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="modelserver-results", daemon=True)

    def start(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Start the compute process and wait until its model is built."""
        self._proc.start()
        if not self._conn.poll(timeout_s) or not isinstance(self._conn.recv(), Ready):
            self._proc.kill()
            raise RuntimeError(
                f"the compute process did not report ready within {timeout_s} s (exit code "
                f"{self._proc.exitcode}); see its traceback above"
            )
        self._reader.start()

    def stop(self) -> None:
        self._stopping = True
        with contextlib.suppress(BrokenPipeError, OSError):  # already gone
            self._send(Stop())
        self._proc.join(timeout=5)
        if self._proc.is_alive():
            self._proc.kill()

    def submit(self, seq: Sequence) -> None:
        with self._cond:
            self._seqs[seq.id] = seq
        self._send(Submit(seq.id, seq.request, seq.granted))

    def abort(self, seq: Sequence) -> None:
        with self._cond:
            self._seqs.pop(seq.id, None)
        self._send(Abort(seq.id))

    def readout(self, kind: str, tokens: list[int]) -> Future[dict[str, Any]]:
        """Run a read-out ("probes" or "heads") in the compute process."""
        future: Future[dict[str, Any]] = Future()
        with self._cond:
            request_id = next(self._readout_ids)
            self._readouts[request_id] = future
        self._send(Readout(request_id, kind, tuple(tokens)))
        return future

    def top_up(self, seq: Sequence) -> Grant | None:
        """Under the lock: extend the grant of a sequence whose lead runs short (send later)."""
        if seq.compute_finished or seq.granted - seq.emitted >= REGRANT_BELOW:
            return None
        seq.granted += GRANT
        return Grant(seq.id, GRANT)

    def send_grants(self, grants: list[Grant]) -> None:
        for grant in grants:
            self._send(grant)

    def _send(self, command: Command) -> None:
        with self._send_lock:
            self._conn.send(command)

    def _read(self) -> None:
        if self._realtime:
            use_realtime(RESULTS_PRIORITY)
        try:
            while True:
                result: Result = self._conn.recv()
                with self._cond:
                    self._apply(result)
                    self._cond.notify_all()
        except (EOFError, OSError):
            if not self._stopping:
                self._die()

    def _die(self) -> None:
        """Without its compute process the server can only hang: exit so it is restarted
        (as vLLM does when its engine core dies)."""
        self._proc.join(timeout=1)
        sys.stderr.write(
            f"modelserver: the compute process exited unexpectedly (exit code "
            f"{self._proc.exitcode}); stopping the server\n"
        )
        sys.stderr.flush()
        os._exit(ENGINE_DEAD_EXIT_CODE)

    def _apply(self, result: Result) -> None:
        if isinstance(result, Ready):  # sent once, before any work, and read by the start
            return
        if isinstance(result, ReadoutDone):
            self._readouts.pop(result.request_id).set_result(result.value)
            return
        if isinstance(result, Prefilled):
            seq = self._seqs.get(result.seq_id)
            if seq is not None:
                seq.prompt_logprobs = result.prompt_logprobs
                seq.prefilled = True
                if seq.request.max_tokens == 0:
                    seq.compute_finished = True
                    del self._seqs[result.seq_id]
            return
        for seq_id, token, last in result.tokens:
            seq = self._seqs.get(seq_id)
            if seq is not None:
                seq.ready.append(token)
                seq.compute_finished = last
                if last:
                    del self._seqs[seq_id]

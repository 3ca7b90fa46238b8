"""The compute process: the model runs here, ahead of the clock, in batches.

Kept out of the server process so that its long stretches of numpy work never hold the GIL
the pacing threads need (probes and classifier heads run here too, for the same reason).
Each sequence is prefilled when it arrives and decoded as far as the server has granted;
every sequence with grant left advances in one batched decode per round. The process
ignores SIGTERM (the server drains first) and exits when its pipe closes.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

import numpy as np

from sandbox.modelserver.engine.messages import (
    Abort,
    Command,
    Computed,
    Grant,
    Prefilled,
    Readout,
    ReadoutDone,
    Ready,
    Stop,
    Submit,
)
from sandbox.modelserver.engine.priority import COMPUTE_PRIORITY, use_realtime
from sandbox.modelserver.engine.sequence import GenRequest, is_last
from sandbox.modelserver.lm.blas import single_threaded_blas
from sandbox.modelserver.lm.model import ModelSpec, SeqState, TinyLM
from sandbox.modelserver.lm.readouts import READOUTS
from sandbox.modelserver.lm.sampling import TokenOut, choose_from, log_softmax, score, top_k

PREFILL_CHUNK = 8


@dataclass
class _Job:
    request: GenRequest
    granted: int
    rng: np.random.Generator = field(init=False)
    state: SeqState | None = None
    tail: int = 0
    computed: int = 0
    finished: bool = False

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.request.seed)

    @property
    def can_decode(self) -> bool:
        return self.state is not None and not self.finished and self.computed < self.granted


def worker_main(conn: Connection, spec: ModelSpec, realtime: bool) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    single_threaded_blas()
    model = spec.build()
    if realtime:  # after the build: its CPU burst at RT priority would stall other servers
        use_realtime(COMPUTE_PRIORITY)
    conn.send(Ready())
    Worker(conn, model).run()


class Worker:
    def __init__(self, conn: Connection, model: TinyLM) -> None:
        self.conn = conn
        self.model = model
        self.jobs: dict[int, _Job] = {}

    def run(self) -> None:
        try:
            while self._receive(block=not self._has_work()):
                self._prefill_arrivals()
                self._decode_round()
        except (EOFError, BrokenPipeError):
            pass  # the server is gone

    def _has_work(self) -> bool:
        return any(job.state is None or job.can_decode for job in self.jobs.values())

    def _receive(self, *, block: bool) -> bool:
        """Apply every pending command (waiting for one if idle); False on Stop."""
        while block or self.conn.poll():
            block = False
            if not self._apply(self.conn.recv()):
                return False
        return True

    def _apply(self, command: Command) -> bool:
        if isinstance(command, Submit):
            self.jobs[command.seq_id] = _Job(command.request, command.grant)
        elif isinstance(command, Grant) and command.seq_id in self.jobs:
            self.jobs[command.seq_id].granted += command.tokens
        elif isinstance(command, Abort):
            self.jobs.pop(command.seq_id, None)
        elif isinstance(command, Readout):
            value = READOUTS[command.kind](self.model, list(command.tokens))
            self.conn.send(ReadoutDone(command.request_id, value))
        return not isinstance(command, Stop)

    def _prefill_arrivals(self) -> None:
        """Prefill every newly arrived sequence in arrival order, PREFILL_CHUNK at a time so
        the first arrivals get their first token without waiting for the whole burst.
        Prompts scored for echo run over every position; the rest over last ones only."""
        arrived = [i for i, job in self.jobs.items() if job.state is None]
        for start in range(0, len(arrived), PREFILL_CHUNK):
            chunk = arrived[start : start + PREFILL_CHUNK]
            scoring = [i for i in chunk if self.jobs[i].request.prompt_logprobs is not None]
            self._prefill(scoring, every=True)
            self._prefill([i for i in chunk if i not in scoring], every=False)

    def _prefill(self, ids: list[int], *, every: bool) -> None:
        """Prefill sequences `ids` together; send each one's first token."""
        if not ids:
            return
        prompts = [list(self.jobs[i].request.prompt) for i in ids]
        results = self.model.prefill_batch(prompts, every=every)
        firsts = []
        for seq_id, result in zip(ids, results, strict=True):
            job = self.jobs[seq_id]
            job.state = result.state
            self.conn.send(Prefilled(seq_id, _prompt_logprobs(job.request, result.logits)))
            if job.request.max_tokens == 0:
                self._retire(seq_id)
            else:
                firsts.append(self._record(seq_id, _pick(job, log_softmax(result.logits[-1]))))
        self.conn.send(Computed(firsts))

    def _decode_round(self) -> None:
        ids = [i for i, job in self.jobs.items() if job.can_decode]
        if not ids:
            return
        jobs = [self.jobs[i] for i in ids]
        logits = self.model.decode(
            [j.state for j in jobs if j.state is not None], [j.tail for j in jobs]
        )
        rows = log_softmax(logits)
        out = [self._record(i, _pick(self.jobs[i], row)) for i, row in zip(ids, rows, strict=True)]
        self.conn.send(Computed(out))

    def _record(self, seq_id: int, token: TokenOut) -> tuple[int, TokenOut, bool]:
        job = self.jobs[seq_id]
        job.computed += 1
        job.tail = token.token_id
        last = is_last(job.request, token, job.computed) is not None
        if last:
            self._retire(seq_id)
        return seq_id, token, last

    def _retire(self, seq_id: int) -> None:
        self.jobs.pop(seq_id, None)


def _pick(job: _Job, logprobs: np.ndarray) -> TokenOut:
    """The next token: the known answer's while it lasts (scored by the model like any
    token), else the model's own choice."""
    answer, params = job.request.answer, job.request.sampling
    if answer is not None and job.computed < len(answer):
        token = answer[job.computed]
        return TokenOut(token, float(logprobs[token]), top_k(logprobs, params.top_logprobs))
    return choose_from(logprobs, params, job.rng)


def _prompt_logprobs(request: GenRequest, logits: np.ndarray) -> list[TokenOut | None] | None:
    """Teacher forcing: each prompt token scored by the logits of the position before it."""
    if request.prompt_logprobs is None:
        return None
    k, prompt = request.prompt_logprobs, request.prompt
    return [None] + [score(logits[i - 1], prompt[i], k) for i in range(1, len(prompt))]

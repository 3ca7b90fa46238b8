"""The server's own record of when it sent every token, one JSON line per finished request.

Times are `time.monotonic_ns()`: CLOCK_MONOTONIC on Linux, the same clock as a client's
`time.perf_counter_ns()`, so both sides' stamps can be subtracted. A token's stamp is taken
just before its bytes are handed to the transport.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel


class RequestTiming(BaseModel):
    id: str
    t_recv_ns: int
    token_times_ns: list[int]
    n_prompt: int
    n_out: int
    finish_reason: str | None
    stream: bool


class GroundTruth:
    def __init__(self, path: Path | None) -> None:
        self._file = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("a", encoding="utf-8", buffering=1)

    def record(self, timing: RequestTiming) -> None:
        if self._file is not None:
            self._file.write(json.dumps(timing.model_dump(), separators=(",", ":")) + "\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def read_ground_truth(path: Path) -> list[RequestTiming]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [RequestTiming.model_validate_json(line) for line in lines if line.strip()]

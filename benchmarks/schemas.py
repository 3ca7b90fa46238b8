"""The records the benchmarks write with `--record` and benchmarks/tables.py renders."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError

from benchmarks.record import Frozen, Provenance


class AccuracyLevel(Frozen):
    """One transport at one concurrency: errors client − server in ms."""

    transport: Literal["httpx", "native"]
    streams: int
    requests: int
    matched: int = Field(description="requests whose tokens matched the server's send times")
    failed: int
    ttft_mean: float | None
    ttft_p99: float | None
    gap_p99: float | None
    tpot_p99: float | None
    lag_p50: float | None
    lag_p99: float | None
    srv_p99: float | None = Field(description="the server's own lateness against its grid")
    queue_p99: float | None
    cpu_1k: float | None = Field(description="client CPU seconds per 1000 tokens")
    load_1m: float = Field(description="1-minute load average after the level")
    other_pct: float = Field(description="CPU of other processes during the level, % of all")


class ClientAccuracyRecord(Frozen):
    benchmark: Literal["client_accuracy"] = "client_accuracy"
    provenance: Provenance
    max_tokens: int
    pinned: bool = Field(description="server on CPU 1, client on CPU 2")
    levels: list[AccuracyLevel]


class PowerCell(Frozen):
    """The gate's decision replayed `trials` times at one budget, design and unit."""

    rounds: int = Field(description="most rounds a level may run")
    design: Literal["fixed", "sequential"]
    unit: Literal["round", "request"] = Field(description="what the bootstrap draws")
    trials: int
    false_alarms: int = Field(description="fails of the identical twin")
    detections: int = Field(description="fails of the slower server")
    rounds_used_twin: float
    rounds_used_slow: float
    seconds_per_level: float
    false_alarm_metrics: dict[str, int]
    twin_passes: int | None = Field(
        None, description="passes of the identical twin (the rest: no verdict); null: not counted"
    )
    slow_passes: int | None = Field(
        None, description="passes of the slower server (never wanted); null: not counted"
    )


class PowerLevel(Frozen):
    streams: int
    requests_per_round: int
    round_s: float = Field(description="mean seconds of one side's round")
    load_1m: float = Field(description="1-minute load average after measuring the level")
    cells: list[PowerCell]
    tpot_ms: dict[str, float] | None = Field(
        None, description="median TPOT of each side over every measured round; null: not kept"
    )
    ttft_ms: dict[str, float] | None = Field(
        None, description="median TTFT of each side over every measured round; null: not kept"
    )


class LatencyPowerRecord(Frozen):
    benchmark: Literal["latency_power"] = "latency_power"
    provenance: Provenance
    engine: Literal["simulator", "llamacpp"] = Field(
        "simulator", description="simulated servers (tests.gates.servers) or llama.cpp's"
    )
    profile: str = Field(description="the simulator's profile, or llama.cpp's model variant")
    slower_by: float = Field(
        0.1,
        description="the slow side: the simulator's every step this share longer; llama.cpp's "
        "every token waits this share of the work it took (ServerOptions.eval_stretch)",
    )
    threads: int | None = Field(None, description="llama.cpp threads per server")
    collect_rounds: int
    bursts: int = Field(description="bursty CPU hogs beside the servers while measuring")
    levels: list[PowerLevel]
    margins: dict[str, float] | None = Field(
        None, description="the gate's practical margins the decisions used; null: not kept"
    )


class StepLevel(Frozen):
    profile: str
    streams: int
    step_target_ms: float
    step_ms: float
    ttft_target_ms: float
    ttft_ms: float
    load_1m: float


class Jitter(Frozen):
    profile: str
    streams: int
    interval_ms: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    gaps: int
    load_1m: float


class ModelServerStepsRecord(Frozen):
    benchmark: Literal["modelserver_steps"] = "modelserver_steps"
    provenance: Provenance
    tokens: int
    levels: list[StepLevel]
    jitter: list[Jitter]


class ParityCase(Frozen):
    """One variant against its reference's golden, judged by the default tolerances."""

    name: str
    kind: Literal["benign", "harmful", "quantization"]
    reference: str = Field(description="the variant the golden was recorded from")
    verdict: str
    finding: str = Field(description="the first piece of evidence, or the reason")
    figures: dict[str, float | None] = Field(description="each check's figure, by name")
    seconds: float
    load_1m: float


class ParitySeparationRecord(Frozen):
    benchmark: Literal["parity_separation"] = "parity_separation"
    provenance: Provenance
    top_k: int
    long_context: bool
    cases: list[ParityCase]


Record = TypeVar("Record", bound=BaseModel)


def read(path: Path, schema: type[Record]) -> Record:
    """A committed record, or an error naming the file and what to do."""
    try:
        return schema.model_validate_json(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path}: no such record; write it with the benchmark's --record {path}"
        ) from None
    except ValidationError as error:
        raise ValueError(
            f"{path} is no {schema.__name__}: {error}; rerun the benchmark with --record"
        ) from None

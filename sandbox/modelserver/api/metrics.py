"""`/metrics` in Prometheus text format, in the dialect of the engine the server imitates.

``vllm``: vLLM's names (`vllm:num_requests_running` and `_waiting` gauges,
`vllm:request_success_total` by finished reason, `vllm:time_to_first_token_seconds` and
`vllm:time_per_output_token_seconds` histograms, all labelled `model_name`) and the HTTP
counter its instrumentator adds (`http_requests_total` by handler, method and grouped
status: "2xx", "4xx", "5xx"). ``llamacpp``: llama-server's `--metrics` names
(`llamacpp:requests_processing`, `llamacpp:requests_deferred`, token counters; llama.cpp
has no request or latency histograms). ``none``: no route, as candle-vllm.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

MetricsDialect = Literal["vllm", "llamacpp", "none"]

# vLLM's bucket bounds (vllm/engine/metrics.py).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0)  # fmt: skip
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)


@dataclass
class Histogram:
    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.bounds)

    def observe(self, value: float) -> None:
        i = bisect.bisect_left(self.bounds, value)
        if i < len(self.counts):
            self.counts[i] += 1
        self.total += value
        self.n += 1

    def lines(self, name: str, labels: str) -> list[str]:
        out, running = [], 0
        for bound, count in zip(self.bounds, self.counts, strict=True):
            running += count
            out.append(f'{name}_bucket{{le="{bound}",{labels}}} {float(running)}')
        out.append(f'{name}_bucket{{le="+Inf",{labels}}} {float(self.n)}')
        out.append(f"{name}_count{{{labels}}} {float(self.n)}")
        out.append(f"{name}_sum{{{labels}}} {self.total}")
        return out


@dataclass
class ServerMetrics:
    """What the server counts: generations waiting for their first token and running,
    finished ones by reason, HTTP answers by route and status class, token latencies."""

    waiting: int = 0
    running: int = 0
    finished: Counter[str] = field(default_factory=Counter)
    http: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    prompt_tokens: int = 0
    generated_tokens: int = 0
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    tpot: Histogram = field(default_factory=lambda: Histogram(TPOT_BUCKETS))

    def submitted(self, prompt_tokens: int) -> None:
        self.waiting += 1
        self.prompt_tokens += prompt_tokens

    def first_token(self, ttft_s: float) -> None:
        self.waiting -= 1
        self.running += 1
        self.ttft.observe(ttft_s)

    def ended(self, *, started: bool, reason: str, stamps_ns: list[int]) -> None:
        if started:
            self.running -= 1
        else:
            self.waiting -= 1
        self.finished[reason] += 1
        self.generated_tokens += len(stamps_ns)
        for a, b in itertools.pairwise(stamps_ns):
            self.tpot.observe((b - a) / 1e9)

    def answered(self, path: str, method: str, status: int) -> None:
        self.http[(path, method, f"{status // 100}xx")] += 1

    def render(self, dialect: MetricsDialect, model: str) -> bytes:
        lines = _vllm(self, model) if dialect == "vllm" else _llamacpp(self)
        return ("\n".join(lines) + "\n").encode()


def _family(name: str, kind: str, text: str, samples: list[tuple[str, float]]) -> list[str]:
    """One metric family: its HELP and TYPE lines, then (labels, value) samples."""
    out = [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
    return out + [f"{name}{{{lb}}} {float(v)}" if lb else f"{name} {float(v)}" for lb, v in samples]


def _vllm(m: ServerMetrics, model: str) -> list[str]:
    label = f'model_name="{model}"'
    reasons = ["stop", "length", "abort", *sorted(set(m.finished) - {"stop", "length", "abort"})]
    ttft, tpot = "vllm:time_to_first_token_seconds", "vllm:time_per_output_token_seconds"
    return [
        *_family(
            "vllm:num_requests_running",
            "gauge",
            "Number of requests in model execution batches.",
            [(label, m.running)],
        ),
        *_family(
            "vllm:num_requests_waiting",
            "gauge",
            "Number of requests waiting to be processed.",
            [(label, m.waiting)],
        ),
        *_family(
            "vllm:request_success_total",
            "counter",
            "Count of successfully processed requests.",
            [(f'finished_reason="{r}",{label}', m.finished[r]) for r in reasons],
        ),
        *_family(
            "vllm:prompt_tokens_total",
            "counter",
            "Number of prefill tokens processed.",
            [(label, m.prompt_tokens)],
        ),
        *_family(
            "vllm:generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            [(label, m.generated_tokens)],
        ),
        *_family(ttft, "histogram", "Histogram of time to first token in seconds.", []),
        *m.ttft.lines(ttft, label),
        *_family(tpot, "histogram", "Histogram of time per output token in seconds.", []),
        *m.tpot.lines(tpot, label),
        *_family(
            "http_requests_total",
            "counter",
            "Total number of requests by method, status and handler.",
            [
                (f'handler="{path}",method="{method}",status="{status}"', n)
                for (path, method, status), n in sorted(m.http.items())
            ],
        ),
    ]


def _llamacpp(m: ServerMetrics) -> list[str]:
    return [
        *_family(
            "llamacpp:prompt_tokens_total",
            "counter",
            "Number of prompt tokens processed.",
            [("", m.prompt_tokens)],
        ),
        *_family(
            "llamacpp:tokens_predicted_total",
            "counter",
            "Number of generation tokens processed.",
            [("", m.generated_tokens)],
        ),
        *_family(
            "llamacpp:requests_processing",
            "gauge",
            "Number of requests processing.",
            [("", m.running)],
        ),
        *_family(
            "llamacpp:requests_deferred", "gauge", "Number of requests deferred.", [("", m.waiting)]
        ),
    ]

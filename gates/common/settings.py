"""Gate settings with their documented defaults; the handoff spec embeds these models."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

DEFAULT_LATENCY_PROMPTS = (
    "Write a Python function that merges two sorted lists.",
    "Explain what a Kubernetes Service selector does.",
    "Summarise the trade-offs of tensor parallelism on PCIe GPUs.",
    "List three ways to detect a silent numerical regression.",
)


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Margins(_Settings):
    """Practical margins: a difference inside them is never a regression, however certain."""

    tpot: float = Field(1.05, description="fail when the median TPOT ratio is surely above")
    ttft: float = Field(1.10, description="fail when the median TTFT ratio is surely above")
    itl_p99: float = Field(1.10, description="fail when the p99 ITL ratio is surely above")
    throughput: float = Field(0.95, description="fail when the throughput ratio is surely below")


class Slo(_Settings):
    """Absolute limits on the candidate's p95 (checked on the interval's upper bound)."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None

    def limits(self) -> dict[Literal["ttft", "tpot", "e2el"], float]:
        """The limits that are set, by metric name."""
        named: dict[Literal["ttft", "tpot", "e2el"], float | None] = {
            "ttft": self.ttft_ms,
            "tpot": self.tpot_ms,
            "e2el": self.e2el_ms,
        }
        return {name: limit for name, limit in named.items() if limit is not None}


class LatencySettings(_Settings):
    """Load shape and decision rules of the latency gate.

    Sample sizes come from `benchmarks/latency_power.py` (the gate's own decision replayed on
    measured rounds): per level and side at most 9 rounds of max(1, ceil(3 / concurrency))
    waves of 32-token requests, looked at after rounds 3, 6 and 9 with alpha split over the
    looks. A clear regression stops at the first look; on a quiet machine a clear pass does
    too. The false alarms and detections measured, on a quiet machine and under bursts of
    load (whole rounds drawn against single requests), are in docs/performance.md.
    """

    levels: list[Annotated[int, Field(ge=1)]] = Field(
        default=[1, 16], min_length=1, description="concurrent streams, closed loop"
    )
    max_tokens: int = Field(
        32, ge=2, description="output length asked for (ignore_eos, min_tokens where taken)"
    )
    api: Literal["auto", "completions", "chat"] = Field(
        "auto", description="auto: completions where the server has them, else chat"
    )
    prompts: list[str] = Field(default=list(DEFAULT_LATENCY_PROMPTS), min_length=1)
    seed: int = 0
    rounds: int = Field(9, ge=1, description="most interleaved baseline/candidate rounds a level")
    min_rounds: int = Field(
        3, ge=1, description="rounds before the first look; later looks every as many rounds"
    )
    sequential: bool = Field(
        True, description="stop a level at a look once its verdict is certain (alpha split)"
    )
    waves_per_round: int = Field(1, ge=1, description="requests per stream in one round")
    min_requests_per_round: int = Field(3, ge=1, description="rounded up to whole waves")
    warmup_requests_per_stream: int = Field(1, ge=0, description="excluded from the figures")
    read_timeout_s: float = Field(
        30.0, gt=0, description="a stream with no token event this long has failed"
    )
    resample: Literal["round", "request"] = Field(
        "round",
        description="bootstrap unit at more than one stream: whole rounds (a burst of load "
        "on the machine stalls every stream of a round at once; from 3 rounds a side, "
        "single requests before) or single requests",
    )
    paired: bool = Field(
        True,
        description="draw the bootstrap's units in pairs: each candidate unit with the "
        "baseline's from the same round and place (the same prompt, adjacent in time), so "
        "drift of the machine and prompt lengths both sides share cancel; unpaired where "
        "the two sides' units do not match",
    )
    transport: Literal["native", "httpx"] = Field(
        "native", description="streaming transport; https:// and proxies always use httpx"
    )
    proxy: str | None = Field(None, description="HTTP proxy for the streams (then httpx)")
    margins: Margins = Margins()
    slo: Slo = Slo()
    alpha: float = Field(0.01, description="one-sided Mann-Whitney significance level")
    confidence: float = Field(0.98, description="two-sided bootstrap interval")
    bootstrap_resamples: int = 2000
    min_samples: int = Field(5, description="fewer successful requests a side: no verdict")
    max_failed_fraction: float = Field(0.0, description="share of failed requests tolerated")
    max_baseline_others_share: float = Field(
        0.1,
        ge=0,
        description="a baseline that generates more for others (the Service's clients) while "
        "measured than this share of what it generates for the gate is loaded, which "
        "flatters the candidate: its comparisons give no verdict (a regression still fails)",
    )

    def looks(self) -> list[int]:
        """After which rounds a level's verdict is checked: every `min_rounds` rounds and
        after the last; only after the last when not sequential."""
        if not self.sequential:
            return [self.rounds]
        step = min(self.min_rounds, self.rounds)
        return sorted({*range(step, self.rounds + 1, step), self.rounds})

    def at_each_look(self) -> LatencySettings:
        """These settings with alpha and the interval's tails split evenly over the looks
        (Bonferroni), so that checking at every look keeps the false-alarm rate under alpha."""
        n_looks = len(self.looks())
        tails = (1 - self.confidence) / n_looks
        return self.model_copy(update={"alpha": self.alpha / n_looks, "confidence": 1 - tails})

    def requests_per_round(self, concurrency: int) -> int:
        """Whole waves only: a partial last wave would run its requests under a lighter
        load than the rest, mixing two conditions in one sample."""
        waves = max(self.waves_per_round, -(-self.min_requests_per_round // concurrency))
        return waves * concurrency


ParityCheck = Literal["completions", "chat", "teacher_forced", "probes", "heads", "long_context"]
Change = Literal["kernels", "quantization", "model"]
# Limits by what a handoff changes, from `benchmarks/parity_separation.py` on llama.cpp
# (SmolLM2-135M, an F16 reference, 303 teacher-forced positions; docs/gates.md, "Bands by
# kind of change"): each at about the geometric midpoint between the worst figure of the
# changes the band passes and the mildest of those it must not.
PARITY_BANDS: dict[str, dict[str, float]] = {
    # Same weights, another engine or kernels: flash attention and an f32 KV cache on F16
    # measure mean KL <= 0.0010, p99 <= 2.7e-5, no top-1 change, |log ppl| bound <= 0.0004;
    # a quantization of the same weights (F16 -> Q4_1 pair, Q8_0) 0.025, 0.25, 2.3 %, 0.009.
    "kernels": {
        "kl_mean_max": 0.005,
        "kl_p99_max": 0.003,
        "top_token_agreement_min": 0.99,
        "log_perplexity_ratio_max": 0.002,
    },
    # A new quantization or layout of the same model: the defaults (Q8_0 from F16 measures
    # mean KL 0.032, p99 0.29, 3.6 %, bound 0.012; the zeroed key band 0.32, 1.7, 25 %, 0.30).
    "quantization": {},
}
MODEL_CHANGE = (
    "parity does not apply when the model itself changes (change: model): its golden "
    "outputs are another model's, and every comparison would fail; leave parity out and "
    "gate the new model on its clients' tasks (gates.task, with a margin), as the coder "
    "handoff does"
)


class ParityTolerances(_Settings):
    """Limits of the parity gate (notes/gates.md, Parity). The defaults sit at the geometric
    midpoint between the worst benign and the mildest harmful figure that
    `benchmarks/parity_separation.py` measured on llama.cpp (docs/gates.md, "Gates on real
    servers")."""

    change: Change | None = Field(
        None,
        description="what the handoff changes, which sets the limits not given here: "
        "'kernels' (the same weights on another engine or kernels: tight, measured on F16 "
        "weights; a 4-bit model's kernels move it as far as a quantization, so use "
        "'quantization' there), 'quantization' (a new quantization or layout: the "
        "defaults), 'model' (refused: parity does not apply, the task gate does); None: "
        "the defaults",
    )
    require: list[ParityCheck] | None = Field(
        None,
        description="comparisons without which there is no verdict (a side that cannot give "
        "one gets 'no verdict', never a pass); None: every comparison the golden file holds",
    )
    top_k: int = Field(
        5, description="a near-tie needs each token in the other's top-k (vLLM's rule)"
    )
    near_tie_max_gap: float | None = Field(
        0.7,
        description="a divergence is a near-tie only if both models preferred their own token "
        "by at most this many nats (fp16 noise flips only near-equal choices); None: top-k "
        "membership alone, vLLM's rule for quantized models",
    )
    probe_rel_tol: float = Field(1e-2, description="2e-3 for fp32 candidates, 1e-2 for half")
    kl_mean_max: float = Field(0.1, description="teacher-forced mean KL (nats) over top-k")
    kl_p99_max: float = Field(0.8, description="teacher-forced p99 KL (nats)")
    top_token_agreement_min: float = Field(0.90, description="share of positions, same argmax")
    log_perplexity_ratio_max: float = Field(
        0.03,
        description="teacher-forced |log(perplexity ratio)|: within about 3 %, shown by the "
        "interval at `confidence` (an interval that spans it: no verdict)",
    )
    confidence: float = Field(
        0.95, gt=0, lt=1, description="two-sided interval of the teacher-forced perplexity"
    )
    context_tokens: int | None = Field(
        None,
        ge=16,
        description="the prompt length the Service is used with: long-context probes that "
        "reach less (and not for the golden server's own limit) give no verdict; None: any",
    )
    context_kl_mean_max: float = Field(
        0.1, description="long context: mean next-token KL (nats) of the longest quarter"
    )
    context_kl_rise_max: float = Field(
        0.003,
        description="long context: how much the longest quarter's mean KL may exceed the "
        "shortest's when KL grows with position (at context_trend_alpha)",
    )
    context_trend_alpha: float = Field(
        0.05, description="long context: one-sided significance of KL growing with position"
    )

    @model_validator(mode="before")
    @classmethod
    def _band(cls, data: Any) -> Any:
        """The band of `change` fills the limits the caller left out (theirs win)."""
        if not isinstance(data, dict) or data.get("change") is None:
            return data
        if data["change"] == "model":
            raise ValueError(MODEL_CHANGE)
        return {**PARITY_BANDS.get(data["change"], {}), **data}

"""Server profiles: which tiny model runs at which precision, and how long its steps take.

Decode step time is linear in the batch size between the measured points at 1 and 16
streams (a dense model amortises its weight reads over the batch; the MoE pays expert traffic
per sequence). Prefill of a step costs a fixed part plus a part per prompt token, all prompts
admitted together sharing one step. The coder figures come from the seed's measurements on
V100s; the clef-flash and prefill figures for the 30B are plausible values, not measurements.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from sandbox.modelserver.precision import Precision

CALIBRATION_PROMPT_TOKENS = 128
"""Prompt length at which the profiles' TTFT figures hold."""

KNOWN_SUITES: dict[str, tuple[str, ...]] = {
    "coder": ("manifests/tasks/coder.yaml",),
    "clef": ("manifests/tasks/coder.yaml",),
}
"""The task suites a model of these weights answers like a working model (by reference). The
clef-flash servers know the coder suite too, so a side-by-side handoff in the sandbox can
run a task gate that measures something against its live baseline."""


class Profile(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    model_id: str
    weights: Literal["coder", "clef"] = Field(description="which tiny model's weights")
    precision: Precision
    batching: Literal["continuous", "cadence"] = "continuous"
    step_ms_1: float = Field(gt=0, description="decode step time with one running sequence")
    step_ms_16: float = Field(gt=0, description="decode step time with sixteen")
    prefill_fixed_ms: float = Field(ge=0)
    prefill_ms_per_token: float = Field(ge=0)
    max_num_seqs: int = Field(ge=1)
    max_model_len: int = 8192
    knows: tuple[str, ...] = Field(
        (), description="task suites whose reference answers it gives (sandbox.modelserver.known)"
    )

    def step_ms(self, batch: int) -> float:
        slope = (self.step_ms_16 - self.step_ms_1) / 15.0
        return self.step_ms_1 + slope * (batch - 1)

    def prefill_ms(self, prompt_tokens: int) -> float:
        return self.prefill_fixed_ms + self.prefill_ms_per_token * prompt_tokens


def _ttft_fit(ttft_ms_1: float, ttft_ms_16: float) -> dict[str, float]:
    """Fixed and per-token prefill cost from the mean TTFT at 1 and at 16 streams.

    Sixteen streams opened at once reach an idle scheduler one after another: the first is
    prefilled alone (TTFT t1 = F + P n), the other fifteen wait for it and then share one
    step (t1 + F + 15 P n), so the mean is t1 + 15 (F + 15 P n) / 16 with F = t1 - P n.
    """
    n = CALIBRATION_PROMPT_TOKENS
    per_token = (16 * (ttft_ms_16 - ttft_ms_1) / 15 - ttft_ms_1) / (14 * n)
    return {"prefill_fixed_ms": ttft_ms_1 - per_token * n, "prefill_ms_per_token": per_token}


class _Measured(NamedTuple):
    """A continuous-batching profile's calibration: step time and mean TTFT at 1 and 16."""

    name: str
    model_id: str
    weights: Literal["coder", "clef"]
    precision: Precision
    step_ms: tuple[float, float]
    ttft_ms: tuple[float, float]
    max_num_seqs: int

    def profile(self) -> Profile:
        return Profile(
            name=self.name,
            model_id=self.model_id,
            weights=self.weights,
            precision=self.precision,
            step_ms_1=self.step_ms[0],
            step_ms_16=self.step_ms[1],
            **_ttft_fit(*self.ttft_ms),
            max_num_seqs=self.max_num_seqs,
            knows=KNOWN_SUITES[self.weights],
        )


_BATCHED = [
    # vLLM, GPTQ W4A16 MoE on one V100: 17.6 ms at 1 stream, 71.5 ms at 16 (seed).
    _Measured(
        "gptq-30b-a3b-tp1",
        "qwen3-coder-30b-a3b-gptq",
        "coder",
        "fp16",
        (17.6, 71.5),
        (120.0, 600.0),
        64,
    ),
    # candle-vllm, dense fp16 14B over two PCIe V100s: 27.9 -> 39.7 ms, TTFT 275 -> 1090 ms.
    _Measured("fp16-14b-tp2", "coder-14b-fp16", "coder", "fp16", (27.9, 39.7), (275.0, 1090.0), 32),
    # The clef-flash reference implementation (pytorch, fp32) and its candle-vllm port.
    _Measured("clef-flash-pytorch", "clef-flash", "clef", "fp32", (24.0, 33.0), (90.0, 400.0), 16),
    _Measured("clef-flash-candle", "clef-flash", "clef", "fp16", (19.0, 26.0), (70.0, 300.0), 32),
]

CADENCE_MS = 25.0
# Exactly one token per interval per stream, whatever the load: for calibrating clients.
_CADENCE = Profile(
    name="cadence",
    model_id="cadence",
    weights="coder",
    precision="fp32",
    batching="cadence",
    step_ms_1=CADENCE_MS,
    step_ms_16=CADENCE_MS,
    prefill_fixed_ms=0.0,
    prefill_ms_per_token=0.0,
    max_num_seqs=1024,
)

PROFILES: dict[str, Profile] = {p.name: p for p in [*(m.profile() for m in _BATCHED), _CADENCE]}

WEIGHT_SEEDS = {"coder": 2, "clef": 1}

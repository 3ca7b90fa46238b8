"""What one model-server process runs: the profile, the port and the injected faults."""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from sandbox.modelserver.api.metrics import MetricsDialect
from sandbox.modelserver.faults import Fault
from sandbox.modelserver.profiles import PROFILES, Profile
from sandbox.modelserver.surface import Surface


class ServerConfig(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)

    profile: str
    port: int = Field(ge=0, le=65535, description="0 picks a free port")
    host: str = "127.0.0.1"
    model_id: str | None = Field(None, description="served model name; the profile's default")
    faults: tuple[Fault, ...] = Field((), validation_alias=AliasChoices("faults", "fault"))
    slow_start_s: float = Field(5.0, ge=0)
    surface: Surface = Field("openai", description="which routes: all, or candle-vllm's")
    load_s: float = Field(
        0.0, ge=0, description="loading before the port opens (scaled by time_scale)"
    )
    stall_after_tokens: int = Field(4, ge=0)
    slowdown: float = Field(1.0, gt=0, description="multiplies step and prefill times")
    time_scale: float = Field(1.0, gt=0, description="multiplies every simulated duration")
    ground_truth: Path | None = Field(None, description="JSONL of per-request token send times")
    keep_alive_ms: float | None = Field(None, gt=0, description="SSE comment after this idle")
    max_num_seqs: int | None = Field(None, ge=1, description="overrides the profile's cap")
    cadence_ms: float | None = Field(None, gt=0, description="interval of the cadence profile")
    metrics: MetricsDialect | None = Field(
        None,
        description="/metrics dialect: vllm, llamacpp or none; by default vllm, none "
        "with the candle-vllm surface (its router has no such route)",
    )
    delay_scale: float = Field(
        1.0, gt=0, description="real seconds per simulated second a request asks to last"
    )
    realtime: bool = Field(
        True, description="SCHED_FIFO for the pacing threads when the OS permits (less jitter)"
    )
    shutdown_timeout_s: float | None = Field(
        None,
        ge=0,
        description="vLLM's --shutdown-timeout: after SIGTERM, requests still running this "
        "long are aborted (0, vLLM's default: at once); None drains until none runs",
    )

    @model_validator(mode="after")
    def _known_profile(self) -> ServerConfig:
        if self.profile not in PROFILES:
            raise ValueError(
                f"unknown profile {self.profile!r}: expected one of {sorted(PROFILES)}"
            )
        return self

    def resolved_profile(self) -> Profile:
        """The profile with this server's overrides applied."""
        base = PROFILES[self.profile]
        changes: dict[str, object] = {}
        if self.model_id:
            changes["model_id"] = self.model_id
        if self.max_num_seqs:
            changes["max_num_seqs"] = self.max_num_seqs
        if self.cadence_ms and base.batching == "cadence":
            changes["step_ms_1"] = changes["step_ms_16"] = self.cadence_ms
        return base.model_copy(update=changes)

    def metrics_dialect(self) -> MetricsDialect:
        if self.metrics is not None:
            return self.metrics
        return "none" if self.surface == "candle-vllm" else "vllm"

    def has(self, fault: Fault) -> bool:
        return fault in self.faults

    def argv(self) -> list[str]:
        """The command-line flags that reproduce this config (for launching a process)."""
        args = ["--profile", self.profile, "--port", str(self.port), "--host", self.host]
        for fault in self.faults:
            args += ["--fault", fault.value]
        for name, value in self.model_dump(exclude={"profile", "port", "host", "faults"}).items():
            flag = "--" + name.replace("_", "-")
            if isinstance(value, bool):
                args.append(flag if value else flag.replace("--", "--no-", 1))
            elif value is not None and value != type(self).model_fields[name].default:
                args += [flag, str(value)]
        return args

"""The sandbox cluster description: simulated nodes, timing and model-server profiles.

Loaded from YAML (default `manifests/sandbox/cluster.yaml`) and validated once;
errors name the file and the field.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sandbox.modelserver.surface import Surface

DEFAULT_CLUSTER_FILE = (
    Path(__file__).resolve().parent.parent / "manifests" / "sandbox" / "cluster.yaml"
)


class NodeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    cpu: str = "16"
    memory: str = "64Gi"
    pods: int = 110
    gpus: int = 0
    gpu_product: str | None = Field(default=None, description="nvidia.com/gpu.product label")
    labels: dict[str, str] = Field(default_factory=dict)


class ModelRule(BaseModel):
    """Which simulated model-server profile a container runs.

    A rule matches when the image's `dev.handoff.sim.server` label equals `server` (None:
    the image has no such label) and, if `weights` is set, that string occurs in the
    container's command, args or env values (as `--w /mnt/models/coder-14b-fp16` does).
    """

    model_config = ConfigDict(extra="forbid")

    server: str | None
    weights: str | None = None
    profile: str
    model_id: str | None = Field(default=None, description="served name, if not the profile's")
    cold_start_s: float = Field(
        default=0.0,
        ge=0,
        description="real start-up time (scaled): /health answers 503 meanwhile, or with the "
        "candle-vllm surface the port stays closed",
    )
    surface: Surface = Field(default="openai", description="the routes the server has")

    def matches(self, server: str | None, words: str) -> bool:
        return self.server == server and (self.weights is None or self.weights in words)


class ClusterConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    nodes: list[NodeConfig]
    models: list[ModelRule] = Field(default_factory=list, description="first match wins")
    time_scale: float = Field(
        default=0.05,
        gt=0,
        description="multiplies simulated delays (cold starts, image pulls); 1.0 = real time",
    )
    pod_cidr: str = "10.244.0.0/16"

    def model_for(self, server: str | None, words: str) -> ModelRule | None:
        """The first rule for an image's server label and a container's command words."""
        return next((rule for rule in self.models if rule.matches(server, words)), None)


class ClusterConfigError(ValueError):
    """The cluster description is malformed; the message names the file and field."""


def load_cluster(path: Path = DEFAULT_CLUSTER_FILE) -> ClusterConfig:
    try:
        raw = yaml.safe_load(path.read_text())
        return ClusterConfig.model_validate(raw)
    except OSError as exc:
        raise ClusterConfigError(f"cannot read cluster description {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ClusterConfigError(f"{path} is not valid YAML: {exc}") from exc
    except ValidationError as exc:
        fields = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise ClusterConfigError(f"{path}: invalid cluster description: {fields}") from exc

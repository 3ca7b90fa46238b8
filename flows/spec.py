"""The handoff spec: what to move, to what, and what it must prove on the way.

YAML in (`manifests/handoffs/*.yaml`), validated once, typed everywhere after.
`${VAR}` and `${VAR:-default}` in string values are expanded from the environment
so one spec serves the sandbox and a real cluster; paths are relative to the spec
file. A kustomize-style `images:` list (in the spec, or `HANDOFF_IMAGES` in the
environment as `name=newName,...`) points the manifests' real image names at
another registry without editing them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from flows.errors import PermanentError
from gates.settings import LatencySettings, ParityTolerances
from gates.yaml_file import read_mapping


class SpecError(PermanentError):
    """The handoff spec is malformed; the message names the file and the field."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ImageOverride(_Model):
    name: str = Field(description="image name as written in the manifests, without tag")
    new_name: str = Field(description="name to use instead (e.g. the sandbox registry's)")


class CandidateSpec(_Model):
    manifest: Path = Field(description="Deployment manifest of the candidate, relative to the spec")
    deployment: str
    container: str = Field(description="container whose image is pinned and gated")
    port: int = Field(8080, description="container port the gates talk to")
    replicas: int = Field(1, ge=1, description="replicas after scale-up")
    preview_replicas: int = Field(1, ge=1, description="replicas while gating")
    capacity_wait_s: float = Field(
        0.0,
        ge=0,
        description="how long Unschedulable candidate pods may wait for capacity (a cluster "
        "autoscaler or Karpenter adding a node) before the handoff fails; 0 fails at once",
    )


class ImageSpec(_Model):
    repository: str = Field(description="image repository as in the manifest, without tag")
    tag: str
    source: str = Field(description="git URL or path of the repository the image is built from")
    requires: list[str] = Field(default_factory=list, description="commits the image must contain")
    timeout_s: float = Field(7200.0, gt=0)
    poll_interval_s: float = Field(10.0, gt=0)


class ParityGateSpec(_Model):
    golden: Path = Field(description="golden reference outputs, relative to the spec")
    tolerances: ParityTolerances = ParityTolerances()
    budget_s: float = Field(
        60.0, gt=0, description="in place, the gate's share of the declared downtime; held to it"
    )


class TaskGateSpec(_Model):
    suite: Path = Field(description="task suite (cases and checkers), relative to the spec")
    golden: Path | None = Field(
        None,
        description="scores recorded from the live server with `handoff golden record "
        "--task-suite`; in place (no live baseline) they stand in for it, and are required",
    )
    margin: float = Field(2.0, ge=0, le=100, description="points the candidate may lose")
    floor: float | None = Field(None, ge=0, le=100, description="least score, in percent")
    budget_s: float = Field(
        120.0, gt=0, description="in place, the gate's share of the declared downtime; held to it"
    )


class GatesSpec(_Model):
    model_id: str = Field(description="model id the candidate must serve")
    smoke_deadline_s: float = 30.0
    parity: ParityGateSpec | None = None
    task: TaskGateSpec | None = None
    latency: LatencySettings | None = None
    latency_budget_s: float = Field(
        120.0, gt=0, description="in place, the latency gate's share of the declared downtime"
    )


class ApprovalSpec(_Model):
    required: bool = True
    timeout_s: float = Field(3600.0, gt=0, description="waits while clients are still served")
    during_outage: bool = Field(
        False,
        description="in place, a person also looks at the gates' evidence while the Service "
        "has no endpoints (by default the gates decide alone there)",
    )
    outage_timeout_s: float = Field(
        120.0,
        gt=0,
        le=900,
        description="the most that look may take; it is part of the declared downtime, "
        "and expiry rolls back",
    )


def _both_events() -> list[Literal["approval", "rollback"]]:
    return ["approval", "rollback"]


class NotifySpec(_Model):
    block: str = Field(
        pattern=r"^[a-z0-9][-a-z0-9]*/[^/]+$",
        description="a Prefect notification block as `type-slug/name`, e.g. "
        "`custom-webhook/approvers` (a Custom Webhook block posts to Slack, Mattermost or "
        "Teams); any other Prefect notification block is accepted the same way",
    )
    on: list[Literal["approval", "rollback"]] = Field(
        default_factory=_both_events,
        description="when to send: a pause for approval, a rollback",
    )


class RetireSpec(_Model):
    action: Literal["scale-to-zero"] = Field(
        "scale-to-zero", description="old workloads are kept at 0 replicas, never deleted"
    )


class HandoffSpec(_Model):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    namespace: str
    service: str
    current: list[str] = Field(min_length=1, description="Deployments the Service selects now")
    candidate: CandidateSpec
    image: ImageSpec
    images: list[ImageOverride] = Field(default_factory=list)
    gates: GatesSpec
    approval: ApprovalSpec = ApprovalSpec()
    notify: NotifySpec | None = None
    retire: RetireSpec = RetireSpec()
    source_file: Path | None = Field(None, exclude=True)

    @field_validator("current")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("lists a Deployment twice")
        return value

    @property
    def replaces_live(self) -> bool:
        """The candidate reuses a live Deployment's name: it ends up replacing its spec."""
        return self.candidate.deployment in self.current

    def resolve_image(self, name: str) -> str:
        """Apply the image overrides to a repository name."""
        for override in self.images:
            if override.name == name:
                return override.new_name
        return name


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _expand(value: Any, where: str) -> Any:
    if isinstance(value, str):

        def sub(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in os.environ:
                return os.environ[name]
            if default is None:
                raise SpecError(
                    f"{where}: ${{{name}}} is not set in the environment "
                    f"(set it, or write ${{{name}:-default}} in the spec)"
                )
            return default

        return _VAR.sub(sub, value)
    if isinstance(value, dict):
        return {k: _expand(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def _env_overrides() -> list[dict[str, str]]:
    pairs = [p for p in os.environ.get("HANDOFF_IMAGES", "").split(",") if p.strip()]
    out = []
    for pair in pairs:
        name, sep, new = pair.partition("=")
        if not sep or not name or not new:
            raise SpecError(f"HANDOFF_IMAGES entry {pair!r}: expected name=newName")
        out.append({"name": name.strip(), "new_name": new.strip()})
    return out


def load_spec(path: Path) -> HandoffSpec:
    """Read, expand and validate a spec file; relative paths become absolute."""
    path = path.resolve()
    raw = read_mapping(path, "handoff spec", SpecError)
    data = _expand(raw, str(path))
    # Environment overrides win over the spec's own list.
    data["images"] = _env_overrides() + list(data.get("images") or [])
    try:
        spec = HandoffSpec.model_validate({**data, "source_file": path})
    except ValidationError as exc:
        fields = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise SpecError(f"{path}: invalid handoff spec: {fields}") from None
    return _absolute_paths(spec, path.parent)


def _absolute_paths(spec: HandoffSpec, base: Path) -> HandoffSpec:
    candidate = spec.candidate.model_copy(
        update={"manifest": (base / spec.candidate.manifest).resolve()}
    )
    gates = spec.gates
    if gates.parity is not None:
        parity = gates.parity.model_copy(update={"golden": (base / gates.parity.golden).resolve()})
        gates = gates.model_copy(update={"parity": parity})
    if gates.task is not None:
        golden = gates.task.golden
        task = gates.task.model_copy(
            update={
                "suite": (base / gates.task.suite).resolve(),
                "golden": None if golden is None else (base / golden).resolve(),
            }
        )
        gates = gates.model_copy(update={"task": task})
    return spec.model_copy(update={"candidate": candidate, "gates": gates})

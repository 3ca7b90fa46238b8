"""The handoff spec: what to move, to what, and what it must prove on the way.

YAML in (`manifests/handoffs/*.yaml`), validated once, typed everywhere after.
`${VAR}` and `${VAR:-default}` in string values are expanded from the environment
so one spec serves the sandbox and a real cluster, but only for HANDOFF_SPEC_* variables
and those the spec lists under `environment:`, and never a credential (a spec's values
are published in Prefect events and reports). Paths are relative to the spec file and
must resolve, symlinks followed, inside the repository holding it. Namespace, Service
and Deployment names are checked as Kubernetes checks them. A kustomize-style `images:`
list (in the spec, or `HANDOFF_IMAGES` in the environment as `name=newName,...`) points
the manifests' real image names at another registry without editing them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from flows.errors import PermanentError
from flows.spec_paths import spec_root
from gates.common.settings import LatencySettings, ParityTolerances
from yamlfile import read_mapping


class SpecError(PermanentError):
    """The handoff spec is malformed; the message names the file and the field."""


_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_1123_LABEL = re.compile(rf"^{_LABEL}$")
_DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS_1123_SUBDOMAIN = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")


def _namespace_name(value: str) -> str:
    if len(value) > 63 or not _DNS_1123_LABEL.match(value):
        raise ValueError(
            f"{value!r} is not a namespace name, a DNS-1123 label: 1 to 63 lowercase "
            "letters, digits and '-', starting and ending with a letter or digit"
        )
    return value


def _service_name(value: str) -> str:
    if len(value) > 63 or not _DNS_1035_LABEL.match(value):
        raise ValueError(
            f"{value!r} is not a Service name, a DNS-1035 label (a DNS-1123 label that "
            "starts with a letter): 1 to 63 lowercase letters, digits and '-', starting "
            "with a letter and ending with a letter or digit"
        )
    return value


def _deployment_name(value: str) -> str:
    if len(value) > 253 or not _DNS_1123_SUBDOMAIN.match(value):
        raise ValueError(
            f"{value!r} is not a Deployment name, a DNS-1123 subdomain: at most 253 "
            "characters, DNS-1123 labels (lowercase letters, digits and '-', starting and "
            "ending with a letter or digit) joined by '.'"
        )
    return value


NamespaceName = Annotated[str, AfterValidator(_namespace_name)]
ServiceName = Annotated[str, AfterValidator(_service_name)]
DeploymentName = Annotated[str, AfterValidator(_deployment_name)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ImageOverride(_Model):
    name: str = Field(description="image name as written in the manifests, without tag")
    new_name: str = Field(description="name to use instead (e.g. the sandbox registry's)")


class CandidateSpec(_Model):
    manifest: Path = Field(description="Deployment manifest of the candidate, relative to the spec")
    deployment: DeploymentName
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
    approvers: dict[Annotated[str, StringConstraints(min_length=1)], Path] = Field(
        default_factory=dict,
        description="name → Ed25519 public key file (in the spec's repository, as "
        "`handoff keygen` writes it): only approvals signed with the named key count; "
        "empty: typed names, recorded as not verified",
    )


NotifyEvent = Literal["approval", "rollback", "bake"]


def _every_event() -> list[NotifyEvent]:
    return ["approval", "rollback", "bake"]


class NotifySpec(_Model):
    block: str = Field(
        pattern=r"^[a-z0-9][-a-z0-9]*/[^/]+$",
        description="a Prefect notification block as `type-slug/name`, e.g. "
        "`custom-webhook/approvers` (a Custom Webhook block posts to Slack, Mattermost or "
        "Teams); any other Prefect notification block is accepted the same way",
    )
    on: list[NotifyEvent] = Field(
        default_factory=_every_event,
        description="when to send: a pause for approval, a rollback, a bake's breach "
        "that could only be reported (in place, or with the old workload already gone)",
    )


class RetireSpec(_Model):
    action: Literal["scale-to-zero"] = Field(
        "scale-to-zero", description="old workloads are kept at 0 replicas, never deleted"
    )
    drain_connections: bool = Field(
        False,
        description="drain a server without in-flight metrics by its pods' client "
        "connections, read by exec: the Role then grants pods/exec in the namespace "
        "(handoff rbac render), which reaches whatever its pods can read",
    )


class BakeSloSpec(_Model):
    """What the bake holds the candidate to; any one breached ends it."""

    max_restarts: int = Field(0, ge=0, description="candidate container restarts in the bake")
    max_not_ready_s: float = Field(
        10.0, ge=0, description="how long a candidate pod may stay not Ready in the bake"
    )
    max_error_ratio: float = Field(
        0.05,
        ge=0,
        le=1,
        description="HTTP 5xx answers over all answers of the generation routes, from the "
        "server's own /metrics (where it exposes them)",
    )
    min_requests: int = Field(
        20, ge=1, description="answers the server must have counted before the ratio decides"
    )
    max_probe_failures: int = Field(
        0,
        ge=0,
        description="probe turns through the Service that failed or whose first tokens "
        "differ from the golden's",
    )


class BakeProbeSpec(_Model):
    """A light synthetic probe through the Service: greedy chat turns from the parity
    golden, compared on their first tokens."""

    url: str | None = Field(
        None,
        description="how the flow reaches the Service; by default, inside the cluster, "
        "its ClusterIP and first port (outside it there is no default: no probe)",
    )
    every_s: float = Field(10.0, gt=0, description="seconds between rounds")
    turns: int = Field(2, ge=1, le=16, description="turns per round (one connection each)")
    first_tokens: int = Field(4, ge=1, le=64, description="tokens compared with the golden's")
    timeout_s: float = Field(30.0, gt=0, description="one turn's limit")

    @field_validator("url")
    @classmethod
    def _http(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^\s/]+(/\S*)?$", value):
            raise ValueError(
                f"{value!r} is not an http(s) URL of the Service (e.g. "
                "http://clef-serve.llm-serving.svc); leave it out to use the ClusterIP "
                "when the flow runs inside the cluster"
            )
        return value.rstrip("/") if value else value


class BakeSpec(_Model):
    """After the swap and the scale-up, side by side, the old workload stays Ready and
    serves nothing for duration_s while the candidate is watched; a breach moves the
    Service back to it at once. 0 (the default): no bake, the old workload retires."""

    duration_s: float = Field(0.0, ge=0, le=7 * 86400, description="0: no bake")
    interval_s: float = Field(5.0, gt=0, description="seconds between looks at pods and metrics")
    slo: BakeSloSpec = BakeSloSpec()
    probe: BakeProbeSpec = BakeProbeSpec()

    @model_validator(mode="after")
    def _fits_the_window(self) -> BakeSpec:
        if self.duration_s and self.interval_s > self.duration_s:
            raise ValueError(
                f"interval_s {self.interval_s:g} is longer than duration_s "
                f"{self.duration_s:g}: the bake would look at the candidate at most once; "
                "make interval_s at most duration_s"
            )
        if self.duration_s and self.probe.every_s > self.duration_s:
            raise ValueError(
                f"probe.every_s {self.probe.every_s:g} is longer than duration_s "
                f"{self.duration_s:g}: at most one probe round would run; make it at most "
                "duration_s"
            )
        return self


class HandoffSpec(_Model):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    namespace: NamespaceName
    service: ServiceName
    current: list[DeploymentName] = Field(
        min_length=1, description="Deployments the Service selects now"
    )
    candidate: CandidateSpec
    image: ImageSpec
    images: list[ImageOverride] = Field(default_factory=list)
    gates: GatesSpec
    approval: ApprovalSpec = ApprovalSpec()
    notify: NotifySpec | None = None
    retire: RetireSpec = RetireSpec()
    bake: BakeSpec = BakeSpec()
    environment: list[str] = Field(
        default_factory=list,
        description="environment variables besides HANDOFF_SPEC_* that the spec's ${VAR}s "
        "may read (never a credential)",
    )
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
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SPEC_PREFIX = "HANDOFF_SPEC_"  # variables every spec may read
DECLARED = "environment"  # the spec's own list of the other variables it reads
# This project's credentials, and any variable named like one (a word of its name, split
# at `_`): never expanded, declared or not, since a spec's values are published.
CREDENTIALS = frozenset(
    {
        "HANDOFF_WEBHOOK_SECRET",
        "HANDOFF_REGISTRY_USERNAME",
        "HANDOFF_REGISTRY_PASSWORD",
        "HANDOFF_REGISTRY_TOKEN",
        "PREFECT_API_AUTH_STRING",
        "PREFECT_SERVER_API_AUTH_STRING",
        "PREFECT_API_KEY",
    }
)
_CREDENTIAL_WORDS = frozenset(
    {"PASSWORD", "PASSWD", "TOKEN", "SECRET", "SECRETS", "KEY", "KEYS", "APIKEY", "AUTH",
     "CREDENTIAL", "CREDENTIALS", "PRIVATE", "COOKIE"}
)  # fmt: skip


def is_credential(name: str) -> bool:
    """A variable no spec may read: one of this project's credentials, or named like one."""
    upper = name.upper()
    return upper in CREDENTIALS or not _CREDENTIAL_WORDS.isdisjoint(upper.split("_"))


def _declared(raw: dict[str, Any], path: Path) -> list[str]:
    """The spec's `environment:` list, checked: variable names, none a credential."""
    names = raw.get(DECLARED)
    if names is None:
        return []
    if not isinstance(names, list):
        raise SpecError(f"{path}: {DECLARED}: expected a list of environment variable names")
    for i, name in enumerate(names):
        if not isinstance(name, str) or not _NAME.match(name):
            raise SpecError(
                f"{path}: {DECLARED}[{i}]: {name!r} is not an environment variable name "
                "(letters, digits and _, not starting with a digit; no ${...} here)"
            )
        if is_credential(name):
            raise SpecError(
                f"{path}: {DECLARED}[{i}]: {name} is a credential or named like one "
                f"(PASSWORD, TOKEN, SECRET, KEY, AUTH...); a spec never reads one, declared "
                "or not, since its values are published in Prefect events and reports: "
                "remove it, and give the flow the credential its own way"
            )
    return names


def _expand(value: Any, path: Path, field: str, allowed: frozenset[str]) -> Any:
    if isinstance(value, str):

        def sub(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            where = f"{path}: {field or '(top)'}"
            if is_credential(name):
                raise SpecError(
                    f"{where}: ${{{name}}} is a credential or named like one (PASSWORD, "
                    "TOKEN, SECRET, KEY, AUTH...); a spec never reads one, declared or not, "
                    "since its values are published in Prefect events and reports: write the "
                    "value in the spec, or use a HANDOFF_SPEC_* variable that holds no secret"
                )
            if not name.startswith(SPEC_PREFIX) and name not in allowed:
                raise SpecError(
                    f"{where}: ${{{name}}} may not be read by this spec: a spec reads only "
                    f"{SPEC_PREFIX}* variables and those it lists under `{DECLARED}:`; "
                    f"rename it {SPEC_PREFIX}{name}, or add `{DECLARED}: [{name}]` to the spec"
                )
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
        return {
            k: _expand(v, path, f"{field}.{k}" if field else str(k), allowed)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_expand(v, path, f"{field}[{i}]", allowed) for i, v in enumerate(value)]
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


def declared_environment(path: Path) -> list[str]:
    """The variables a spec file declares under `environment:`, checked, without
    expanding anything (the work pool's env allow-list is made of them)."""
    path = path.resolve()
    return _declared(read_mapping(path, "handoff spec", SpecError), path)


def load_spec(path: Path, *, root: Path | None = None) -> HandoffSpec:
    """Read, expand and validate a spec file; relative paths become absolute, and every
    file it names must lie under root: the repository holding the spec, found from the
    spec's place (flows.spec_paths.spec_root) unless its reader knows it (the relay's
    extracted merge commit holds no .git)."""
    path = path.resolve()
    raw = read_mapping(path, "handoff spec", SpecError)
    allowed = frozenset(_declared(raw, path))
    data = _expand({k: v for k, v in raw.items() if k != DECLARED}, path, "", allowed)
    if DECLARED in raw:
        data[DECLARED] = raw[DECLARED]
    # Environment overrides win over the spec's own list.
    data["images"] = _env_overrides() + list(data.get("images") or [])
    try:
        spec = HandoffSpec.model_validate({**data, "source_file": path})
    except ValidationError as exc:
        fields = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise SpecError(f"{path}: invalid handoff spec: {fields}") from None
    return _absolute_paths(spec, path, spec_root(path) if root is None else root.resolve())


def _absolute_paths(spec: HandoffSpec, path: Path, root: Path) -> HandoffSpec:
    if root == Path(root.anchor):
        raise SpecError(
            f"{path}: the spec lies in no repository but the filesystem root's, so nothing "
            "would confine the files it names: move it into a repository or a directory "
            "of its own"
        )

    def confined(field: str, named: Path) -> Path:
        try:
            resolved = (path.parent / named).resolve()
        except (OSError, RuntimeError, ValueError) as exc:  # a loop, a NUL, a name too long
            raise SpecError(f"{path}: {field}: {str(named)!r} cannot be resolved ({exc})") from None
        if not resolved.is_relative_to(root):
            raise SpecError(
                f"{path}: {field}: {str(named)!r} resolves (symlinks followed) to {resolved}, "
                f"outside {root}, the repository holding the spec; a spec names only files "
                "in its own repository (absolute, or relative to the spec as in "
                "../golden/NAME.json): move the file there"
            )
        return resolved

    candidate = spec.candidate.model_copy(
        update={"manifest": confined("candidate.manifest", spec.candidate.manifest)}
    )
    gates = spec.gates
    if gates.parity is not None:
        golden = confined("gates.parity.golden", gates.parity.golden)
        gates = gates.model_copy(
            update={"parity": gates.parity.model_copy(update={"golden": golden})}
        )
    if gates.task is not None:
        scores = gates.task.golden
        task = gates.task.model_copy(
            update={
                "suite": confined("gates.task.suite", gates.task.suite),
                "golden": None if scores is None else confined("gates.task.golden", scores),
            }
        )
        gates = gates.model_copy(update={"task": task})
    approvers = {
        name: confined(f"approval.approvers.{name}", key)
        for name, key in spec.approval.approvers.items()
    }
    approval = spec.approval.model_copy(update={"approvers": approvers})
    return spec.model_copy(update={"candidate": candidate, "gates": gates, "approval": approval})

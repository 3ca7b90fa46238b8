"""The Kubernetes work pool's base job template, with what a run may not change fixed.

Whoever may create a flow run of a deployment may give it job variables, and Prefect
applies them over the deployment's and the pool's: with the stock template a run could
bring its own image, command, ServiceAccount or cluster credentials, and so run any code
in the namespace under any account. Rendered here, the template carries the image (by digest), the
command `prefect flow-run execute` and the ServiceAccount as literals, lists none of
them among its variables, and refuses variables it does not list
(`additionalProperties: false`): Prefect answers 422 to a deployment or a flow run that
sets one. The signing key's path is set by the template too (`FIXED_ENV`, where it
mounts the Secret). What stays open to a run's job variables: the namespace, env by an
allow-list (`job_env`: the flow's HANDOFF_* settings but the key files, and the names
the repository's specs declare under `environment:`, each checked to be none the loader,
Python, git, Prefect, the Kubernetes client, TLS or a proxy reads), labels, annotations,
resources and the Job's timeouts (docs/operating.md, "Trust boundary").
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from flows.errors import PermanentError
from flows.source_tree import IMAGE_ENV

TEMPLATE = (
    Path(__file__).resolve().parents[1] / "manifests" / "work-pool" / "handoff-kubernetes.json"
)
# cluster_config: a Prefect block with another cluster's credentials; the Job uses the
# worker's own (in-cluster) configuration.
FIXED = ("image", "command", "service_account_name", "cluster_config")
COMMAND = ["prefect", "flow-run", "execute"]
# Set by the template, never by a run: where it mounts the Secret handoff-signing-key.
SIGNING_KEY_DIR = "/var/run/secrets/handoff/signing-key"
FIXED_ENV = [{"name": "HANDOFF_SIGNING_KEY_FILE", "value": f"{SIGNING_KEY_DIR}/key"}]
PINNED = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")


class PoolTemplateError(PermanentError):
    """The work pool template cannot be rendered as asked."""


def render_pool_template(
    image: str,
    *,
    service_account: str = "handoff",
    declared: Iterable[str] = (),
    template: Path = TEMPLATE,
) -> dict[str, Any]:
    """The base job template with `image`, the command and `service_account` fixed, and
    a run's env names limited to job_env(declared)."""
    if not PINNED.match(image):
        raise PoolTemplateError(
            f"image {image!r} is not pinned by digest: the pool runs exactly one image, so "
            "give it as REGISTRY/REPOSITORY@sha256:<64 hex> (a tag could move under the "
            "pool); `crane digest`, `skopeo inspect` or the registry's UI gives the digest"
        )
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", service_account):
        raise PoolTemplateError(
            f"ServiceAccount {service_account!r} is not a valid Kubernetes name"
        )
    base: dict[str, Any] = json.loads(template.read_text())
    rendered: dict[str, Any] = copy.deepcopy(base)
    job = rendered["job_configuration"]
    job["command"] = " ".join(COMMAND)
    job.pop("cluster_config", None)
    pod = job["job_manifest"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    container["image"] = image
    container["args"] = list(COMMAND)
    # A literal list: the worker puts the run's env (names limited below) before it, and
    # none of those names can be one of these.
    # The audit record names the image that ran (flows/source_tree.py).
    container["env"] = [*copy.deepcopy(FIXED_ENV), {"name": IMAGE_ENV, "value": image}]
    pod["serviceAccountName"] = service_account
    _close(rendered["variables"], FIXED)
    rendered["variables"]["properties"]["env"]["propertyNames"] = {"pattern": job_env(declared)}
    left = sorted(n for n in FIXED if f"{{{{ {n} }}}}" in json.dumps(rendered))
    if left:
        raise PoolTemplateError(f"{template}: still refers to {', '.join(left)} after rendering")
    return rendered


# The flow's own settings, none of the key files (a run could point them at another key
# the host holds), the merge commit (the relay's to give) nor the image (the template's to
# name). Nothing else HANDOFF_* is
# read by the loader, Python, git, Prefect or the Kubernetes client.
_SETTINGS = (
    r"(?!HANDOFF_(SIGNING_KEY_FILE|EVENT_KEY_FILE|EVENT_PUBLIC_KEY_FILE|SOURCE_COMMIT"
    r"|FLOW_IMAGE)$)"
    r"HANDOFF_[A-Z0-9_]+"
)
# What a run's env may set on a process worker's host: the flow's settings alone.
RUN_ENV = f"^{_SETTINGS}$"
# Names a spec may not declare for a Job's env: what the loader, Python, git, Prefect, the
# Kubernetes client (KUBERNETES_SERVICE_HOST would point it at another apiserver), TLS
# trust, a proxy or the installers read (a Job inherits nothing from its worker: a spec's
# variables reach it only through the run's env).
FORBIDDEN_ENV = re.compile(
    r"^((LD_|PYTHON|GIT_|PREFECT_|KUBE|SSL_|UV_|PIP_).*"
    r"|PATH|HOME|HTTPS?_PROXY|NO_PROXY|ALL_PROXY|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE)$",
    re.IGNORECASE,
)


def job_env(declared: Iterable[str]) -> str:
    """The names a Job's env may set, as a pattern: the flow's settings and, by name,
    the variables the specs declare (a HANDOFF_* one is a setting: the settings' rule
    decides it; none that FORBIDDEN_ENV names)."""
    names = sorted({n for n in declared if not n.startswith("HANDOFF_")})
    refused = [
        n for n in names if FORBIDDEN_ENV.match(n) or not re.fullmatch(r"[A-Z][A-Z0-9_]*", n)
    ]
    if refused:
        raise PoolTemplateError(
            f"the specs declare {', '.join(refused)} under `environment:`, which a run's env "
            "may not set: a lower-case name, or one the loader, Python, git, Prefect, the "
            "Kubernetes client, TLS or a proxy reads. Give the spec's variables upper-case "
            "names of their own (HANDOFF_SPEC_<NAME> needs no declaring)"
        )
    return "^(" + "|".join([_SETTINGS, *names]) + ")$"


PROCESS_FIXED = ("command", "working_dir")


def render_process_template() -> dict[str, Any]:
    """Prefect's process pool template with the command and working directory the
    worker's own (not variables), env names limited to RUN_ENV, no other variable."""
    from prefect.workers.process import ProcessWorker

    rendered: dict[str, Any] = ProcessWorker.get_default_base_job_template()
    job = rendered["job_configuration"]
    for name in PROCESS_FIXED:
        job[name] = None  # the worker's: `prefect flow-run execute` in a fresh directory
    variables = rendered["variables"]
    _close(variables, PROCESS_FIXED)
    variables["properties"]["env"]["propertyNames"] = {"pattern": RUN_ENV}
    return rendered


def _close(variables: dict[str, Any], fixed: tuple[str, ...]) -> None:
    """The template's variables without `fixed`, and no variable it does not list."""
    for name in fixed:
        variables["properties"].pop(name, None)
    variables["required"] = [r for r in variables.get("required", []) if r not in fixed]
    variables["additionalProperties"] = False

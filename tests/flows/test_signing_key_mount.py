"""The flow's Kubernetes Job gets its signing key as a file: the pool's base job template
mounts the Secret handoff-signing-key (optional: without it the bundles are unsigned, and
the history says so) in the directory of the HANDOFF_SIGNING_KEY_FILE it sets itself (no
run's job variables can), and the flow's Role grants no read of Secrets."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import yaml

from flows.report.attest import KEY_ENV
from flows.workpool import render_pool_template

ROOT = Path(__file__).resolve().parents[2]


def test_the_job_mounts_the_key_secret_where_the_flow_reads_it() -> None:
    template = render_pool_template("r.example/h@sha256:" + "0" * 64)
    pod = template["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]
    [env] = [e for e in pod["containers"][0]["env"] if e["name"] == KEY_ENV]
    key_file = PurePosixPath(env["value"])
    deployments = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]
    job = next(d for d in deployments if d["name"] == "handoff-on-merge-kubernetes")
    assert KEY_ENV not in job["work_pool"]["job_variables"].get("env", {}), "a run sets it"
    [mount] = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "signing-key"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "signing-key"]
    assert key_file.parent == PurePosixPath(mount["mountPath"]) and mount["readOnly"]
    assert volume["secret"] == {"secretName": "handoff-signing-key", "optional": True}
    rbac = list(yaml.safe_load_all((ROOT / "manifests/rbac/handoff.yaml").read_text()))
    rules = [r for doc in rbac if doc["kind"] == "Role" for r in doc["rules"]]
    assert not [r for r in rules if "secrets" in r["resources"]], rules

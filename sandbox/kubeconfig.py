"""Kubeconfig files for the sandbox's users (admin, controllers, kubelet)."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml


def write_kubeconfig(path: Path, *, server: str, ca_crt: Path, user: str, token: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "handoff-sandbox",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_crt.read_bytes()).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {
                "name": "handoff-sandbox",
                "context": {"cluster": "handoff-sandbox", "user": user},
            }
        ],
        "current-context": "handoff-sandbox",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    tmp.chmod(0o600)
    tmp.replace(path)
    return path

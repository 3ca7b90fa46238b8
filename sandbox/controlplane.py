"""The sandbox's real Kubernetes control plane: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler as background processes on loopback.

`start` picks free ports, writes certs, a static token file and kubeconfigs, starts
the four processes and waits for the apiserver's /readyz. A process that dies at
start is named with the tail of its log. `stop` stops exactly the recorded processes.
"""

from __future__ import annotations

import contextlib
import secrets
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import yaml
from pydantic import BaseModel

from sandbox import procs
from sandbox.certs import Pki, ensure_pki
from sandbox.kubeconfig import write_kubeconfig
from sandbox.paths import k8s_binary

SERVICE_CIDR = "10.96.0.0/16"
READY_TIMEOUT_S = 60.0

# Static tokens: user, groups. The admin kubeconfig and the simulated kubelet use these.
_USERS = {
    "admin": ("admin", "system:masters"),
    "controller-manager": ("system:kube-controller-manager", ""),
    "scheduler": ("system:kube-scheduler", ""),
    "kubelet": ("system:node:handoff-kubelet", "system:nodes,system:masters"),
}


class ControlPlaneError(RuntimeError):
    """The control plane could not be started; the message says which part and why."""


class ControlPlane(BaseModel):
    """A running control plane, as recorded in the run directory's state."""

    server: str
    kubeconfig: Path
    kubelet_kubeconfig: Path
    ca_crt: Path
    processes: list[procs.ProcessRecord]
    apiserver_argv: list[str] = []

    def is_running(self) -> bool:
        return all(procs.is_alive(p) for p in self.processes)


def _write_tokens(etc: Path) -> dict[str, str]:
    tokens = {name: secrets.token_hex(16) for name in _USERS}
    lines = [f'{tokens[n]},{user},{user},"{groups}"' for n, (user, groups) in _USERS.items()]
    (etc / "tokens.csv").write_text("\n".join(lines) + "\n")
    (etc / "tokens.csv").chmod(0o600)
    return tokens


def _apiserver_argv(pki: Pki, etc: Path, etcd_port: int, port: int) -> list[str]:
    return [
        str(k8s_binary("kube-apiserver")),
        f"--etcd-servers=http://127.0.0.1:{etcd_port}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={port}",
        "--insecure-port=0",
        f"--tls-cert-file={pki.apiserver_crt}",
        f"--tls-private-key-file={pki.apiserver_key}",
        f"--client-ca-file={pki.ca_crt}",
        f"--kubelet-client-certificate={pki.kubelet_client_crt}",
        f"--kubelet-client-key={pki.kubelet_client_key}",
        "--kubelet-preferred-address-types=InternalIP",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        f"--token-auth-file={etc / 'tokens.csv'}",
        "--authorization-mode=RBAC",
        # The built-in `kubernetes` Service cannot have a 127.0.0.1 endpoint.
        "--endpoint-reconciler-type=none",
        "--allow-privileged=true",
    ]


def _controller_argv(pki: Pki, etc: Path, port: int) -> list[str]:
    return [
        str(k8s_binary("kube-controller-manager")),
        f"--kubeconfig={etc / 'controller-manager.kubeconfig'}",
        "--leader-elect=false",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki.sa_key}",
        f"--root-ca-file={pki.ca_crt}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        "--port=0",
        "--allocate-node-cidrs=false",
        # Bind PersistentVolumeClaims within a second, not the default 15 s.
        "--pvclaimbinder-sync-period=1s",
    ]


def _scheduler_argv(etc: Path, port: int) -> list[str]:
    return [
        str(k8s_binary("kube-scheduler")),
        f"--kubeconfig={etc / 'scheduler.kubeconfig'}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        "--port=0",
    ]


def _etcd_argv(data: Path, client: int, peer: int) -> list[str]:
    return [
        "etcd",
        "--name=handoff-sandbox",
        f"--data-dir={data}",
        f"--listen-client-urls=http://127.0.0.1:{client}",
        f"--advertise-client-urls=http://127.0.0.1:{client}",
        f"--listen-peer-urls=http://127.0.0.1:{peer}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
        f"--initial-cluster=handoff-sandbox=http://127.0.0.1:{peer}",
        "--unsafe-no-fsync",
    ]


def _wait_ready(url: str, ca: Path, token: str, started: list[procs.ProcessRecord]) -> None:
    """Poll /readyz until 200; fail at once, with its log, if a process dies."""
    context = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + READY_TIMEOUT_S
    last = "no answer"
    with httpx.Client(
        verify=context, timeout=2.0, headers={"Authorization": f"Bearer {token}"}
    ) as c:
        while time.monotonic() < deadline:
            _raise_if_dead(started)
            try:
                response = c.get(f"{url}/readyz")
                if response.status_code == 200:
                    return
                last = f"HTTP {response.status_code}: {response.text[:200]}"
            except httpx.HTTPError as exc:
                last = repr(exc)
            time.sleep(0.2)
    raise ControlPlaneError(
        f"kube-apiserver at {url} not ready after {READY_TIMEOUT_S:.0f} s: {last}"
    )


def start(run_dir: Path, extra_args: dict[str, list[str]] | None = None) -> ControlPlane:
    """Start a fresh control plane whose state lives under run_dir.

    extra_args adds flags per component name (e.g. feature gates for kube-apiserver).
    """
    extra = extra_args or {}
    etc, logs = run_dir / "etc", run_dir / "logs"
    etc.mkdir(parents=True, exist_ok=True)
    pki = ensure_pki(run_dir / "pki")
    tokens = _write_tokens(etc)
    etcd_port, peer_port, api_port, cm_port, sched_port = (procs.free_port() for _ in range(5))
    server = f"https://127.0.0.1:{api_port}"
    configs = {
        name: write_kubeconfig(
            etc / f"{name}.kubeconfig",
            server=server,
            ca_crt=pki.ca_crt,
            user=_USERS[name][0],
            token=tokens[name],
        )
        for name in _USERS
    }
    admin = write_kubeconfig(
        run_dir / "kubeconfig",
        server=server,
        ca_crt=pki.ca_crt,
        user="admin",
        token=tokens["admin"],
    )
    apiserver = [*_apiserver_argv(pki, etc, etcd_port, api_port), *extra.get("kube-apiserver", [])]
    started: list[procs.ProcessRecord] = []
    try:
        for name, argv in (
            ("etcd", [*_etcd_argv(run_dir / "etcd", etcd_port, peer_port), *extra.get("etcd", [])]),
            ("kube-apiserver", apiserver),
        ):
            started.append(procs.spawn(name, argv, logs / f"{name}.log"))
        _wait_ready(server, pki.ca_crt, tokens["admin"], started)
        for name, argv in (
            ("kube-controller-manager", _controller_argv(pki, etc, cm_port)),
            ("kube-scheduler", _scheduler_argv(etc, sched_port)),
        ):
            started.append(procs.spawn(name, [*argv, *extra.get(name, [])], logs / f"{name}.log"))
        _check_still_running(started, settle_s=1.0)
    except BaseException:
        for record in reversed(started):
            procs.stop(record)
        raise
    return ControlPlane(
        server=server,
        kubeconfig=admin,
        kubelet_kubeconfig=configs["kubelet"],
        ca_crt=pki.ca_crt,
        processes=started,
        apiserver_argv=apiserver,
    )


def _check_still_running(started: list[procs.ProcessRecord], *, settle_s: float) -> None:
    deadline = time.monotonic() + settle_s
    while time.monotonic() < deadline:
        _raise_if_dead(started)
        time.sleep(0.1)


def _raise_if_dead(started: list[procs.ProcessRecord]) -> None:
    """Name the first process that exited, with the tail of its log."""
    for record in started:
        if not procs.is_alive(record):
            raise ControlPlaneError(
                f"{record.name} exited during start-up; last lines of {record.log}:\n"
                f"{procs.log_tail(record.log)}"
            )


def stop(plane: ControlPlane) -> list[str]:
    """Stop the recorded processes, newest first; return the names that were running."""
    return [p.name for p in reversed(plane.processes) if procs.stop(p)]


@contextlib.contextmanager
def apiserver_outage(plane: ControlPlane) -> Iterator[None]:
    """The kube-apiserver killed (SIGKILL, as a crash) for the block, then started again
    with the same flags, port and etcd data; returns once /readyz answers. The plane's
    process record is updated, so `stop` finds the new process."""
    index, record = next(
        (i, p) for i, p in enumerate(plane.processes) if p.name == "kube-apiserver"
    )
    procs.stop(record, grace_s=0)
    try:
        yield
    finally:
        fresh = procs.spawn(record.name, plane.apiserver_argv, record.log)
        plane.processes[index] = fresh
        _wait_ready(plane.server, plane.ca_crt, _admin_token(plane.kubeconfig), [fresh])


def _admin_token(kubeconfig: Path) -> str:
    return str(yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"])

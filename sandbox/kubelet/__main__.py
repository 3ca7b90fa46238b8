"""The simulated kubelet: ``python -m sandbox.kubelet --run-dir DIR --kubeconfig FILE
--cluster FILE --registry URL``.

Start-up: kill container processes a crashed predecessor left behind, start the HTTPS
server (logs, port-forward), register the nodes with its port, heartbeat them, and
watch the pods bound to them. When all that runs, it writes ``DIR/kubelet/ready.json``
and logs ``kubelet ready``. SIGTERM or SIGINT stops every pod's processes and exits 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from kubernetes import config

from sandbox.certs import Pki
from sandbox.cluster import ClusterConfigError, load_cluster
from sandbox.kubelet.context import NodeContext
from sandbox.kubelet.events import EventRecorder
from sandbox.kubelet.images import ImageStore
from sandbox.kubelet.ipam import IpPool
from sandbox.kubelet.launch import ready_file
from sandbox.kubelet.nodes import NodeHeartbeat, ensure_runtime_class, register_node
from sandbox.kubelet.partition import is_partitioned
from sandbox.kubelet.pods import PodManager, watch_node_pods
from sandbox.kubelet.runtime import PodTable
from sandbox.kubelet.spawner import Spawner, kill_leftovers, records_dir

log = logging.getLogger("sandbox.kubelet")
SHUTDOWN_GRACE_S = 3.0  # well inside the 10 s `sandbox down` allows before SIGKILL


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m sandbox.kubelet", description=__doc__)
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--cluster", type=Path, required=True)
    parser.add_argument("--registry", required=True, help="sandbox registry URL")
    parser.add_argument("--pki", type=Path, help="sandbox PKI directory (default RUN_DIR/pki)")
    return parser.parse_args(argv)


def _start_server(table: PodTable, pki: Pki):  # type: ignore[no-untyped-def]
    try:
        from sandbox.kubelet.server import start_server
    except ImportError as exc:
        raise SystemExit(
            f"kubelet: cannot import sandbox.kubelet.server ({exc}); the kubelet needs its "
            "HTTPS server for logs and port-forward: restore sandbox/kubelet/server.py"
        ) from exc
    return start_server(table, pki=pki, port=0)


def _write_ready(run_dir: Path, *, port: int, nodes: list[str]) -> None:
    path = ready_file(run_dir)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "port": port, "nodes": nodes}))
    tmp.replace(path)


def run(args: argparse.Namespace, stop: threading.Event) -> None:
    run_dir = args.run_dir.resolve()
    ready_file(run_dir).unlink(missing_ok=True)
    for record in kill_leftovers(records_dir(run_dir)):
        log.info("killed leftover container process %s (pid %d)", record.name, record.pid)
    ctx = _context(args, run_dir)
    server = _start_server(ctx.table, Pki(args.pki or run_dir / "pki"))
    ensure_runtime_class(ctx.api)
    for node in ctx.cluster.nodes:
        register_node(ctx.api, node, server.port)
    names = [node.name for node in ctx.cluster.nodes]
    cut_off = partial(is_partitioned, run_dir / "kubelet")
    heartbeat = NodeHeartbeat(ctx.api, names, cut_off=cut_off).start()
    manager = PodManager(ctx)
    for name in names:
        watch = threading.Thread(
            target=watch_node_pods,
            args=(ctx, manager, name, stop),
            name=f"watch-{name}",
            daemon=True,
        )
        watch.start()
    _write_ready(run_dir, port=server.port, nodes=names)
    log.info("kubelet ready: nodes %s, server port %d", ",".join(names), server.port)
    while not stop.wait(1.0):
        pass
    log.info("kubelet stopping: stopping the processes of %d pods", len(ctx.table.snapshot()))
    manager.shutdown(SHUTDOWN_GRACE_S)
    heartbeat.stop()
    server.stop()
    ctx.spawner.close()


def _context(args: argparse.Namespace, run_dir: Path) -> NodeContext:
    cluster = load_cluster(args.cluster)
    api = config.new_client_from_config(config_file=str(args.kubeconfig))
    return NodeContext(
        api=api,
        cluster=cluster,
        images=ImageStore(args.registry),
        spawner=Spawner(records_dir(run_dir)).start(),
        events=EventRecorder(api),
        table=PodTable(run_dir / "pod-ports.json"),
        ips=IpPool(cluster.pod_cidr),
        pods_dir=run_dir / "kubelet" / "pods",
    )


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        stream=sys.stdout,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per registry request
    args = parse_args(argv)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        run(args, stop)
    except ClusterConfigError as exc:
        log.error("%s", exc)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

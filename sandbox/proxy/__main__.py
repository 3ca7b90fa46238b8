"""`python -m sandbox.proxy --run-dir DIR --kubeconfig FILE`: run the service proxy.

`--mode iptables` (the default) routes as kube-proxy does today: one random endpoint per
new connection, a refusal reaches the client. `--mode userspace` is the forgiving mode of
kube-proxy's removed userspace proxy (the next endpoint is tried when one refuses).
`--min-sync-period` paces syncs as kube-proxy's `--iptables-min-sync-period` (1 s). Their
defaults come from HANDOFF_PROXY_MODE and HANDOFF_PROXY_MIN_SYNC_PERIOD_S where set, so a
sandbox started from an environment that sets them runs its proxy that way.

Prints `service proxy ready: <run-dir>/proxy.json` once the first complete list of
Service listeners is written; SIGTERM or SIGINT stop it and remove that file. If it can
no longer follow the Services it exits non-zero rather than serve stale listeners.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from kubernetes import client

from sandbox.proxy.addresses import addresses_file
from sandbox.proxy.informer import (
    Informer,
    ListFunc,
    Obj,
    api_client,
    endpoint_slices_lister,
)
from sandbox.proxy.service_proxy import (
    MODES,
    SERVICES,
    SLICES,
    Change,
    ProxySettings,
    ServiceProxy,
)


def _start_informers(kubeconfig: Path, post: Callable[[Change], None]) -> list[Informer]:
    api = api_client(str(kubeconfig))
    core = client.CoreV1Api(api)
    return [
        _informer(kind, list_func, post)
        for kind, list_func in (
            (SERVICES, core.list_service_for_all_namespaces),
            (SLICES, endpoint_slices_lister(api)),
        )
    ]


def _informer(kind: str, list_func: ListFunc, post: Callable[[Change], None]) -> Informer:
    """A started informer posting its lists and events of ``kind`` as changes."""

    def on_list(items: list[Obj]) -> None:
        post(Change(kind, listing=items))

    def on_event(event: str, obj: Obj) -> None:
        post(Change(kind, event=event, obj=obj))

    return Informer(list_func, on_list=on_list, on_event=on_event).start()


async def serve(run_dir: Path, kubeconfig: Path, settings: ProxySettings) -> None:
    loop = asyncio.get_running_loop()
    addresses_file(run_dir).unlink(missing_ok=True)  # never show a previous run's ports
    proxy = ServiceProxy(run_dir, settings)
    informers = _start_informers(kubeconfig, proxy.poster(loop))
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    ready = f"service proxy ready: {addresses_file(run_dir)}"
    runner = asyncio.create_task(proxy.run(on_ready=lambda: print(ready, flush=True)))
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait([runner, stopping], return_when=asyncio.FIRST_COMPLETED)
    for informer in informers:
        informer.stop()
    runner.cancel()
    stopping.cancel()
    try:
        await runner  # raises what made it stop, if it stopped on its own
    except asyncio.CancelledError:
        pass
    finally:
        await proxy.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sandbox.proxy", description=__doc__)
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    defaults = ProxySettings.from_env()
    parser.add_argument("--mode", choices=MODES, default=defaults.mode)
    parser.add_argument(
        "--min-sync-period", type=float, default=defaults.min_sync_period_s, metavar="SECONDS"
    )
    args = parser.parse_args(argv)
    settings = ProxySettings(mode=args.mode, min_sync_period_s=max(0.0, args.min_sync_period))
    logging.basicConfig(
        level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(levelname)s %(message)s"
    )
    logging.info(
        "service proxy mode %s, min sync period %.3g s", settings.mode, settings.min_sync_period_s
    )
    asyncio.run(serve(args.run_dir, args.kubeconfig, settings))


if __name__ == "__main__":
    main()

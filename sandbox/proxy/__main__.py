"""`python -m sandbox.proxy --run-dir DIR --kubeconfig FILE`: run the service proxy.

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
from sandbox.proxy.informer import Informer, api_client, endpoint_slices_lister
from sandbox.proxy.service_proxy import SERVICES, SLICES, Change, ServiceProxy


def _start_informers(kubeconfig: Path, post: Callable[[Change], None]) -> list[Informer]:
    api = api_client(str(kubeconfig))
    core = client.CoreV1Api(api)
    return [
        Informer(
            list_func,
            on_list=lambda items, k=kind: post(Change(k, listing=items)),
            on_event=lambda event, obj, k=kind: post(Change(k, event=event, obj=obj)),
        ).start()
        for kind, list_func in (
            (SERVICES, core.list_service_for_all_namespaces),
            (SLICES, endpoint_slices_lister(api)),
        )
    ]


async def serve(run_dir: Path, kubeconfig: Path) -> None:
    loop = asyncio.get_running_loop()
    addresses_file(run_dir).unlink(missing_ok=True)  # never show a previous run's ports
    proxy = ServiceProxy(run_dir)
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
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(levelname)s %(message)s"
    )
    asyncio.run(serve(args.run_dir, args.kubeconfig))


if __name__ == "__main__":
    main()

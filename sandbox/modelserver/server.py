"""Wiring one model-server process: model, engine, HTTP handler, until drained.

SIGTERM starts a drain: new requests get 503, accepted ones finish, then the process exits 0;
with `shutdown_timeout_s` (vLLM's `--shutdown-timeout`) those still running that long after
it are cut.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import socket
import sys
import time

from sandbox.modelserver.api.errors import unframeable
from sandbox.modelserver.api.generate import Runtime
from sandbox.modelserver.api.groundtruth import GroundTruth
from sandbox.modelserver.api.lifecycle import Lifecycle
from sandbox.modelserver.api.plans import Served
from sandbox.modelserver.api.routes import build_handler
from sandbox.modelserver.config import ServerConfig
from sandbox.modelserver.engine.clock import Dispatch
from sandbox.modelserver.engine.engine import Engine
from sandbox.modelserver.engine.priority import LOOP_PRIORITY, use_realtime
from sandbox.modelserver.engine.schedule import make_policy
from sandbox.modelserver.engine.sequence import Deliver, Event
from sandbox.modelserver.faults import Fault, crash_without_cuda
from sandbox.modelserver.httpd.server import serve_until_drained
from sandbox.modelserver.known import load_known
from sandbox.modelserver.lm.blas import single_threaded_blas
from sandbox.modelserver.lm.model import ModelSpec
from sandbox.modelserver.pacer import Pacer
from sandbox.modelserver.profiles import WEIGHT_SEEDS

# A thread waiting for the GIL gets it within 0.5 ms rather than the default 5 ms.
SWITCH_INTERVAL_S = 0.0005
GC_THRESHOLDS = (10_000, 20, 20)  # fewer young collections; each is short after a freeze
HALVED = 0.5  # the halved_logits fault's scale


def run_server(config: ServerConfig) -> None:
    if config.has(Fault.crash_on_start):
        crash_without_cuda()
    profile = config.resolved_profile()
    spec = ModelSpec(
        WEIGHT_SEEDS[profile.weights],
        profile.precision,
        config.has(Fault.zero_key_band),
        logit_scale=HALVED if config.has(Fault.halved_logits) else 1.0,
    )
    single_threaded_blas()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    _load(config)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((config.host, config.port))
    sock.listen(1024)
    asyncio.run(_serve(config, spec, sock))


async def _serve(config: ServerConfig, spec: ModelSpec, sock: socket.socket) -> None:
    pacer = Pacer(asyncio.get_running_loop())
    runtime = _runtime(config, spec, pacer)
    profile = config.resolved_profile()
    known = load_known(profile.knows, forget=config.has(Fault.forgets_answers))
    served = Served(profile.model_id, profile.max_model_len, known)
    handler = build_handler(runtime, served, config.surface, config.metrics_dialect())
    host, port = sock.getsockname()[:2]
    runtime.engine.start()
    _quiet_gc()
    if config.realtime:  # only now: start-up work at RT priority would stall other servers
        use_realtime(LOOP_PRIORITY)
    try:
        await serve_until_drained(
            sock,
            handler,
            unframeable,
            begin_drain=runtime.lifecycle.begin_drain,
            drained=lambda: runtime.lifecycle.drained,
            on_listening=lambda: _announce(runtime.lifecycle, f"http://{host}:{port}"),
            abort_after_s=config.shutdown_timeout_s,
        )
    finally:
        runtime.engine.stop()
        pacer.close()
        runtime.ground_truth.close()


def _runtime(config: ServerConfig, spec: ModelSpec, pacer: Pacer) -> Runtime:
    """Engine, lifecycle and ground-truth file, with the config's faults and time scaling."""
    cold_start_s = config.slow_start_s * config.time_scale if config.has(Fault.slow_start) else 0
    engine = Engine(
        spec,
        make_policy(config.resolved_profile(), scale=config.slowdown * config.time_scale),
        dispatch=_dispatcher(pacer),
        stall_after=config.stall_after_tokens if config.has(Fault.stall) else None,
        realtime=config.realtime,
    )
    keep_alive_s = None if config.keep_alive_ms is None else config.keep_alive_ms / 1000
    lifecycle = Lifecycle(cold_start_ns=int(cold_start_s * 1e9))
    return Runtime(
        engine,
        lifecycle,
        GroundTruth(config.ground_truth),
        keep_alive_s,
        delay_scale=config.delay_scale,
    )


def _load(config: ServerConfig) -> None:
    """Load the model before opening the port, as candle-vllm does: until then a client
    (or a probe) finds the port closed, not a server answering 503."""
    load_s = config.load_s * config.time_scale
    if load_s > 0:
        print(f"loading the model ({load_s:g} s); port {config.port} opens after", file=sys.stderr)
        time.sleep(load_s)


def _announce(lifecycle: Lifecycle, url: str) -> None:
    lifecycle.listening()
    print(f"listening on {url}", flush=True)


def _quiet_gc() -> None:
    """Keep the collector's pauses short: a full collection over everything imported took
    14 ms (a stall of every stream); frozen objects are never traversed again."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def _deliver_all(events: list[tuple[Deliver, Event]]) -> None:
    for deliver, event in events:
        deliver(event)


def _dispatcher(pacer: Pacer) -> Dispatch:
    def dispatch(due_ns: int, events: list[tuple[Deliver, Event]]) -> None:
        if events:
            pacer.schedule_threadsafe(due_ns, functools.partial(_deliver_all, events))

    return dispatch

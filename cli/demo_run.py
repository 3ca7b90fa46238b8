"""`handoff demo`: the seeds' two handoffs, end to end, on the sandbox.

1. Sandbox up (control plane, simulated GPU nodes, registry, service proxy, Prefect).
2. The before state: coder on GPTQ 30B-A3B, clef-serve on PyTorch, a reasoning model.
3. clef-candle: the GDN conv fix is merged but CI has not published :sm70 yet, so
   the handoff waits, rejecting the old build by its revision; CI publishes, the
   handoff pins the new digest, gates pass, the Service swaps, clef-serve retires.
   Client traffic runs through the Service the whole time.
4. coder-14b-fp16: TP=2 needs two cards and one is free: in place. The plan, its
   declared downtime and the gate policy are approved while the old pods serve; then
   the gates decide alone, and the measured downtime is reported beside the declared.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from functools import partial
from pathlib import Path

from pydantic import BaseModel
from rich.console import Console

from flows.kube.client import Kube, connect
from flows.logfile import logs_to
from flows.report.attest import KEY_ENV, keygen
from flows.report.links import run_link
from flows.report.stepview import Listener, StepEvent, listening, shown_live
from sandbox import manager
from sandbox.prefect_server import client_env
from sandbox.proxy import address_of
from sandbox.seed import (
    CLIENT_API,
    World,
    apply_before_state,
    create_world,
    merge_gdn_fix,
    publish_candle,
    remove_world,
)
from sandbox.state import SandboxState
from sandbox.traffic import ClientLoad

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "manifests" / "handoffs"
CI_DELAY_S = 20.0
NAMESPACE = "llm-serving"


class DemoResult(BaseModel):
    spec: str
    outcome: str
    strategy: str | None
    image: str | None
    requests_ok: int
    requests_failed: int
    unavailable_s: float
    declared_estimate_s: float | None  # in place, with a gate pass
    declared_downtime_s: float | None  # in place, at most
    measured_downtime_s: float | None  # in place, as the flow saw its Endpoints
    seconds: float


def prepare(state: SandboxState, say: Callable[[str], None]) -> tuple[World, Kube]:
    """The seeds' repositories, images and before state, Ready (a rerun starts afresh)."""
    kube = connect(state.kubeconfig)
    remove_world(state.run_dir / "src", state.kubeconfig, say)
    world = create_world(state.run_dir / "src", state.registry_url or "")
    os.environ.update(world.environment())
    os.environ.setdefault("IMAGE_POLL_INTERVAL_S", "2")
    apply_before_state(state.kubeconfig, world)
    say(
        "before state applied: coder on GPTQ 30B-A3B (1 GPU), clef-serve on PyTorch "
        "(1 GPU), reasoning-long (1 GPU); one V100 free"
    )
    wait_ready(kube, ("candle-vllm", "clef-serve", "reasoning-long"))
    return world, kube


def wait_ready(kube: Kube, names: tuple[str, ...], timeout_s: float = 180.0) -> None:
    from flows.kube.read import read_deployment

    deadline = time.monotonic() + timeout_s
    for name in names:
        while True:
            d = read_deployment(kube, NAMESPACE, name)
            if d is not None and d.ready_replicas >= d.replicas:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"Deployment {NAMESPACE}/{name} not Ready after {timeout_s} s")
            time.sleep(0.5)


def run_handoff(
    state: SandboxState,
    spec: str,
    service: str,
    *,
    port: int,
    auto_approve: bool,
    console: Console,
) -> DemoResult:
    """One handoff as a Prefect flow, with client traffic through the Service and its
    step table live on `console`.

    The clients name no model, so they keep working whichever model the Service serves,
    and send what the Service's clients send (chat to clef-serve: candle-vllm has no
    raw completions).
    """
    from prefect import tags

    from flows.handoff import handoff

    started = time.monotonic()
    url = "http://" + address_of(state.run_dir, NAMESPACE, service, port)
    outcome, image, strategy = "failed", None, None
    estimate = declared = measured = None
    with (
        ClientLoad(url, api=CLIENT_API[service], streams=4) as load,
        tags(f"service:{service}", f"handoff:{spec}"),
        shown_live(console, title=f"handoff {spec}"),
        listening(link_printer(console, spec)),
    ):
        try:
            record = handoff(
                str(SPECS / f"{spec}.yaml"),
                auto_approve=auto_approve,
                kubeconfig=str(state.kubeconfig),
            )
            outcome, image, strategy = record.outcome, record.image, record.strategy
            estimate, declared = record.downtime_estimate_s, record.downtime_bound_s
            measured = record.downtime_measured_s
        except Exception as exc:
            outcome = f"failed: {exc}"
        time.sleep(2.0)  # traffic continues a moment after the retirement
    return DemoResult(
        spec=spec,
        outcome=outcome,
        strategy=strategy,
        image=image,
        requests_ok=load.succeeded,
        requests_failed=len(load.failed),
        unavailable_s=round(load.unavailable_s(), 2),
        declared_estimate_s=estimate,
        declared_downtime_s=declared,
        measured_downtime_s=measured,
        seconds=round(time.monotonic() - started, 1),
    )


def link_printer(console: Console, spec: str) -> Listener:
    """Print the run's page in the Prefect UI once its first step starts: with Prefect's
    log lines in a file, this is where an approver finds the run."""
    printed: list[str] = []

    def hear(event: StepEvent) -> None:
        from prefect.runtime import flow_run

        if not printed and event.state == "started":
            printed.append(str(flow_run.id))
            console.print(f"handoff {spec}: {run_link(printed[0])}")

    return hear


def ci_after_merge(world: World, say: Callable[[str], None]) -> threading.Thread:
    """Merge the fix now; CI publishes the fixed :sm70 after CI_DELAY_S."""
    fix = merge_gdn_fix(world)
    say(
        f"merged the GDN conv fix {fix[:12]} into candle-vllm main; CI publishes :sm70 "
        f"in {CI_DELAY_S:.0f} s (until then :sm70 is the old build without the fix)"
    )

    def publish() -> None:
        digest = publish_candle(world, delay_s=CI_DELAY_S)
        say(f"CI published candle-vllm:sm70 {digest[:19]}… built from {fix[:12]}")

    thread = threading.Thread(target=publish, daemon=True, name="ci")
    thread.start()
    return thread


def signing_key(run_dir: Path, say: Callable[[str], None]) -> Path:
    """The demo's Ed25519 key pair, made once per sandbox: the handoffs sign their evidence
    bundles with it, and `handoff history RUN_ID --verify` checks them."""
    key = run_dir / "handoff-signing.key"
    if not key.exists():
        keygen(key)
    say(f"evidence bundles signed with {key} (public key {key.with_suffix('.pub')})")
    return key


def log_file(run_dir: Path) -> Path:
    """Where the demo's log lines go unless --verbose."""
    return run_dir / "logs" / "demo.log"


def main(
    run_dir: Path, *, auto_approve: bool, console: Console, verbose: bool = False
) -> list[DemoResult]:
    say = console.print
    say("[bold]handoff demo[/bold]: bringing the sandbox up")
    # Up first: it accepts only an empty run directory or its own, and wipes the latter,
    # so the log file is opened inside it afterwards.
    state, _ = manager.up(run_dir)
    if not verbose:
        say(f"Prefect's log lines: {log_file(run_dir)} (--verbose shows them here)")
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    # Prefect read its settings when it was imported: the sandbox's server and its
    # credentials are set for this process explicitly, and in the environment for the
    # processes it starts.
    prefect = client_env(run_dir, state.prefect_api_url or "")
    with (
        temporary_settings(
            updates={
                PREFECT_API_URL: prefect["PREFECT_API_URL"],
                PREFECT_API_AUTH_STRING: prefect.get("PREFECT_API_AUTH_STRING"),
            }
        ),
        nullcontext() if verbose else logs_to(log_file(run_dir)),
    ):
        os.environ.update(prefect)
        os.environ["KUBECONFIG"] = str(state.kubeconfig)
        say(f"Prefect UI: {(state.prefect_api_url or '').removesuffix('/api')}")
        os.environ[KEY_ENV] = str(signing_key(run_dir, say))
        world, _kube = prepare(state, say)
        ci = ci_after_merge(world, say)
        one = partial(run_handoff, state, port=80, auto_approve=auto_approve, console=console)
        results = [one("clef-candle", "clef-serve")]
        ci.join(timeout=CI_DELAY_S + 60)
        results.append(one("coder-14b-fp16", "coder-predictor"))
    return results

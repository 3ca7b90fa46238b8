"""`handoff plan|run|approve|rollback|history`: the daily commands."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markdown import Markdown

console = Console()
SpecArg = Annotated[
    Path, typer.Argument(help="Handoff spec (YAML), e.g. manifests/handoffs/clef-candle.yaml.")
]
KubeconfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        help="Cluster to act on (default: $KUBECONFIG, ~/.kube/config, or in-cluster).",
    ),
]


def _fail(message: str, code: int = 1) -> typer.Exit:
    console.print(f"[red]{message}[/red]")
    return typer.Exit(code)


def _require_prefect() -> None:
    """Exit 2, before anything is done, when the Prefect API set refuses our credentials."""
    from prefect.settings import get_current_settings

    from flows.prefect_access import PrefectRefused, require_access

    api = get_current_settings().api.url
    try:
        if api:
            require_access(api)
    except PrefectRefused as exc:
        raise _fail(str(exc), 2) from None


def plan(spec: SpecArg, kubeconfig: KubeconfigOpt = None) -> None:
    """Read the cluster, choose a strategy and dry-run every write. Writes nothing."""
    from flows.errors import HandoffError
    from flows.kube.client import connect
    from flows.plan import make_plan
    from flows.report.markdown import plan_markdown
    from flows.spec import load_spec

    try:
        handoff_spec = load_spec(spec)
        the_plan = make_plan(connect(kubeconfig), handoff_spec)
    except HandoffError as exc:
        raise _fail(str(exc), 2) from None
    console.print(Markdown(f"# Plan: {handoff_spec.name}\n\n" + plan_markdown(the_plan)))
    if the_plan.refused:
        raise typer.Exit(1)


def run(
    spec: SpecArg,
    kubeconfig: KubeconfigOpt = None,
    auto_approve: Annotated[
        bool, typer.Option("--auto-approve", help="Approve without pausing (unattended use).")
    ] = False,
) -> None:
    """Run (or resume) the handoff as a Prefect flow; rolls back on any failure."""
    from prefect import tags

    from flows.errors import HandoffError
    from flows.handoff import handoff
    from flows.report.stepview import shown_live
    from flows.spec import load_spec

    try:
        handoff_spec = load_spec(spec)
    except HandoffError as exc:
        raise _fail(str(exc), 2) from None
    if (
        handoff_spec.approval.required
        and not auto_approve
        and not os.environ.get("PREFECT_API_URL")
    ):
        raise _fail(
            "approval needs a Prefect server to resume the paused run from the UI or "
            "`handoff approve`: start one (`prefect server start`) and set "
            "PREFECT_API_URL, or pass --auto-approve",
            2,
        )
    _require_prefect()
    with (
        tags(f"service:{handoff_spec.service}", f"handoff:{handoff_spec.name}"),
        shown_live(console),
    ):
        try:
            record = handoff(
                str(spec.resolve()),
                auto_approve=auto_approve,
                kubeconfig=str(kubeconfig) if kubeconfig else None,
            )
        except Exception as exc:
            raise _fail(f"handoff {handoff_spec.name} failed: {exc}") from None
    console.print(f"[green]handoff {record.spec}: {record.outcome}[/green] image {record.image}")


def approve(
    run_id: Annotated[str, typer.Argument(help="The paused flow run's id (shown in the UI).")],
    approver: Annotated[str, typer.Option(help="Your name, recorded with the handoff.")],
    reason: Annotated[str, typer.Option(help="Why.")] = "",
    reject: Annotated[bool, typer.Option("--reject", help="Reject instead of approving.")] = False,
    key: Annotated[
        Path | None,
        typer.Option(
            help="Your Ed25519 private key (`handoff keygen`): signs the answer, as a spec "
            "that lists approvers requires."
        ),
    ] = None,
) -> None:
    """Answer a paused handoff's approval from the command line (the UI's form does the same,
    unsigned)."""
    from uuid import UUID

    from prefect.flow_runs import resume_flow_run

    decision = "reject" if reject else "approve"
    _require_prefect()
    answer = {"approver": approver, "decision": decision, "reason": reason}
    try:
        if key is not None:
            answer["signature"] = _signature(run_id, key, answer)
        resume_flow_run(UUID(run_id), run_input=answer)
    except Exception as exc:
        raise _fail(f"could not resume flow run {run_id}: {exc}", 2) from None
    signed = " (signed)" if key is not None else ""
    console.print(f"{decision}d flow run {run_id} as {approver}{signed}")


def _signature(run_id: str, key: Path, answer: dict[str, str]) -> str:
    """The answer signed for the pause the run waits at now."""
    from uuid import UUID

    from prefect.client.orchestration import get_client

    from flows.approval_identity import Answer, sign_answer

    with get_client(sync_client=True) as client:
        state = client.read_flow_run(UUID(run_id)).state
    pause = state.state_details.pause_key if state and state.is_paused() else None
    if not pause:
        where = state.type.value if state else "no state"
        raise ValueError(f"flow run {run_id} is not paused ({where}): there is nothing to sign")
    return sign_answer(key, Answer(flow_run=run_id, pause=pause, **answer))


def rollback(
    spec: SpecArg,
    kubeconfig: KubeconfigOpt = None,
    reason: Annotated[str, typer.Option(help="Recorded as the cause.")] = "manual rollback",
) -> None:
    """Restore the Service and workloads from the snapshot recorded on the Service (under
    the Service's Lease: refused while a live handoff holds it)."""
    from flows.errors import HandoffError
    from flows.kube.client import connect
    from flows.rollback import rollback_by_hand
    from flows.spec import load_spec

    try:
        handoff_spec = load_spec(spec)
        ledger = rollback_by_hand(connect(kubeconfig), handoff_spec, cause=reason)
    except HandoffError as exc:
        raise _fail(str(exc), 2) from None
    if ledger is None:
        console.print(f"Service {handoff_spec.service} has no handoff recorded: nothing to undo")
    else:
        console.print(f"handoff {ledger.handoff_id}: {ledger.phase}")


def _write_timeline(entry: dict, out: Path) -> None:
    from flows.report.timeline import Timeline
    from flows.report.timeline_plot import write_timeline

    try:
        written = write_timeline(Timeline.model_validate(entry), out)
    except OSError as exc:
        message = f"cannot write the timeline into {out}: {exc}; choose a writable --out"
        raise _fail(message, 2) from None
    typer.echo(f"wrote {written}", err=True)


def _verify(entry: dict, public_key: Path | None, kubeconfig: Path | None) -> None:
    """Print each check of the handoff's evidence bundle; exit 1 naming the failed ones."""
    from flows.errors import HandoffError
    from flows.kube.client import connect
    from flows.report import attest

    try:
        if public_key is not None:
            public = attest.load_public_key(public_key)
        elif os.environ.get(attest.KEY_ENV):
            public = attest.load_public_key(Path(os.environ[attest.KEY_ENV]))
        else:
            public = None
        kube = connect(kubeconfig)
        try:
            checks = attest.verify(kube, entry, public)
        finally:
            kube.close()
    except HandoffError as exc:
        raise _fail(str(exc), 2) from None
    for check in checks:
        typer.echo(check.line())
    failed = [c.what for c in checks if not c.ok]
    if failed:
        raise _fail(
            f"handoff {entry.get('handoff_id')}: evidence bundle not verified: {', '.join(failed)}"
        )
    typer.echo(f"handoff {entry.get('handoff_id')}: evidence bundle verified")


def keygen(
    key: Annotated[
        Path, typer.Argument(help="Where to write the private key (its public key: KEY.pub).")
    ] = Path("handoff-signing.key"),
) -> None:
    """Make an Ed25519 key pair: the flow signs its evidence bundles with the private key
    ($HANDOFF_SIGNING_KEY_FILE; in the cluster a Secret mounted as a file), an approver
    signs answers with theirs; anyone checks with the public key."""
    from flows.report.attest import keygen as make_pair

    try:
        public = make_pair(key)
    except FileExistsError:
        raise _fail(f"{key} exists: a key is never overwritten; choose another path", 2) from None
    except OSError as exc:
        raise _fail(f"cannot write {key}: {exc}; choose a writable path", 2) from None
    typer.echo(f"wrote {key} (private, mode 0600) and {public}")
    typer.echo(
        f"in the cluster: kubectl -n llm-serving create secret generic handoff-signing-key "
        f"--from-file=key={key}"
    )


def history(
    run_id: Annotated[
        str | None,
        typer.Argument(help="One handoff in full (its id or flow run id, or a prefix of it)."),
    ] = None,
    namespace: Annotated[str, typer.Option(help="Namespace of the Services.")] = "llm-serving",
    service: Annotated[str | None, typer.Option(help="Only this Service.")] = None,
    output: Annotated[
        str | None,
        typer.Option("--output", "-o", help="wide, json or yaml (default: columns for 80 chars)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Same as -o json.")] = False,
    out: Annotated[
        Path | None,
        typer.Option(
            help="With RUN_ID: write its timeline picture (steps on one time axis over the "
            "Service's ready endpoints) here as timeline-HANDOFF_ID.png."
        ),
    ] = None,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="With RUN_ID: check its evidence bundle (signature, digest against the "
            "history entry) and that the Service still runs its subject; exits 1 naming "
            "what failed.",
        ),
    ] = False,
    public_key: Annotated[
        Path | None,
        typer.Option(
            help="With --verify: the Ed25519 public key (PEM) to check the signature with "
            "(default: the public half of $HANDOFF_SIGNING_KEY_FILE)."
        ),
    ] = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Past handoffs: when, service, outcome, strategy, approver, time taken (from the
    Services, and from Prefect's runs when PREFECT_API_URL answers)."""
    import yaml

    from cli.cluster import kubeconfig_or_sandbox
    from flows.errors import HandoffError
    from flows.prefect_access import PrefectRefused
    from flows.report import history_view
    from flows.report.history import collect_history

    output = "json" if as_json else output
    if output not in (None, "wide", "json", "yaml"):
        raise _fail(f"-o {output}: expected wide, json or yaml", 2)
    if out is not None and run_id is None:
        raise _fail("--out draws one handoff's timeline: give its RUN_ID too", 2)
    if verify and run_id is None:
        raise _fail("--verify checks one handoff's evidence bundle: give its RUN_ID too", 2)
    try:
        entries = collect_history(
            kubeconfig_or_sandbox(kubeconfig), namespace=namespace, service=service
        )
    except (HandoffError, PrefectRefused) as exc:
        raise _fail(str(exc), 2) from None
    shown: list | dict = entries
    if run_id is not None:
        found = history_view.find(entries, run_id)
        if len(found) != 1:
            raise _fail(
                f"handoff {run_id}: expected one handoff in namespace {namespace} with this id, "
                f"found {len(found)}; list them with `handoff history --namespace {namespace}`",
                2,
            )
        shown = found[0]
        if out is not None:
            _write_timeline(shown, out)
        if verify:
            _verify(shown, public_key, kubeconfig_or_sandbox(kubeconfig))
            return
    if output == "json":
        typer.echo(json.dumps(shown, indent=2))
    elif output == "yaml":
        typer.echo(yaml.safe_dump(shown, sort_keys=False).rstrip())
    elif isinstance(shown, dict):
        typer.echo(history_view.detail(shown))
    elif entries:
        typer.echo(history_view.listing(entries, wide=output == "wide"))
    else:
        typer.echo(f"no handoffs recorded in namespace {namespace}")

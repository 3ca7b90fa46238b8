"""`handoff webhook serve`: the relay from a forge's merge webhooks to Prefect events.

Point a Forgejo/Gitea/GitHub webhook (push and/or pull request events, JSON, with a
secret) at `http://HOST:PORT/hooks/git`. The secret is read from the environment
variable named by --secret-env, never from the command line (it would show in `ps`).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from flows.webhook.settings import LIMITS, RelaySettings

app = typer.Typer(
    help="Relay forge merge webhooks (HMAC-checked) to Prefect events that start handoffs.",
    no_args_is_help=True,
)
console = Console(stderr=True)


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def _default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "handoff" / "webhook"


def _with_limit_options(command: Callable[..., None]) -> Callable[..., None]:
    """`command` with an option per limit of the relay (its `**limits`), each built from the
    RelaySettings field: type, default and help declared once, there."""
    signature = inspect.signature(command, eval_str=True)
    given = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    for name in LIMITS:
        field = RelaySettings.model_fields[name]
        flag = "--" + name.removesuffix("_s").replace("_", "-")
        option = typer.Option(flag, help=field.description)
        given.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=field.default,
                annotation=Annotated[field.annotation, option],
            )
        )
    # inspect.signature, and so typer, reads a function's __signature__ before its code.
    vars(command)["__signature__"] = signature.replace(parameters=given)
    return command


@app.command()
@_with_limit_options
def serve(
    secret_env: Annotated[
        str, typer.Option("--secret-env", help="Environment variable holding the webhook secret.")
    ],
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8787,
    specs_dir: Annotated[
        Path, typer.Option("--specs-dir", help="Directory of handoff specs (a git checkout).")
    ] = Path("manifests/handoffs"),
    repo_root: Annotated[
        Path | None,
        typer.Option("--repo-root", help="Repository root (default: the specs' git work tree)."),
    ] = None,
    branch: Annotated[
        str | None,
        typer.Option(help="Branch whose merges count (default: the repository's default)."),
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            help="Replay log and git mirrors (default ~/.local/state/handoff/webhook).",
        ),
    ] = None,
    clone_url: Annotated[
        str | None,
        typer.Option(
            "--clone-url",
            help="Fetch merges from this repository URL (any git URL or path), never from "
            "the URL a payload names.",
        ),
    ] = None,
    repository: Annotated[
        str | None,
        typer.Option(
            "--repository",
            help="The repository whose merges count, as the forge names it (owner/name); "
            "a delivery for another is refused. Required without --clone-url.",
        ),
    ] = None,
    clone_host: Annotated[
        list[str] | None,
        typer.Option(
            "--clone-host",
            help="Without --clone-url: fetch from a payload's https/http/ssh/git URL only on "
            "this host (repeatable; default: any host).",
        ),
    ] = None,
    prefect_api_url: Annotated[
        str | None,
        typer.Option("--prefect-api-url", help="Prefect API (default: $PREFECT_API_URL)."),
    ] = None,
    insecure_prefect: Annotated[
        bool,
        typer.Option(
            "--insecure-prefect",
            help="Start even when the Prefect API accepts requests without authentication "
            "(or cannot be asked): anyone who reaches it can then start handoffs.",
        ),
    ] = False,
    event_key: Annotated[
        Path | None,
        typer.Option(
            "--event-key",
            help="Ed25519 private key (`handoff keygen`) that signs each merge event "
            "(default: $HANDOFF_EVENT_KEY_FILE; none: unsigned). A worker given its public "
            "key ($HANDOFF_EVENT_PUBLIC_KEY_FILE) refuses a merge commit nobody signed.",
        ),
    ] = None,
    reconcile_on_start: Annotated[
        bool,
        typer.Option(
            "--reconcile-on-start",
            help="Once serving, ask prefect.yaml's reconcile deployment for one pass: the "
            "merges forges sent while the relay was down (they do not redeliver) are found "
            "and handed off.",
        ),
    ] = False,
    **limits: Any,
) -> None:
    """Serve the relay until interrupted."""
    import logging

    from pydantic import ValidationError

    from flows.webhook.server import serve as serve_relay
    from flows.webhook.specs import find_repo_root, index_specs

    secret = os.environ.get(secret_env, "")
    api = prefect_api_url or os.environ.get("PREFECT_API_URL", "")
    if not secret:
        console.print(f"[red]${secret_env} is empty or unset: export the webhook secret[/red]")
        raise typer.Exit(2)
    if not api:
        console.print("[red]no Prefect API: pass --prefect-api-url or set PREFECT_API_URL[/red]")
        raise typer.Exit(2)
    if not specs_dir.is_dir():
        console.print(f"[red]--specs-dir {specs_dir} is not a directory[/red]")
        raise typer.Exit(2)
    if not repository and not clone_url:
        console.print(
            "[red]pass --repository OWNER/NAME (and/or --clone-url): the relay relays the "
            "merges of one repository and refuses every other's[/red]"
        )
        raise typer.Exit(2)
    root = (repo_root or find_repo_root(specs_dir)).resolve()
    if not specs_dir.resolve().is_relative_to(root):
        console.print(
            f"[red]--specs-dir {specs_dir} is not inside the repository root {root}: "
            "pass --repo-root, the checkout that holds it[/red]"
        )
        raise typer.Exit(2)
    try:
        settings = RelaySettings(
            secret=secret.encode(),
            specs_dir=specs_dir.resolve(),
            repo_root=root,
            prefect_api_url=api.rstrip("/"),
            state_dir=(state_dir or _default_state_dir()).resolve(),
            branch=branch,
            clone_url=clone_url,
            clone_hosts=frozenset(h.lower() for h in clone_host or ()),
            repository=repository,
            insecure_prefect=insecure_prefect,
            event_key_file=event_key or _env_path("HANDOFF_EVENT_KEY_FILE"),
            reconcile_on_start=reconcile_on_start,
            **limits,
        )
    except ValidationError as exc:
        for error in exc.errors():
            where = ".".join(map(str, error["loc"])) or "settings"
            console.print(f"[red]{where}: {error['msg']}[/red]")
        raise typer.Exit(2) from None
    _require_prefect_auth(settings.prefect_api_url, insecure=insecure_prefect)
    from flows.report.attest import SigningKeyError
    from flows.webhook.event_signature import signing_key

    try:
        signed = signing_key(settings.event_key_file) is not None
    except SigningKeyError as exc:
        console.print(f"[red]--event-key: {exc}[/red]")
        raise typer.Exit(2) from None
    if not signed:
        console.print(
            "[yellow]merge events unsigned (no --event-key): a worker that checks them "
            "($HANDOFF_EVENT_PUBLIC_KEY_FILE) refuses their commits[/yellow]"
        )
    index = index_specs(settings.specs_dir, root)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    console.print(
        f"relay on http://{host}:{port}/hooks/git → {settings.prefect_api_url}; "
        f"{len(index.targets)} spec(s) under {root}: "
        + ", ".join(f"{t.name} ({t.namespace}/{t.service})" for t in index.targets)
    )
    for skipped in index.errors:
        console.print(f"[yellow]spec skipped: {skipped}[/yellow]")
    serve_relay(settings, host=host, port=port, log_level="warning")


def _require_prefect_auth(api: str, *, insecure: bool) -> None:
    """Refuse (exit 2) a Prefect API that anyone could post merge events to."""
    from flows.webhook.prefect_auth import (
        PrefectAuthProblem,
        PrefectUnreachable,
        check_prefect_auth,
    )

    try:
        state = check_prefect_auth(api)
    except PrefectUnreachable as exc:
        # deliveries are stored and wait: the worker asks again before its first emit
        console.print(f"[yellow]{exc}; starting: deliveries wait until it answers[/yellow]")
        return
    except PrefectAuthProblem as exc:
        if not insecure:
            console.print(f"[red]{exc}; or pass --insecure-prefect to start anyway[/red]")
            raise typer.Exit(2) from None
        console.print(f"[yellow]{exc}; starting anyway (--insecure-prefect)[/yellow]")
        return
    if state == "open" and not insecure:
        console.print(
            f"[red]Prefect API {api} accepts requests without authentication: anyone who "
            "reaches it can post handoff.merge events and start handoffs. Start the server "
            "with PREFECT_SERVER_API_AUTH_STRING=user:password and give the relay, the "
            "worker and the CLI PREFECT_API_AUTH_STRING=user:password; or pass "
            "--insecure-prefect to start anyway[/red]"
        )
        raise typer.Exit(2)
    if state == "open":
        console.print(
            f"[yellow]Prefect API {api} is not authenticated (--insecure-prefect)[/yellow]"
        )


@app.command()
def deliveries(
    state_dir: Annotated[
        Path | None,
        typer.Option("--state-dir", help="The relay's state directory (as given to serve)."),
    ] = None,
    limit: Annotated[int, typer.Option(help="Newest deliveries shown.")] = 20,
) -> None:
    """The relay's latest deliveries and their outcomes, newest first (read from its store)."""
    import datetime as dt

    from flows.webhook.app import STORE_FILE
    from flows.webhook.deliveries import DeliveryStore

    path = (state_dir or _default_state_dir()) / STORE_FILE
    if not path.is_file():
        console.print(f"[red]no relay store at {path}: pass the relay's --state-dir[/red]")
        raise typer.Exit(2)
    for d in DeliveryStore(path).recent(limit):
        at = dt.datetime.fromtimestamp(d.received, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
        outcome = d.outcome or f"queued ({d.attempts} attempt(s))"
        handoffs = f" [{', '.join(d.handoffs)}]" if d.handoffs else ""
        typer.echo(f"{at}  {d.id}  {d.repository}  {outcome}{handoffs}: {d.detail}")

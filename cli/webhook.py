"""`handoff webhook serve`: the relay from a forge's merge webhooks to Prefect events.

Point a Forgejo/Gitea/GitHub webhook (push and/or pull request events, JSON, with a
secret) at `http://HOST:PORT/hooks/git`. The secret is read from the environment
variable named by --secret-env, never from the command line (it would show in `ps`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

app = typer.Typer(
    help="Relay forge merge webhooks (HMAC-checked) to Prefect events that start handoffs.",
    no_args_is_help=True,
)
console = Console(stderr=True)


def _default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "handoff" / "webhook"


@app.command()
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
    max_body_bytes: Annotated[
        int, typer.Option("--max-body-bytes", help="Larger bodies get 413.")
    ] = 5 * 1024 * 1024,
    clone_url: Annotated[
        str | None,
        typer.Option(
            "--clone-url",
            help="Fetch merges from this repository URL (any git URL or path), never from "
            "the URL a payload names.",
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
    git_timeout: Annotated[
        float, typer.Option("--git-timeout", help="Seconds for all the git work of a delivery.")
    ] = 60.0,
    max_mirrors: Annotated[
        int, typer.Option("--max-mirrors", help="Git mirrors kept (least recently used go).")
    ] = 4,
    max_mirror_bytes: Annotated[
        int, typer.Option("--max-mirror-bytes", help="Bytes all git mirrors may take.")
    ] = 1024**3,
    prefect_api_url: Annotated[
        str | None,
        typer.Option("--prefect-api-url", help="Prefect API (default: $PREFECT_API_URL)."),
    ] = None,
    prefect_timeout: Annotated[
        float, typer.Option("--prefect-timeout", help="Seconds for Prefect to take the events.")
    ] = 10.0,
    max_deliveries: Annotated[
        int, typer.Option("--max-deliveries", help="Deliveries processed at once; more: 503.")
    ] = 4,
    header_timeout: Annotated[
        float, typer.Option("--header-timeout", help="Seconds to send a request's headers.")
    ] = 10.0,
    body_timeout: Annotated[
        float, typer.Option("--body-timeout", help="Seconds to send a body; later: 408.")
    ] = 30.0,
    keep_alive: Annotated[
        float, typer.Option("--keep-alive", help="Seconds an idle connection stays open.")
    ] = 5.0,
    max_connections: Annotated[
        int, typer.Option("--max-connections", help="Open connections; more: 503.")
    ] = 64,
    max_buffered_bytes: Annotated[
        int,
        typer.Option("--max-buffered-bytes", help="Bytes of all bodies held at once; more: 503."),
    ] = 20 * 1024 * 1024,
    keep_days: Annotated[
        float, typer.Option("--keep-days", help="Days a relayed delivery id is remembered.")
    ] = 30.0,
    max_records: Annotated[
        int, typer.Option("--max-records", help="Delivery ids (and merges) remembered.")
    ] = 10_000,
    insecure_prefect: Annotated[
        bool,
        typer.Option(
            "--insecure-prefect",
            help="Start even when the Prefect API accepts requests without authentication "
            "(or cannot be asked): anyone who reaches it can then start handoffs.",
        ),
    ] = False,
) -> None:
    """Serve the relay until interrupted."""
    import logging

    from pydantic import ValidationError

    from flows.webhook.app import RelaySettings
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
            max_body_bytes=max_body_bytes,
            clone_url=clone_url,
            clone_hosts=frozenset(h.lower() for h in clone_host or ()),
            git_timeout_s=git_timeout,
            max_mirrors=max_mirrors,
            max_mirror_bytes=max_mirror_bytes,
            prefect_timeout_s=prefect_timeout,
            max_deliveries=max_deliveries,
            header_timeout_s=header_timeout,
            body_timeout_s=body_timeout,
            keep_alive_s=keep_alive,
            max_connections=max_connections,
            max_buffered_bytes=max_buffered_bytes,
            keep_days=keep_days,
            max_records=max_records,
        )
    except ValidationError as exc:
        for error in exc.errors():
            where = ".".join(map(str, error["loc"])) or "settings"
            console.print(f"[red]{where}: {error['msg']}[/red]")
        raise typer.Exit(2) from None
    _require_prefect_auth(settings.prefect_api_url, insecure=insecure_prefect)
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
    from flows.webhook.prefect_auth import PrefectAuthProblem, check_prefect_auth

    try:
        state = check_prefect_auth(api)
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

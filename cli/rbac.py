"""`handoff rbac render`: the flow's RBAC for the specs it hands off."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="The flow's least-privilege RBAC, rendered from the specs.", no_args_is_help=True
)

SPECS = Path("manifests/handoffs")


def spec_files(given: list[Path] | None) -> list[Path]:
    """The spec files named, else every *.yaml under manifests/handoffs; exit 2 if none."""
    files = given or sorted(SPECS.glob("*.yaml"))
    if not files:
        typer.echo(f"no spec files given and none under {SPECS}: name them", err=True)
        raise typer.Exit(2)
    return files


@app.command()
def render(
    specs: Annotated[
        list[Path] | None,
        typer.Argument(help="Spec files (default: every *.yaml under manifests/handoffs)."),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Write here (e.g. manifests/rbac/handoff.yaml).")
    ] = None,
    policy: Annotated[
        bool,
        typer.Option(
            "--policy",
            help="Render the ValidatingAdmissionPolicy (Kubernetes 1.30+) instead: which "
            "ServiceAccounts, volumes and images the account may put in a pod template.",
        ),
    ] = False,
) -> None:
    """Print the ServiceAccount, Role and bindings that let the flow hand off exactly these
    specs: writes name the specs' Services, Deployments, twins and Leases."""
    from flows.rbac import render as render_rbac
    from flows.rbac_policy import render_policy
    from flows.render import ManifestError
    from flows.spec import SpecError, load_spec

    files = spec_files(specs)
    try:
        loaded = [load_spec(f) for f in files]
        text = render_policy(loaded) if policy else render_rbac(loaded)
    except (SpecError, ManifestError, ValueError) as exc:
        typer.echo(f"cannot render RBAC: {exc}", err=True)
        raise typer.Exit(2) from None
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text)
        typer.echo(f"wrote {out} for {len(files)} spec(s)", err=True)

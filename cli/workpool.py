"""`handoff work-pool render`: the Kubernetes pool's template with image, command and
ServiceAccount fixed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="The Kubernetes work pool's base job template, fixed so a run cannot change what "
    "runs or as whom.",
    no_args_is_help=True,
)


@app.command()
def render(
    image: Annotated[
        str, typer.Option(help="The flow's image by digest: REGISTRY/REPO@sha256:<64 hex>.")
    ],
    service_account: Annotated[
        str, typer.Option(help="The ServiceAccount the flow's Job runs as.")
    ] = "handoff",
    out: Annotated[
        Path | None, typer.Option(help="Write here (then `prefect work-pool create ...`).")
    ] = None,
) -> None:
    """Print the base job template of manifests/work-pool/handoff-kubernetes.json with the
    image, the command `prefect flow-run execute` and the ServiceAccount as literals, none
    of them a job variable, and no variable but the template's: Prefect then refuses (422)
    a deployment or flow run that sets one."""
    from flows.workpool import PoolTemplateError, render_pool_template

    try:
        text = json.dumps(render_pool_template(image, service_account=service_account), indent=2)
    except PoolTemplateError as exc:
        typer.echo(f"cannot render the work pool template: {exc}", err=True)
        raise typer.Exit(2) from None
    if out is None:
        typer.echo(text)
    else:
        out.write_text(text + "\n")
        typer.echo(f"wrote {out}", err=True)

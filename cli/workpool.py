"""`handoff work-pool render`: the Kubernetes pool's template with image, command and
ServiceAccount fixed and a run's env names from an allow-list; `handoff work-pool
render-process`: the process pool's, with its command, working directory and the names a
run's env may set fixed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="The work pools' base job templates, fixed so a run cannot change what runs or as whom.",
    no_args_is_help=True,
)


@app.command()
def render(
    image: Annotated[
        str, typer.Option(help="The flow's image by digest: REGISTRY/REPO@sha256:<64 hex>.")
    ],
    specs: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Spec files whose `environment:` names a run's env may set (default: "
            "every *.yaml under manifests/handoffs)."
        ),
    ] = None,
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
    a deployment or flow run that sets one. A run's env may name only the flow's HANDOFF_*
    settings (no key file) and the variables the specs declare: render again when a spec
    declares a new one."""
    from cli.rbac import spec_files
    from flows.spec import SpecError, declared_environment
    from flows.workpool import PoolTemplateError, render_pool_template

    try:
        declared = [n for f in spec_files(specs) for n in declared_environment(f)]
        template = render_pool_template(image, service_account=service_account, declared=declared)
        text = json.dumps(template, indent=2)
    except (PoolTemplateError, SpecError) as exc:
        typer.echo(f"cannot render the work pool template: {exc}", err=True)
        raise typer.Exit(2) from None
    _write(text, out)


@app.command("render-process")
def render_process(
    out: Annotated[
        Path | None, typer.Option(help="Write here (then `prefect work-pool create ...`).")
    ] = None,
) -> None:
    """Print the process pool's base job template (Prefect's own for this version) with
    the command and working directory the worker's, not job variables, and env limited to
    the flow's HANDOFF_* settings (no key file): create the pool with `prefect work-pool
    create handoff-process --type process --base-job-template FILE`."""
    from flows.workpool import render_process_template

    _write(json.dumps(render_process_template(), indent=2), out)


def _write(text: str, out: Path | None) -> None:
    if out is None:
        typer.echo(text)
    else:
        out.write_text(text + "\n")
        typer.echo(f"wrote {out}", err=True)

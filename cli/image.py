"""`handoff image wait|check`: find an image that contains the required fixes and pin it.

Both print the pinned reference (``repo@sha256:…``) on stdout, or the whole evidence as
JSON with ``--json``; progress goes to stderr. Exit codes: 0 pinned, 1 no acceptable image
(rejected, missing, or timed out), 2 error (registry, credentials, source repository, usage).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from flows.image import ImageRequirement, PinnedImage, Sighting

app = typer.Typer(
    help="Wait for (or check) an image that contains required fix commits; pin it by digest.",
    no_args_is_help=True,
)

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}

Image = Annotated[str, typer.Option("--image", help="REGISTRY/REPOSITORY:TAG to resolve.")]
Source = Annotated[str, typer.Option("--source", help="Git URL or path of the image's source.")]
Requires = Annotated[
    list[str], typer.Option("--requires", help="A commit the image must contain (repeatable).")
]
Platform = Annotated[str, typer.Option("--platform", help="Platform to follow in an index.")]
GitCache = Annotated[
    Path | None, typer.Option("--git-cache", help="Mirror cache (default ~/.cache/handoff/git).")
]
SecretBlock = Annotated[
    str | None, typer.Option("--secret-block", help="Prefect Secret block with credentials.")
]
AsJson = Annotated[bool, typer.Option("--json", help="Print the evidence as JSON.")]


def parse_duration(text: str) -> float:
    """Seconds in ``90``, ``90s``, ``15m``, ``2h``, ``1h30m`` or ``1d``."""
    parts = re.findall(r"(\d+(?:\.\d+)?)([smhd]?)", text.strip())
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise typer.BadParameter(f"{text!r}: expected a duration such as 90s, 15m, 2h or 1h30m")
    return sum(float(n) * _UNITS[u or "s"] for n, u in parts)


@app.command()
def wait(
    image: Image,
    source: Source,
    requires: Requires,
    timeout: Annotated[str, typer.Option("--timeout", help="Give up after this long.")] = "2h",
    poll_interval: Annotated[str, typer.Option("--poll-interval", help="Poll period.")] = "10s",
    platform: Platform = "linux/amd64",
    git_cache: GitCache = None,
    secret_block: SecretBlock = None,
    as_json: AsJson = False,
) -> None:
    """Poll IMAGE until it points at a build containing every --requires commit."""
    from flows.image import wait_for_image

    options = {"platform": platform, "git_cache": git_cache, "secret_block": secret_block}
    timing = {
        "timeout_s": parse_duration(timeout),
        "poll_interval_s": parse_duration(poll_interval),
    }
    requirement = _requirement(image, source, requires, **options, **timing)
    _run(lambda: wait_for_image(requirement, on_seen=_print_sighting), as_json=as_json)


@app.command()
def check(
    image: Image,
    source: Source,
    requires: Requires,
    platform: Platform = "linux/amd64",
    git_cache: GitCache = None,
    secret_block: SecretBlock = None,
    as_json: AsJson = False,
) -> None:
    """Check once whether IMAGE contains every --requires commit."""
    from flows.image import check_image

    requirement = _requirement(
        image, source, requires, platform=platform, git_cache=git_cache, secret_block=secret_block
    )
    _run(lambda: check_image(requirement), as_json=as_json)


def _requirement(
    image: str, source: str, requires: list[str], **options: object
) -> ImageRequirement:
    from flows.image import ImageRequirement
    from ociclient.ref import ImageRef

    try:
        ref = ImageRef.parse(image)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--image") from exc
    if not ref.tag:
        raise typer.BadParameter(f"{image!r} has no tag", param_hint="--image")
    repo = f"{ref.registry}/{ref.repository}"
    try:
        return ImageRequirement(repo=repo, tag=ref.tag, source=source, requires=requires, **options)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise typer.BadParameter(str(exc)) from exc


def _run(step: Callable[[], PinnedImage], *, as_json: bool) -> None:
    from flows.errors import HandoffError, ImageMissing, ImageNotReady, ProvenanceError

    try:
        pinned = step()
    except (ProvenanceError, ImageNotReady, ImageMissing) as exc:
        typer.echo(f"rejected: {exc}", err=True)
        raise typer.Exit(1) from exc
    except HandoffError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(pinned.model_dump_json(indent=2) if as_json else pinned.ref)
    for fix in pinned.fixes:
        typer.echo(f"  {fix.commit[:12]} {fix.found} via {fix.matching_commit[:12]}", err=True)


def _print_sighting(sighting: Sighting) -> None:
    verdict = "accepted" if sighting.accepted else "rejected"
    revision = f" (revision {sighting.revision[:12]})" if sighting.revision else ""
    typer.echo(f"seen {sighting.digest or '-'}{revision}: {verdict}: {sighting.reason}", err=True)

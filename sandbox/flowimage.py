"""The flow's image (the repository's Dockerfile) as the sandbox knows it.

No image is built here (no container daemon on the machines this runs on): the sandbox
registry gets an image whose config carries the Dockerfile's labels, and the kubelet
runs a container of any image labelled ``dev.handoff.flow.root`` as a process of this
checkout and its virtual environment, mounted at that directory
(``sandbox/kubelet/flowrun.py``). A real build of the Dockerfile pushed to the sandbox
registry maps the same way.
"""

from __future__ import annotations

import hashlib
import io
import shlex
import sys
import tarfile
from pathlib import Path

from sandbox.oci_push import BuiltImage, push_image

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
ROOT_LABEL = "dev.handoff.flow.root"
REPOSITORY = "handoff/flow"
# What the layer holds: what decides the installed environment.
_LAYER_FILES = ("pyproject.toml", "uv.lock")


def instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments out."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, rest = (pending + line).partition(" ")
        out.append((keyword.upper(), " ".join(rest.split())))
        pending = ""
    return out


def labels(path: Path = DOCKERFILE) -> dict[str, str]:
    """The Dockerfile's LABEL key=value pairs."""
    found: dict[str, str] = {}
    for keyword, rest in instructions(path):
        if keyword == "LABEL":
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                found[key] = value
    return found


def _layer() -> tuple[bytes, str]:
    """A deterministic tar of the files that decide the environment; (gzip-less, diff_id)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in _LAYER_FILES:
            data = (ROOT / name).read_bytes()
            info = tarfile.TarInfo(f"opt/handoff/{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    data = buffer.getvalue()
    return data, f"sha256:{hashlib.sha256(data).hexdigest()}"


def publish(registry_url: str, tag: str = "dev") -> str:
    """Push the flow's image to the sandbox registry under `tag`; returns its reference
    by digest (the work pool's template takes nothing else)."""
    layer, diff_id = _layer()
    image = BuiltImage(
        layer=layer, diff_id=diff_id, created="1970-01-01T00:00:00Z", labels=labels()
    )
    digest = push_image(registry_url, REPOSITORY, tag, image)
    host = registry_url.split("://", 1)[-1].rstrip("/")
    return f"{host}/{REPOSITORY}@{digest}"


def main(argv: list[str] | None = None) -> int:
    """``python -m sandbox.flowimage [--run-dir DIR] [--tag TAG]``: push the flow's image
    to the running sandbox's registry and print its reference."""
    import argparse

    from sandbox.paths import default_run_dir
    from sandbox.state import read_state

    parser = argparse.ArgumentParser(prog="python -m sandbox.flowimage", description=main.__doc__)
    parser.add_argument("--run-dir", type=Path, default=default_run_dir())
    parser.add_argument("--tag", default="dev")
    args = parser.parse_args(argv)
    state = read_state(args.run_dir)
    if state is None or not state.registry_url:
        print(
            f"no sandbox runs in {args.run_dir}: start it with `handoff sandbox up`",
            file=sys.stderr,
        )
        return 2
    print(publish(state.registry_url, args.tag))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

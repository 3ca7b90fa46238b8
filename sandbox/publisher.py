"""The simulated CI: build an image from a git commit and push it to a registry.

A build is the tree at the commit (``git archive``, gzipped without timestamps, so the same
commit always gives the same layer) plus a config whose labels carry
``org.opencontainers.image.revision`` (the commit), ``org.opencontainers.image.source``
and the build file's description of the simulated server (``sandbox.simbuild``). The push
is ``sandbox.oci_push``: plain httpx against the OCI distribution API.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import git
import httpx

from ociclient import client as oci
from sandbox import procs
from sandbox.oci_push import BuiltImage, MediaStyle, push_image
from sandbox.simbuild import read_build


def build_image(git_repo: Path, commit: str, *, source_url: str | None = None) -> BuiltImage:
    """Build ``commit`` of ``git_repo``: its tree as the layer, its build file as labels."""
    repo = git.Repo(git_repo)
    resolved = repo.commit(commit)
    tar = repo.git.archive("--format=tar", resolved.hexsha, stdout_as_string=False)
    labels = {
        oci.LABEL_REVISION: resolved.hexsha,
        oci.LABEL_SOURCE: source_url or Path(git_repo).resolve().as_uri(),
        **read_build(repo, resolved.hexsha).labels(),
    }
    return BuiltImage(
        layer=gzip.compress(tar, mtime=0),
        diff_id=oci.sha256_digest(tar),
        created=resolved.committed_datetime.isoformat(),
        labels=labels,
    )


def publish(
    registry_url: str,
    repository: str,
    tag: str,
    *,
    git_repo: Path,
    commit: str,
    delay_s: float = 0.0,
    source_url: str | None = None,
    platforms: Sequence[str] = ("linux/amd64",),
    media: MediaStyle = "oci",
    auth: httpx.Auth | None = None,
) -> str:
    """Wait ``delay_s`` (CI's build time after a merge), build, push; return the tag's digest."""
    time.sleep(delay_s)
    image = build_image(git_repo, commit, source_url=source_url)
    return push_image(
        registry_url, repository, tag, image, platforms=platforms, media=media, auth=auth
    )


def publish_detached(
    registry_url: str,
    repository: str,
    tag: str,
    *,
    git_repo: Path,
    commit: str,
    delay_s: float,
    log: Path,
) -> procs.ProcessRecord:
    """Publish from a background process that outlives the caller (a CLI returning at once)."""
    argv = [
        sys.executable,
        "-m",
        "sandbox.publisher",
        registry_url,
        repository,
        tag,
        "--git-repo",
        str(git_repo),
        "--commit",
        commit,
        "--delay",
        str(delay_s),
    ]
    return procs.spawn("publisher", argv, log)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sandbox.publisher", description=__doc__)
    parser.add_argument("registry_url")
    parser.add_argument("repository")
    parser.add_argument("tag")
    parser.add_argument("--git-repo", type=Path, required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args(argv)
    digest = publish(
        args.registry_url,
        args.repository,
        args.tag,
        git_repo=args.git_repo,
        commit=args.commit,
        delay_s=args.delay,
    )
    print(f"pushed {args.repository}:{args.tag} {digest} (revision {args.commit})", flush=True)


if __name__ == "__main__":
    main()

"""Step: wait until the registry holds an image that contains the required fixes, then pin it.

Observes the tag's digest (HEAD with the full Accept list) and, for each new digest, the
platform config's ``org.opencontainers.image.revision``; decides with ``flows.provenance``
whether every required commit is in that revision (ancestor or cherry-pick); changes
nothing. Idempotent: it only reads, and returns ``repo@sha256:…`` so later steps run the
exact image that was checked, whatever the tag points at afterwards.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import git
from pydantic import BaseModel, ConfigDict, Field

from flows import provenance
from flows.errors import (
    ImageMissing,
    ImageNotReady,
    MissingRevisionLabel,
    PermanentError,
    ProvenanceError,
    TransientError,
)
from ociclient.auth import RegistryAuth, load_credentials
from ociclient.client import LABEL_REVISION, LABEL_SOURCE, ImageInfo, RegistryClient
from ociclient.errors import ImageNotFound, RegistryError, RegistryUnavailable
from ociclient.ref import ImageRef
from retrypolicy.backoff import compute_delay, compute_sleep, draw

logger = logging.getLogger(__name__)


class ImageRequirement(BaseModel):
    """Which image to wait for and what it must contain."""

    model_config = ConfigDict(frozen=True)

    repo: str  # registry/repository, e.g. 127.0.0.1:5000/riotpiao-poimen/candle-vllm
    tag: str
    source: str  # git URL or path of the repository the image is built from
    requires: list[str] = Field(default_factory=list)  # commits the image must contain
    timeout_s: float = Field(default=7200.0, gt=0)
    poll_interval_s: float = Field(default=10.0, gt=0)
    platform: str = "linux/amd64"
    git_cache: Path | None = None  # default: provenance.default_cache_root()
    secret_block: str | None = None  # Prefect Secret with registry credentials

    @property
    def image(self) -> ImageRef:
        return ImageRef.parse(f"{self.repo}:{self.tag}")


class Sighting(BaseModel):
    """One digest (or absence of one) the tag was seen at, and the verdict on it."""

    model_config = ConfigDict(frozen=True)

    digest: str | None
    revision: str | None = None
    accepted: bool
    reason: str
    unavailable: bool = False  # the registry did not answer, or answered 429/5xx


class PinnedImage(BaseModel):
    """The image to deploy, by digest, with the evidence that it contains the fixes."""

    model_config = ConfigDict(frozen=True)

    ref: str  # registry/repository@sha256:…
    digest: str
    tag: str
    revision: str
    source_label: str | None
    platform_digest: str  # the platform manifest inside an index (= digest otherwise)
    fixes: list[provenance.FixEvidence]
    seen: list[Sighting] = Field(default_factory=list)


def check_image(requirement: ImageRequirement) -> PinnedImage:
    """One look at the tag: the pinned image, or the error saying why it is not acceptable."""
    with registry_errors(), _client(requirement) as client:
        repo = provenance.open_mirror(requirement.source, cache_root=requirement.git_cache)
        ref = requirement.image
        info = client.read_image(ref.repository, ref.reference, platform=requirement.platform)
        return _evaluate(requirement, repo, info)


def wait_for_image(
    requirement: ImageRequirement, *, on_seen: Callable[[Sighting], None] | None = None
) -> PinnedImage:
    """Poll until the tag points at an acceptable image; ``ImageNotReady`` at the deadline.

    ``on_seen`` is called once per new digest (and per change of a transient failure).
    """
    deadline = time.monotonic() + requirement.timeout_s
    deadline_at = datetime.now(UTC) + timedelta(seconds=requirement.timeout_s)
    seen: list[Sighting] = []
    verdicts: dict[str, Sighting] = {}
    with registry_errors(), _client(requirement, deadline=deadline) as client:
        repo = provenance.open_mirror(requirement.source, cache_root=requirement.git_cache)
        # A mistyped requirement fails now, not at the deadline.
        provenance.resolve_commits(
            repo, requirement.requires, source=requirement.source, what="required commit"
        )
        for attempt in itertools.count():
            sighting, pinned = _poll(requirement, client, repo, verdicts)
            if not seen or sighting != seen[-1]:
                seen.append(sighting)
                _report(requirement, sighting, on_seen)
            if pinned is not None:
                return pinned.model_copy(update={"seen": seen})
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            time.sleep(compute_sleep(_delay(requirement, attempt), remaining))
    raise _not_ready(requirement, seen, deadline_at)


def _report(
    requirement: ImageRequirement,
    sighting: Sighting,
    on_seen: Callable[[Sighting], None] | None,
) -> None:
    logger.info("image %s at %s: %s", requirement.image, sighting.digest, sighting.reason)
    if on_seen is not None:
        on_seen(sighting)


def _delay(requirement: ImageRequirement, attempt: int) -> float:
    # Start at an eighth of the interval so a freshly published image is seen quickly.
    interval = requirement.poll_interval_s
    return compute_delay(attempt, first_s=interval / 8, cap_s=interval, u=draw())


def _poll(
    requirement: ImageRequirement,
    client: RegistryClient,
    repo: git.Repo,
    verdicts: dict[str, Sighting],
) -> tuple[Sighting, PinnedImage | None]:
    """One observation; a digest already judged is not fetched or judged again.

    A rejected digest is a sighting, not an error: the tag may move on to a good image.
    A registry or auth failure that retrying cannot fix propagates.
    """
    ref = requirement.image
    try:
        digest = client.resolve(ref.repository, ref.reference)
        if digest is None:
            return Sighting(digest=None, accepted=False, reason=f"tag {ref} does not exist"), None
        if digest in verdicts:
            return verdicts[digest], None
        try:
            info = client.read_image(ref.repository, digest, platform=requirement.platform)
        except ImageNotFound as exc:  # e.g. an index without our platform
            verdicts[digest] = Sighting(digest=digest, accepted=False, reason=str(exc))
            return verdicts[digest], None
    except RegistryUnavailable as exc:
        return Sighting(digest=None, accepted=False, reason=str(exc), unavailable=True), None
    return _judge(requirement, repo, info, verdicts)


def _judge(
    requirement: ImageRequirement, repo: git.Repo, info: ImageInfo, verdicts: dict[str, Sighting]
) -> tuple[Sighting, PinnedImage | None]:
    revision = info.labels.get(LABEL_REVISION)
    try:
        pinned = _evaluate(requirement, repo, info)
    except ProvenanceError as exc:
        rejected = Sighting(digest=info.digest, revision=revision, accepted=False, reason=str(exc))
        verdicts[info.digest] = rejected
        return rejected, None
    reason = (
        "contains " + ", ".join(f"{f.commit[:12]} ({f.found})" for f in pinned.fixes)
        if pinned.fixes
        else f"revision {pinned.revision[:12]}; no fix required"
    )
    return Sighting(digest=info.digest, revision=revision, accepted=True, reason=reason), pinned


def _evaluate(requirement: ImageRequirement, repo: git.Repo, info: ImageInfo) -> PinnedImage:
    ref = requirement.image
    revision = info.labels.get(LABEL_REVISION)
    if not revision:
        raise MissingRevisionLabel(
            f"image {ref}@{info.digest} ({info.platform} config of {info.manifest_digest}) has "
            f"no {LABEL_REVISION} label (labels: {sorted(info.labels) or 'none'}); expected "
            "the commit it was built from. Make CI set it, e.g. docker build --label "
            f"{LABEL_REVISION}=$GIT_SHA."
        )
    fixes = provenance.find_fixes(repo, revision, requirement.requires, source=requirement.source)
    return PinnedImage(
        ref=ref.pinned(info.digest),
        digest=info.digest,
        tag=requirement.tag,
        revision=revision,
        source_label=info.labels.get(LABEL_SOURCE),
        platform_digest=info.manifest_digest,
        fixes=fixes,
    )


def _not_ready(
    requirement: ImageRequirement, seen: list[Sighting], deadline_at: datetime
) -> ImageNotReady:
    deadline = deadline_at.replace(microsecond=0)
    lines = [f"  {s.digest or '(no digest)'}: {s.reason}" for s in seen] or ["  (none)"]
    within = (
        f"within {timedelta(seconds=requirement.timeout_s)} (deadline passed at "
        f"{deadline.isoformat()})"
    )
    if seen and seen[-1].unavailable:  # the last look failed: the registry is the cause
        return ImageNotReady(
            f"registry {requirement.image.registry} was unavailable when the wait for image "
            f"{requirement.image} ended {within}: it did not answer or answered with an "
            f"error; seen:\n" + "\n".join(lines) + "\nNothing was applied. Check that the "
            "registry is up and reachable from here; once the registry answers, run the "
            "handoff again (or raise image.timeout_s to wait through such outages).",
            seen=tuple(seen),
        )
    return ImageNotReady(
        f"no image {requirement.image} containing {', '.join(requirement.requires) or 'any'} "
        f"appeared {within}; seen:\n" + "\n".join(lines) + "\nPublish an image built "
        "after the fix (or raise the timeout) and run the step again.",
        seen=tuple(seen),
    )


@contextlib.contextmanager
def registry_errors() -> Iterator[None]:
    """The registry client's errors as the flow's, message unchanged: a registry that does
    not answer or answers 429/5xx may recover (transient); absence, refused credentials and
    any other refusal will not (permanent)."""
    try:
        yield
    except RegistryUnavailable as exc:
        raise TransientError(str(exc)) from exc
    except ImageNotFound as exc:
        raise ImageMissing(str(exc)) from exc
    except RegistryError as exc:
        raise PermanentError(str(exc)) from exc


def _client(requirement: ImageRequirement, *, deadline: float | None = None) -> RegistryClient:
    auth = RegistryAuth(load_credentials(requirement.secret_block))
    # A request is retried for at most one poll interval; past that the poll records the
    # failure as a sighting and the wait polls on until its own timeout. No request waits
    # past the wait's deadline, so a registry that never answers cannot stretch it.
    return RegistryClient(
        requirement.image.base_url,
        auth=auth,
        retry_s=requirement.poll_interval_s,
        deadline=deadline,
    )

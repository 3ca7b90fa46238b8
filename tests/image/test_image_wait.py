"""The image step pins only an image whose revision contains the required fix: a pre-fix
image is rejected with its revision named; a fixed image published during the wait is
pinned on the first poll after it appears, at most one poll interval later (measured on
the registry's own request log); a cherry-picked fix is accepted and reported as one; a
tag that never becomes acceptable ends at the deadline listing every digest seen; an image
without a revision label is rejected clearly; moving the tag later leaves the pin intact."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import git
import pytest

from flows.errors import FixMissing, ImageNotReady, MissingRevisionLabel, UnknownCommit
from flows.image import Sighting, check_image, wait_for_image
from ociclient.client import LABEL_REVISION, RegistryClient
from sandbox import procs
from sandbox.publisher import build_image, publish, push_image
from sandbox.registry import Registry
from sandbox.registry_front import Mode, RegistryFront
from sandbox.srcrepo import SourceRepo, cherry_pick
from tests.image.conftest import TAG, MakeRequirement


def _publish(registry: Registry, repository: str, source: SourceRepo, commit: str) -> str:
    return publish(registry.url, repository, TAG, git_repo=source.path, commit=commit)


class AfterFirstLook:
    """An `on_seen` that keeps every sighting and, at the first, starts `then` on a thread:
    the change a test makes during the wait comes after the wait has looked once, however
    slowly either side runs on a loaded machine."""

    def __init__(self, then: Callable[[], object]) -> None:
        self.seen: list[Sighting] = []
        self.results: list[object] = []
        self._thread = threading.Thread(target=lambda: self.results.append(then()))

    def __call__(self, sighting: Sighting) -> None:
        self.seen.append(sighting)
        if len(self.seen) == 1:
            self._thread.start()

    def join(self) -> None:
        self._thread.join()


def test_pre_fix_image_is_rejected_with_its_revision(
    registry: Registry, repository: str, source: SourceRepo, make_requirement: MakeRequirement
) -> None:
    _publish(registry, repository, source, source.commits["gptq"])
    with pytest.raises(FixMissing, match=rf"revision {source.commits['gptq']} .*not an ancestor"):
        check_image(make_requirement())


def test_fixed_image_published_during_wait_is_pinned_within_one_poll_interval(
    registry: Registry, repository: str, source: SourceRepo, make_requirement: MakeRequirement
) -> None:
    old = _publish(registry, repository, source, source.commits["gptq"])
    requirement = make_requirement(poll_interval_s=2.0)
    ci = AfterFirstLook(lambda: _publish(registry, repository, source, source.commits["fix"]))
    pinned = wait_for_image(requirement, on_seen=ci)
    ci.join()
    pushed, seen = ci.results, ci.seen
    assert pinned.digest == pushed[0] != old
    assert pinned.ref == f"{registry.host}/{repository}@{pushed[0]}"
    assert [(s.digest, s.accepted) for s in seen] == [(old, False), (pushed[0], True)]
    assert seen[0].revision == source.commits["gptq"] and source.commits["gptq"] in seen[0].reason
    assert pinned.seen == seen

    # Server-side ground truth: when the tag moved (the PUT) and when the wait first read
    # the new manifest by digest (right after the HEAD that saw it).
    log = registry.requests()
    tag_uri = f"/v2/{repository}/manifests/{TAG}"
    put_at = max(r.time for r in log if r.method == "PUT" and r.uri == tag_uri)
    new_uri = f"/v2/{repository}/manifests/{pushed[0]}"
    read_at = min(r.time for r in log if r.method == "GET" and r.uri == new_uri)
    looks = [r for r in log if r.method == "HEAD" and r.uri == tag_uri and r.time > put_at]
    assert len([r for r in looks if r.time <= read_at]) == 1, "pinned only at a later poll"
    slack_s = 1.0  # the previous poll's own work and thread wake-up, on a loaded machine
    assert (read_at - put_at).total_seconds() <= requirement.poll_interval_s + slack_s
    assert not [r for r in log if r.uri == tag_uri and r.time > read_at], "polled after pinning"


def test_cherry_picked_fix_is_accepted_and_reported(
    registry: Registry, repository: str, source: SourceRepo, make_requirement: MakeRequirement
) -> None:
    fix = source.commits["fix"]
    picked = cherry_pick(git.Repo(source.path), fix, branch="release/sm70",
                         onto=source.commits["ci"])  # fmt: skip
    digest = _publish(registry, repository, source, picked)
    pinned = wait_for_image(make_requirement())
    assert (pinned.digest, pinned.revision) == (digest, picked)
    [evidence] = pinned.fixes
    assert (evidence.commit, evidence.found, evidence.matching_commit) == (
        fix,
        "cherry-pick",
        picked,
    )


def test_tag_that_never_appears_times_out_with_what_was_seen(
    make_requirement: MakeRequirement,
) -> None:
    requirement = make_requirement(timeout_s=1.0, poll_interval_s=0.3)
    with pytest.raises(
        ImageNotReady, match=r"(?s)within 0:00:01 \(deadline passed at .*does not exist"
    ):
        wait_for_image(requirement)


def test_timeout_lists_every_rejected_digest(
    registry: Registry, repository: str, source: SourceRepo, make_requirement: MakeRequirement
) -> None:
    first = _publish(registry, repository, source, source.commits["ci"])
    ci = AfterFirstLook(lambda: _publish(registry, repository, source, source.commits["gptq"]))
    with pytest.raises(ImageNotReady) as info:
        wait_for_image(make_requirement(timeout_s=10.0, poll_interval_s=0.3), on_seen=ci)
    ci.join()
    seen = [s for s in info.value.seen if isinstance(s, Sighting)]
    assert [s.revision for s in seen] == [source.commits["ci"], source.commits["gptq"]]
    assert seen[0].digest == first and first in str(info.value)
    assert all(not s.accepted and s.revision in s.reason for s in seen)  # type: ignore[operator]


def test_missing_revision_label_is_a_clear_error(
    registry: Registry, repository: str, source: SourceRepo, make_requirement: MakeRequirement
) -> None:
    image = build_image(source.path, source.commits["fix"])
    unlabelled = image.model_copy(
        update={"labels": {k: v for k, v in image.labels.items() if k != LABEL_REVISION}}
    )
    digest = push_image(registry.url, repository, TAG, unlabelled)
    with pytest.raises(MissingRevisionLabel, match=rf"{digest}.*has no {LABEL_REVISION} label"):
        check_image(make_requirement())
    with pytest.raises(ImageNotReady, match=rf"{digest}: .*no {LABEL_REVISION} label"):
        wait_for_image(make_requirement(timeout_s=0.5, poll_interval_s=0.2))


def test_retagging_after_the_pin_keeps_the_pinned_digest(
    registry: Registry, repository: str, source: SourceRepo, make_requirement: MakeRequirement
) -> None:
    _publish(registry, repository, source, source.commits["fix"])
    pinned = wait_for_image(make_requirement())
    moved_to = _publish(registry, repository, source, source.commits["gptq"])
    with RegistryClient(registry.url) as client:
        assert client.resolve(repository, TAG) == moved_to != pinned.digest
        again = client.read_image(repository, pinned.digest)
    assert (again.digest, again.labels[LABEL_REVISION]) == (pinned.digest, source.commits["fix"])
    with pytest.raises(FixMissing):
        check_image(make_requirement())


def test_unknown_required_commit_fails_before_waiting(make_requirement: MakeRequirement) -> None:
    started = time.monotonic()
    with pytest.raises(UnknownCommit, match="required commit 1234567 not found"):
        wait_for_image(make_requirement(requires=["1234567"], timeout_s=60.0))
    assert time.monotonic() - started < 30  # it did not sit out the 60 s deadline


def test_unreachable_registry_is_retried_until_the_deadline(
    make_requirement: MakeRequirement, repository: str
) -> None:
    requirement = make_requirement(repo=f"127.0.0.1:{procs.free_port()}/{repository}",
                                   timeout_s=1.0, poll_interval_s=0.3)  # fmt: skip
    with pytest.raises(ImageNotReady, match=r"did not answer HEAD"):
        wait_for_image(requirement)


@pytest.fixture
def front(registry: Registry) -> Iterator[RegistryFront]:
    with RegistryFront(registry.host) as started:
        yield started


@pytest.mark.parametrize("mode", ["unavailable", "hang"])
def test_registry_unavailable_until_the_deadline_is_named_as_the_cause(
    make_requirement: MakeRequirement, repository: str, front: RegistryFront, mode: Mode
) -> None:
    """A registry answering 503, or not answering at all, until the wait's deadline:
    the error says the registry was unavailable, names it and the image, and says what
    to do; it does not tell the user to publish an image."""
    front.switch(mode)
    requirement = make_requirement(repo=f"{front.host}/{repository}", timeout_s=1.0)
    with pytest.raises(ImageNotReady) as caught:
        wait_for_image(requirement)
    message = str(caught.value)
    assert f"registry {front.host} was unavailable" in message, message
    assert f"{front.host}/{repository}:{TAG}" in message, message
    assert ("registry error 503" if mode == "unavailable" else "did not answer") in message
    assert "Publish an image" not in message, message
    assert "once the registry answers" in message, message
    assert front.answered_503 if mode == "unavailable" else front.held


def test_a_hanging_registry_does_not_hold_the_wait_past_its_deadline(
    make_requirement: MakeRequirement, repository: str, front: RegistryFront
) -> None:
    """A registry that accepts and never answers: the wait ends at its own deadline (give
    or take the last look's 2 s), not a request timeout (10 s) and a poll interval of
    retries later."""
    front.switch("hang")
    requirement = make_requirement(
        repo=f"{front.host}/{repository}", timeout_s=2.0, poll_interval_s=20.0
    )
    started = time.monotonic()
    with pytest.raises(ImageNotReady, match="was unavailable"):
        wait_for_image(requirement)
    took = time.monotonic() - started
    assert front.held
    # the old client took 20 s here; 5 s leaves room for the last look and a loaded machine
    assert took < requirement.timeout_s + 5.0, f"the wait ended {took:.1f} s after it began"


def test_registry_recovering_within_the_wait_lets_it_pin(
    registry: Registry,
    repository: str,
    source: SourceRepo,
    make_requirement: MakeRequirement,
    front: RegistryFront,
) -> None:
    """503s, then a registry that answers again before the deadline: the wait goes on
    and pins the image published meanwhile."""
    front.switch("unavailable")
    requirement = make_requirement(repo=f"{front.host}/{repository}", poll_interval_s=0.5)

    def recover() -> None:
        _publish(registry, repository, source, source.commits["fix"])
        front.switch("pass")

    healer = AfterFirstLook(recover)
    pinned = wait_for_image(requirement, on_seen=healer)
    healer.join()
    seen = healer.seen
    assert front.answered_503 > 0
    assert seen[0].digest is None and "503" in seen[0].reason, seen
    assert pinned.revision == source.commits["fix"]

"""The image-pull stage of one container: policy, simulated pull time, back-off, events.

As the kubelet's image manager: IfNotPresent uses an image already on the node; a failed
pull shows ErrImagePull, then ImagePullBackOff until the back-off delay has passed, and
the next attempt doubles the delay. Events: Pulling, Pulled, Failed, BackOff.
"""

from __future__ import annotations

from kubernetes.client import V1Container

from sandbox.kubelet.backoff import Backoff
from sandbox.kubelet.context import NodeContext
from sandbox.kubelet.events import PodRef
from sandbox.kubelet.images import ImagePullError, PulledImage
from sandbox.kubelet.status import Status, go_duration

PULL_S = 5.0  # a real pull of a model-server image, before the time scale


class ImagePuller:
    """Call ``step`` until it returns the image; ``waiting`` is the state to report."""

    def __init__(self, ctx: NodeContext, pod: PodRef, container: V1Container) -> None:
        self._ctx, self._pod, self._container = ctx, pod, container
        self._image_name = container.image or ""
        self.waiting: Status = {"reason": "ContainerCreating"}
        self._backoff = Backoff.scaled(ctx.cluster.time_scale)
        self._retry_at = 0.0
        self._failed_at: float | None = None
        self._image: PulledImage | None = None
        self._done_at = 0.0
        self._blocked = False

    def step(self, now: float) -> PulledImage | None:
        if self._image is not None:
            return self._image if now >= self._done_at else None
        if self._blocked:
            return None
        if now < self._retry_at:
            self._show_backoff(now)
            return None
        self._attempt(now)
        return None

    def _attempt(self, now: float) -> None:
        image, policy = self._image_name, self._container.image_pull_policy or "IfNotPresent"
        present = self._ctx.images.present(image)
        if present is not None and policy != "Always":
            self._event("Pulled", f'Container image "{image}" already present on machine')
            self._image, self._done_at = present, now
            return
        if policy == "Never":
            message = f'Container image "{image}" is not present with pull policy of Never'
            self._fail("ErrImageNeverPull", message, blocked=True)
            return
        self._event("Pulling", f'Pulling image "{image}"')
        try:
            pulled = self._ctx.images.pull(image)
        except ImagePullError as exc:
            self._pull_failed(now, exc)
            return
        pull_s = PULL_S * self._ctx.cluster.time_scale
        self._image, self._done_at = pulled, now + pull_s
        self._event("Pulled", f'Successfully pulled image "{image}" in {go_duration(pull_s)}')

    def _pull_failed(self, now: float, exc: ImagePullError) -> None:
        if exc.reason == "InvalidImageName":
            self._fail(exc.reason, exc.message, blocked=True)
            return
        self._backoff.record_attempt(now)
        self._retry_at = now + (self._backoff.delay_s or 0.0)
        self._failed_at = now
        self._warn("Failed", f'Failed to pull image "{self._image_name}": {exc.message}')
        self._fail(exc.reason, exc.message, blocked=False)

    def _show_backoff(self, now: float) -> None:
        """After a failed pull, the next sync reports ImagePullBackOff until the retry."""
        if self._failed_at is None or self.waiting.get("reason") == "ImagePullBackOff":
            return
        if now - self._failed_at >= min(1.0, (self._retry_at - self._failed_at) / 2):
            message = f'Back-off pulling image "{self._image_name}"'
            self._event("BackOff", message)
            self._fail("ImagePullBackOff", message, blocked=False)

    def _fail(self, reason: str, message: str, *, blocked: bool) -> None:
        self.waiting = {"reason": reason, "message": message}
        self._blocked = blocked
        self._warn("Failed", f"Error: {reason}")

    def _event(self, reason: str, message: str) -> None:
        self._ctx.events.normal(self._pod, reason, message, container=self._container.name)

    def _warn(self, reason: str, message: str) -> None:
        self._ctx.events.warning(self._pod, reason, message, container=self._container.name)

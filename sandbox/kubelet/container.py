"""One container of a pod: pull, start, probe, restart with back-off, stop.

``step`` advances it without blocking (the pod worker calls it in a loop); ``status``
renders it as the API's containerStatuses entry. A process that exits becomes the
container's lastState (Terminated, reason Error or Completed, exit code) and, per the
restart policy, restarts at once the first time and after a doubling back-off
afterwards (CrashLoopBackOff). A failed startup or liveness probe kills and restarts it.
Each run logs to ``<restartCount>.log`` as the kubelet's log directory does. A stop for
good runs the container's preStop hook first (``prestop.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from pathlib import Path

from kubernetes.client import V1Container, V1ContainerStatus, V1PodSpec

from sandbox import procs
from sandbox.kubelet.backoff import Backoff
from sandbox.kubelet.command import ContainerConfigError, server_argv
from sandbox.kubelet.container_probes import ContainerProbes
from sandbox.kubelet.container_run import ContainerRun, terminated_state
from sandbox.kubelet.context import NodeContext
from sandbox.kubelet.events import PodRef
from sandbox.kubelet.flowrun import Launch, flow_launch
from sandbox.kubelet.images import PulledImage
from sandbox.kubelet.prestop import PreStopHook
from sandbox.kubelet.pull import ImagePuller
from sandbox.kubelet.runtime import ContainerRuntime
from sandbox.kubelet.status import Status, go_duration, now_rfc3339, restored_state


class Stage(Enum):
    PULLING = "pulling"
    RUNNING = "running"
    BACKOFF = "backoff"
    BLOCKED = "blocked"  # a configuration error; nothing to retry
    STOPPED = "stopped"


class ContainerRunner:
    def __init__(
        self,
        ctx: NodeContext,
        pod: PodRef,
        spec: V1PodSpec,
        container: V1Container,
        *,
        pod_ip: str,
        log_dir: Path,
        wake: Callable[[], None],
        prior: V1ContainerStatus | None,
    ) -> None:
        self._ctx, self._pod, self._spec, self._container = ctx, pod, spec, container
        self.name = container.name
        self._log_dir = log_dir
        self._puller = ImagePuller(ctx, pod, container)
        self._stage = Stage.PULLING
        self.state: Status = {"waiting": {"reason": "ContainerCreating"}}
        self.restart_count, self.last_state, self._has_run = restored_state(prior)
        self._port = 0  # each run listens on a fresh 127.0.0.1 port
        self._ports: dict[int, int] = {}
        self._probes = ContainerProbes(ctx, pod, container, pod_ip=pod_ip, wake=wake)
        self._backoff = Backoff.scaled(ctx.cluster.time_scale)
        self._run: ContainerRun | None = None
        self._restart_at = 0.0
        self._stopping = False
        self._image: PulledImage | None = None
        self._container_id = ""
        self._hook: PreStopHook | None = None

    @property
    def stopped(self) -> bool:
        return self._stage in (Stage.STOPPED, Stage.BLOCKED) or (
            self._stopping and self._stage is not Stage.RUNNING
        )

    @property
    def ready(self) -> bool:
        return self._run is not None and self._run.ready

    def step(self, now: float) -> None:
        if self._stage is Stage.PULLING and not self._stopping:
            image = self._puller.step(now)
            self.state = {"waiting": self._puller.waiting}
            if image is not None:
                self._image = image
                self._start(now)
        elif self._stage is Stage.RUNNING:
            self._watch(now)
        elif self._stage is Stage.BACKOFF and now >= self._restart_at and not self._stopping:
            self._start(now)

    def stop(self, now: float, grace_s: float, *, pre_stop: bool = True) -> None:
        """Stop for good: the preStop hook first (if any and ``pre_stop``), then SIGTERM,
        SIGKILL once ``grace_s`` (counted from now) is over."""
        if self._stopping:
            return
        self._stopping = True
        if self._run is None:
            return
        self._event("Killing", f"Stopping container {self.name}")
        if pre_stop and PreStopHook.handler(self._container) is not None:
            log = self._log_dir / "prestop.log"
            self._hook = PreStopHook(
                self._ctx, self._pod, self._container, ports=self._ports, log=log
            )
            self._hook.start(now, grace_s)
        else:
            self._run.terminate(now, grace_s)

    def _start(self, now: float) -> None:
        if self._has_run:
            self.restart_count += 1
            self._backoff.record_attempt(now)
        self._has_run = True
        # A fresh port per run: a port taken by another process fails one run, not all.
        self._port = procs.free_port()
        self._ports = {p.container_port: self._port for p in self._container.ports or []}
        launch = self._launch()
        if launch is None:
            return
        self._event("Created", f"Created container {self.name}")
        self._log(2).unlink(missing_ok=True)  # keep the current and the previous run's log
        name = f"{self._pod.namespace}/{self._pod.name}/{self.name}"
        started_at = now_rfc3339()
        try:
            proc = self._ctx.spawner.spawn(name, launch.argv, log=self._log(0), env=launch.env)
        except Exception as exc:  # e.g. no such executable: the runtime reports exit 128
            self._ctx.events.warning(self._pod, "Failed", f"Error: {exc}", container=self.name)
            self._exited(now, terminated_state(128, started_at=started_at, container_id=""))
            return
        self._event("Started", f"Started container {self.name}")
        self._run = ContainerRun(
            proc, self._probes, name=name, local_port=self._port, started_at=started_at
        )
        self._container_id = self._run.container_id
        self.state, self._stage = {"running": {"startedAt": started_at}}, Stage.RUNNING

    def _launch(self) -> Launch | None:
        """The flow's command (its image) or the model server's, or None (and
        CreateContainerConfigError) if none fits."""
        image = self._image
        assert image is not None
        try:
            if image.flow_root is not None:
                pod_dir = self._log_dir.parent
                args = (self._ctx, self._pod, self._spec, self._container, image, pod_dir)
                return flow_launch(*args)
            argv = server_argv(
                cluster=self._ctx.cluster,
                spec=self._spec,
                container=self._container,
                image=image,
                port=self._port,
            )
            return Launch(argv)
        except ContainerConfigError as exc:
            self.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
            self._ctx.events.warning(self._pod, "Failed", f"Error: {exc}", container=self.name)
            self._stage = Stage.BLOCKED
            return None

    def _watch(self, now: float) -> None:
        assert self._run is not None
        if self._hook is not None:
            self._hook.step(now)
            if self._hook.done:
                self._run.terminate(now, self._hook.remaining_grace(now))
                self._hook = None
        terminated = self._run.poll(now)
        if terminated is not None:
            self._exited(now, terminated)
        elif (failed := self._run.failed_probe()) is not None:
            self._event(
                "Killing", f"Container {self.name} failed {failed} probe, will be restarted"
            )
            self._run.terminate(now, self._grace_s())

    def _exited(self, now: float, terminated: Status) -> None:
        self._run = None
        if self._stopping or not self._restarts_after(terminated["exitCode"]):
            self.state, self._stage = {"terminated": terminated}, Stage.STOPPED
            return
        self.last_state = {"terminated": terminated}
        self._restart_at = self._backoff.retry_at(now)
        if self._restart_at <= now:
            self._start(now)
            return
        delay = go_duration(self._backoff.delay_s or 0.0)
        message = (
            f"back-off {delay} restarting failed container={self.name} "
            f"pod={self._pod.name}_{self._pod.namespace}({self._pod.uid})"
        )
        self.state = {"waiting": {"reason": "CrashLoopBackOff", "message": message}}
        self._stage = Stage.BACKOFF
        self._ctx.events.warning(
            self._pod, "BackOff", "Back-off restarting failed container", container=self.name
        )

    def _restarts_after(self, code: int) -> bool:
        policy = self._spec.restart_policy or "Always"
        return policy == "Always" or (policy == "OnFailure" and code != 0)

    def _grace_s(self) -> float:
        grace = self._spec.termination_grace_period_seconds
        return 30.0 if grace is None else float(grace)

    def _log(self, back: int) -> Path:
        return self._log_dir / f"{self.restart_count - back}.log"

    def _event(self, reason: str, message: str) -> None:
        self._ctx.events.normal(self._pod, reason, message, container=self.name)

    def status(self) -> Status:
        started = self._run is not None and self._run.started
        entry: Status = {
            "name": self.name,
            "image": self._container.image,
            "imageID": self._image.image_id if self._image else "",
            "ready": self.ready,
            "started": started,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self._container_id:
            entry["containerID"] = self._container_id
        return entry

    def runtime(self) -> ContainerRuntime:
        previous = self._log(1)
        return ContainerRuntime(
            log_path=self._log(0),
            previous_log_path=previous if previous.exists() else None,
            ports=dict(self._ports),
            running=self._stage is Stage.RUNNING,
        )

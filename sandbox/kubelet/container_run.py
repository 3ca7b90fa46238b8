"""One start of a container: its process, its probes and its way out.

Exit codes are reported as a shell would (128+signal for a killed process). A stop is
SIGTERM to the process group, then SIGKILL once the grace period has passed.
"""

from __future__ import annotations

import logging
import math
import secrets
import signal

from sandbox.kubelet.container_probes import ContainerProbes
from sandbox.kubelet.spawner import ContainerProcess
from sandbox.kubelet.status import Status, now_rfc3339

log = logging.getLogger(__name__)


def terminated_state(code: int, *, started_at: str | None, container_id: str) -> Status:
    return {
        "exitCode": code,
        "reason": "Completed" if code == 0 else "Error",
        "startedAt": started_at,
        "finishedAt": now_rfc3339(),
        "containerID": container_id,
    }


class ContainerRun:
    def __init__(
        self,
        proc: ContainerProcess,
        probes: ContainerProbes,
        *,
        name: str,
        local_port: int,
        started_at: str,
    ) -> None:
        self.container_id = f"docker://{secrets.token_hex(32)}"
        self.started_at = started_at
        self._proc, self._probes, self._name = proc, probes, name
        self._kill_at: float | None = None
        probes.start(local_port)
        log.info("container %s started: pid %d on 127.0.0.1:%d", name, proc.pid, local_port)

    @property
    def started(self) -> bool:
        return self._probes.started

    @property
    def ready(self) -> bool:
        return self._kill_at is None and self._probes.ready

    def poll(self, now: float) -> Status | None:
        """The terminated state once the process has exited; SIGKILL when grace runs out."""
        code = self._proc.poll()
        if code is not None:
            self._probes.stop()
            log.info("container %s exited with code %d", self._name, code)
            return terminated_state(
                code, started_at=self.started_at, container_id=self.container_id
            )
        if self._kill_at is not None and now >= self._kill_at:
            self._proc.signal(signal.SIGKILL)
            self._kill_at = math.inf
        return None

    def failed_probe(self) -> str | None:
        """ "startup" or "liveness" if that probe asks for a restart (and no stop is under way)."""
        return None if self._kill_at is not None else self._probes.failed()

    def terminate(self, now: float, grace_s: float) -> None:
        if self._kill_at is not None:
            return
        self._probes.stop()
        self._proc.signal(signal.SIGTERM)
        self._kill_at = now + grace_s

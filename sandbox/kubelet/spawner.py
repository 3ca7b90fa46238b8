"""Container processes that cannot outlive the kubelet.

Every process is started from one long-lived thread under ``setpriv --pdeathsig KILL``:
the kernel sends SIGKILL when the *thread* that forked the child exits, so forking from
short-lived pod threads would kill containers early, and forking from this thread kills
them exactly when the kubelet dies (even by SIGKILL). Each process is also recorded in
the run directory until reaped, so a kubelet starting after a crash kills what the
narrow fork-to-prctl window may have left behind.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import subprocess
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from sandbox import procs

SETPRIV = "setpriv"


def records_dir(run_dir: Path) -> Path:
    """Where the sandbox's kubelets under run_dir record their container processes."""
    return run_dir / "kubelet" / "processes"


def container_process(
    run_dir: Path, namespace: str, pod: str, container: str
) -> procs.ProcessRecord | None:
    """The live process recorded for a container of a pod, if any."""
    for path in records_dir(run_dir).glob("*.json"):
        with contextlib.suppress(ValueError, OSError):  # reaped meanwhile
            record = procs.ProcessRecord.model_validate_json(path.read_text())
            if record.name == f"{namespace}/{pod}/{container}":
                return record
    return None


@dataclass(frozen=True)
class _Request:
    name: str
    argv: list[str]
    log: Path
    env: dict[str, str] | None
    future: Future[ContainerProcess]


class ContainerProcess:
    """A started container process: poll it, signal its process group, forget it."""

    def __init__(self, popen: subprocess.Popen[bytes], record_file: Path) -> None:
        self.pid = popen.pid
        self._popen, self._record_file = popen, record_file

    def poll(self) -> int | None:
        """Exit code as a shell reports it (128+signal for a killed process), or None."""
        code = self._popen.poll()
        if code is None:
            return None
        self._record_file.unlink(missing_ok=True)
        return 128 - code if code < 0 else code

    def signal(self, signum: int) -> None:
        if self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signum)


class Spawner:
    """Starts processes from its own thread; ``spawn`` blocks until the process exists."""

    def __init__(self, records_dir: Path) -> None:
        if shutil.which(SETPRIV) is None:
            raise RuntimeError(
                "setpriv (util-linux) not found on PATH: the kubelet needs it so container "
                "processes die with it; install util-linux"
            )
        self._records = records_dir
        self._records.mkdir(parents=True, exist_ok=True)
        self._queue: queue.Queue[_Request | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="spawner", daemon=True)

    def start(self) -> Spawner:
        self._thread.start()
        return self

    def spawn(
        self, name: str, argv: list[str], *, log: Path, env: dict[str, str] | None = None
    ) -> ContainerProcess:
        """Start ``argv``; its environment is ``env`` if given, else the kubelet's own."""
        future: Future[ContainerProcess] = Future()
        self._queue.put(_Request(name, argv, log, env, future))
        return future.result(timeout=30)

    def close(self) -> None:
        """Stop the thread; processes still running then receive SIGKILL from the kernel."""
        self._queue.put(None)
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while (request := self._queue.get()) is not None:
            try:
                request.future.set_result(self._start(request))
            except Exception as exc:  # the pod worker reports it as a start failure
                request.future.set_exception(exc)

    def _start(self, request: _Request) -> ContainerProcess:
        request.log.parent.mkdir(parents=True, exist_ok=True)
        env = {**(os.environ if request.env is None else request.env), "PYTHONUNBUFFERED": "1"}
        with open(request.log, "wb") as out:
            popen = subprocess.Popen(
                [SETPRIV, "--pdeathsig", "KILL", "--", *request.argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
                cwd=request.log.parent,
            )
        ticks = procs.start_ticks(popen.pid) or 0  # identifies the pid across recycling
        record = procs.ProcessRecord(
            name=request.name, pid=popen.pid, start_ticks=ticks, log=request.log
        )
        record_file = self._records / f"{popen.pid}.json"
        record_file.write_text(record.model_dump_json())
        return ContainerProcess(popen, record_file)


def kill_leftovers(records_dir: Path) -> list[procs.ProcessRecord]:
    """SIGKILL every recorded process still alive (same pid and start time); clear records."""
    killed = []
    for path in sorted(records_dir.glob("*.json")) if records_dir.is_dir() else []:
        with contextlib.suppress(ValueError, OSError):
            record = procs.ProcessRecord.model_validate_json(path.read_text())
            if procs.is_alive(record):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(record.pid, signal.SIGKILL)
                killed.append(record)
        path.unlink(missing_ok=True)
    return killed

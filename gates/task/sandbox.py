"""Run untrusted checks (a suite's `function`, a model's `code` answer) in a sandbox, never
in the calling process, and bring back only data.

The sandbox is bubblewrap (gates.task.bwrap: user, pid, network, IPC and UTS namespaces,
a read-only root of only the interpreter and its libraries, a private tmpfs, no
environment) with a seccomp filter (gates.task.seccomp), under resource limits set before
it starts (CPU time, address space, file size, open files, no core dumps) and a
wall-clock limit after which it is killed. Its answer comes over a pipe, at most
MAX_OUTPUT bytes, and is parsed as JSON here; what it means is decided by the caller
(gates.task.check), never by the sandboxed process.

Without bubblewrap the checks are refused (SandboxUnavailable names the package) unless
HANDOFF_TASK_SANDBOX=none is set, which runs them in a plain subprocess with the same
limits and no OS isolation at all, and says so in the report.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import resource
import select
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gates.errors import GateError
from gates.task import bwrap, seccomp
from gates.task.suite import Limits

HARNESS = Path(__file__).with_name("harness.py")
MAX_OUTPUT = 1 << 20
OPT_OUT = "HANDOFF_TASK_SANDBOX"
PACKAGE = "bubblewrap"


class SandboxUnavailable(GateError):
    """Code checks cannot run isolated here, and running them otherwise was not asked for."""


@dataclass(frozen=True)
class Verdict:
    """One answer's score (1.0 right, 0.0 wrong, or a grade) and why."""

    score: float
    detail: str

    @property
    def passed(self) -> bool:
        return self.score >= 1.0


def unsandboxed() -> bool:
    return os.environ.get(OPT_OUT, "").strip().lower() == "none"


def isolation() -> str:
    """How the checks are isolated here, in words; SandboxUnavailable when they cannot be."""
    if unsandboxed():
        return (
            f"NONE: {OPT_OUT}=none, checks run in a plain subprocess with resource limits "
            "only; untrusted code can reach this machine"
        )
    _bwrap()
    syscalls = "a seccomp filter" if seccomp.supported() else "no seccomp filter (not x86-64)"
    return (
        "bubblewrap: own user, pid, network and IPC namespaces, read-only root of only the "
        f"interpreter, no environment, {syscalls}; verdicts computed outside the sandbox"
    )


@functools.cache
def _bwrap() -> str:
    """bwrap's path, once it has run a check's interpreter here."""
    found = shutil.which("bwrap")
    if found is None:
        raise SandboxUnavailable(
            "code checks run under bubblewrap, and `bwrap` is not installed: install the "
            f"Debian package `{PACKAGE}` (or set {OPT_OUT}=none to run them with no OS "
            "isolation)"
        )
    argv = bwrap.command(found, HARNESS, None)
    argv[-3:] = ["-I", "-S", "-c", "pass"]
    done = subprocess.run(argv, capture_output=True, env={}, timeout=60, check=False)
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip()[-300:]
        raise SandboxUnavailable(
            f"bubblewrap cannot start a sandbox here (exit {done.returncode}: {said}); it "
            "needs user namespaces (kernel.unprivileged_userns_clone, user.max_user_namespaces"
            f", a container's seccomp profile); or set {OPT_OUT}=none"
        )
    return found


def run_isolated(job: dict[str, Any], limits: Limits) -> dict[str, Any] | Verdict:
    """Run one job in the sandbox: the JSON object it sent, or a failing Verdict."""
    data = json.dumps(job).encode()
    filter_fd: int | None = None
    if unsandboxed():
        argv = [bwrap.interpreter().as_posix(), "-I", "-S", str(HARNESS)]
    else:
        if seccomp.supported():
            filter_fd = _filter_fd()
        argv = bwrap.command(_bwrap(), HARNESS, filter_fd)
    try:
        with tempfile.TemporaryDirectory(prefix="handoff-task-") as cwd:
            process = subprocess.Popen(
                argv,
                cwd=cwd,
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"} if unsandboxed() else {},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=() if filter_fd is None else (filter_fd,),
                start_new_session=True,  # its own process group: killed as a whole
                preexec_fn=functools.partial(_limit, limits),
            )
            return _talk(process, data, limits)
    finally:
        if filter_fd is not None:
            os.close(filter_fd)


def _filter_fd() -> int:
    read, write = os.pipe()
    with os.fdopen(write, "wb") as out:
        out.write(seccomp.program())
    return read


def _limit(limits: Limits) -> None:
    mb = 1024 * 1024
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s))
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_mb * mb, limits.memory_mb * mb))
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 * mb, 16 * mb))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _talk(
    process: subprocess.Popen[bytes], data: bytes, limits: Limits
) -> dict[str, Any] | Verdict:
    assert process.stdin is not None and process.stdout is not None
    try:
        with contextlib.suppress(BrokenPipeError):
            process.stdin.write(data)
            process.stdin.close()
        out, why = _read(process.stdout.fileno(), time.monotonic() + limits.wall_s)
    finally:
        _kill_group(process)
    if why is not None:
        return Verdict(0.0, why.format(wall_s=limits.wall_s, max=MAX_OUTPUT))
    code = process.returncode
    found = _last_object(out)
    if found is not None:
        return found
    # bwrap reports its child's death by a signal as 128 + the signal
    if code in (-signal.SIGXCPU, -signal.SIGKILL, 128 + signal.SIGXCPU, 128 + signal.SIGKILL):
        code = code if code < 0 else 128 - code
        return Verdict(0.0, f"killed at the CPU limit of {limits.cpu_s} s (signal {-code})")
    return Verdict(0.0, f"ended without a result (exit {code}): {said(out)}")


def _read(fd: int, deadline: float) -> tuple[bytes, str | None]:
    """What the process writes until it closes its end: at most MAX_OUTPUT bytes, by the
    deadline."""
    chunks: list[bytes] = []
    size = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return b"", "killed after the wall-clock limit of {wall_s:g} s"
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks), None
        size += len(chunk)
        if size > MAX_OUTPUT:
            return b"", "killed: it wrote more than {max} bytes"
        chunks.append(chunk)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _last_object(out: bytes) -> dict[str, Any] | None:
    lines = out.rstrip(b"\n").rsplit(b"\n", 1)
    try:
        found = json.loads(lines[-1])
    except (ValueError, RecursionError):
        return None
    return found if isinstance(found, dict) else None


def said(text: bytes | str, limit: int = 160) -> str:
    """Untrusted text, as much as a report may carry: printable, short."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    lines = text.strip().splitlines() or ["no output"]
    plain = "".join(c if c.isprintable() else "?" for c in lines[-1])
    return plain[:limit] + ("…" if len(plain) > limit else "")

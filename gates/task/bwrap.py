"""The bubblewrap command line that holds an untrusted check (gates.task.sandbox).

The check runs in new user, pid, network, IPC, UTS and (where there is one) cgroup
namespaces, as uid and gid 65534 inside, with no capabilities, no environment but PATH,
LANG and HOME, and a new session (no terminal to inject into). Its root is an empty
read-only tmpfs holding, read-only, only what the interpreter needs: the interpreter,
its standard library and the system's shared libraries (/lib*, /usr/lib*). /proc is the
new pid namespace's (no other process is there), /dev the minimal one, and /check, its
working directory, a private tmpfs of 64 MiB. The harness script is bound alone; no part of the
checkout, /etc, /home, /root or /tmp is there. It dies with its parent.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

WORK = "/check"
WORK_BYTES = 64 * 1024 * 1024
HARNESS_INSIDE = "/handoff/harness.py"
NOBODY = "65534"
_SYSTEM_LIBS = ("/lib", "/lib32", "/lib64", "/libx32", "/usr/lib", "/usr/lib32", "/usr/lib64")


def interpreter() -> Path:
    """The base interpreter of this Python (a virtual environment's own is no use there)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    found = Path(sys.base_prefix) / "bin" / version
    return found if found.is_file() else Path(os.path.realpath(sys.executable))


def mounts(python: Path) -> list[str]:
    """Read-only binds (links as links) of what the interpreter needs, parents first."""
    wanted = {
        str(Path(os.path.realpath(python))),
        str(Path(sys.base_prefix) / "lib"),
        "/etc/ld.so.cache",
        *_SYSTEM_LIBS,
    }
    argv: list[str] = []
    for path in sorted(wanted, key=lambda p: (p.count("/"), p)):
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.exists(path) and not _covered(path, wanted):
            argv += ["--ro-bind", path, path]
    return argv


def _covered(path: str, wanted: set[str]) -> bool:
    """Already inside another real (not linked) bind."""
    return any(
        path != other and path.startswith(other + "/") and not os.path.islink(other)
        for other in wanted
        if os.path.isdir(other)
    )


def command(bwrap: str, harness: Path, seccomp_fd: int | None) -> list[str]:
    python = interpreter()
    seccomp = ["--seccomp", str(seccomp_fd)] if seccomp_fd is not None else []
    return [
        bwrap,
        "--unshare-user",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--uid", NOBODY,
        "--gid", NOBODY,
        "--hostname", "check",
        "--die-with-parent",
        "--new-session",
        "--cap-drop", "ALL",
        "--clearenv",
        "--setenv", "PATH", "/usr/bin:/bin",
        "--setenv", "LANG", "C.UTF-8",
        "--setenv", "HOME", WORK,
        *mounts(python),
        "--ro-bind", str(harness), HARNESS_INSIDE,
        "--proc", "/proc",
        "--dev", "/dev",
        "--size", str(WORK_BYTES), "--tmpfs", WORK,
        "--remount-ro", "/",
        "--chdir", WORK,
        *seccomp,
        "--",
        str(python), "-I", "-S", HARNESS_INSIDE,
    ]  # fmt: skip

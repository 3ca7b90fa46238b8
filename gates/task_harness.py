"""Runs one untrusted check inside the isolated subprocess (started by gates.task_sandbox).

Standard library only: it runs as a script under `python -I`, in a fresh directory, before
any untrusted code. In order: resource limits, dropping root to `nobody`, an audit hook that
refuses sockets, new processes, native code and writes outside the directory, then the
check. It prints one JSON line, {"nonce", "score", "detail"}; the nonce (read before the
check runs) keeps an answer that prints a line of its own from passing itself.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import sys
import traceback

NOBODY = 65534
# Loaded before dropping root: the interpreter's own library may be unreadable to nobody.
# socket is among them so that the guard, not a missing module, is what refuses it.
PRELOADED = (
    "math", "cmath", "re", "json", "collections", "itertools", "functools", "operator",
    "string", "heapq", "bisect", "typing", "dataclasses", "statistics", "fractions",
    "decimal", "random", "datetime", "copy", "unicodedata", "textwrap", "socket",
    "encodings.idna",
)  # fmt: skip
_BLOCKED = {
    "socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo",
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
    "os.forkpty", "pty.spawn", "ctypes.dlopen", "ctypes.cdata", "os.chroot", "sys.setprofile",
    "sys._getframe", "sys.settrace", "gc.get_objects", "gc.get_referrers",
}  # fmt: skip
_PATH_EVENTS = {
    "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.symlink",
    "os.link", "os.truncate", "os.utime", "shutil.rmtree",
}  # fmt: skip


def limit(cpu_s: int, memory_mb: int) -> None:
    mb = 1024 * 1024
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb * mb, memory_mb * mb))
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 * mb, 16 * mb))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))  # no new processes (not for root)


def drop_root(home: str) -> None:
    if os.getuid() == 0:
        os.chown(home, NOBODY, NOBODY)
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)


def guard(home: str) -> None:
    """Refuse, from here on, what a check has no business doing."""
    home = os.path.realpath(home)

    def inside(path: object) -> bool:
        if isinstance(path, int):
            return True  # an already open descriptor
        if not isinstance(path, str | bytes | os.PathLike):
            return False
        try:
            real = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return real == home or real.startswith(home + os.sep)

    def hook(event: str, args: tuple) -> None:
        if event in _BLOCKED or event.startswith("socket."):
            raise PermissionError(f"isolated check: {event} is not allowed")
        if event == "open" and args and len(args) > 1:
            mode, flags = args[1] or "r", args[2] if len(args) > 2 else 0
            writes = any(c in str(mode) for c in "wax+") or (flags or 0) & (
                os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
            )
            if writes and not inside(args[0]):
                raise PermissionError(f"isolated check: writing {args[0]!r} outside its directory")
        elif event in _PATH_EVENTS and not all(inside(a) for a in args[:2] if a is not None):
            raise PermissionError(f"isolated check: {event} outside its directory")

    sys.addaudithook(hook)


def run(job: dict) -> tuple[float, str]:
    scope: dict = {"__name__": "__main__"}
    if job["kind"] == "code":
        source = job["answer"] + "\n\n" + job["tests"]
        exec(compile(source, "answer_and_tests.py", "exec"), scope)
        return 1.0, "tests passed"
    exec(compile(job["source"], "check.py", "exec"), scope)
    verdict = scope["check"](job["answer"])
    score = float(verdict)
    if not 0.0 <= score <= 1.0:
        raise ValueError(f"check() returned {verdict!r}, expected a bool or a score in [0, 1]")
    return score, f"check() returned {verdict!r}"


def main() -> None:
    with open(sys.argv[1]) as f:
        job = json.load(f)
    os.remove(sys.argv[1])  # the expected results stay out of the check's reach
    out, nonce = sys.stdout, job.pop("nonce")
    home = os.getcwd()
    for name in PRELOADED:
        importlib.import_module(name)
    limit(job["cpu_s"], job["memory_mb"])
    drop_root(home)
    guard(home)
    try:
        score, detail = run(job)
    except BaseException as exc:  # any failure of untrusted code is a verdict
        where = traceback.format_exception_only(type(exc), exc)[-1].strip()
        score, detail = 0.0, f"failed: {where}"[:500]
    out.write(json.dumps({"nonce": nonce, "score": score, "detail": detail}) + "\n")
    out.flush()
    os._exit(0)  # skip interpreter teardown: nothing of the check's may run after this


if __name__ == "__main__":
    main()

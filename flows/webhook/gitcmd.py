"""git as the relay runs it: argument lists (no shell), never a prompt, and a deadline.

A fetch from a forge that accepts and never answers would otherwise hang forever. The
command runs in its own process group so that on the deadline git and whatever it
started (git-remote-http, ssh) are killed together, and nothing is left holding the
pipes. `git_timeout_s` of the relay is one budget for all the git work of a delivery.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

ERROR_CHARS = 400
# never wait for a password or a host-key answer: a relay has no terminal
_ENV = {
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ASKPASS": "true",
    "SSH_ASKPASS": "true",
    "GIT_CONFIG_NOSYSTEM": "1",
    "LC_ALL": "C",
}


class GitFailed(RuntimeError):
    """git exited non-zero; the message carries its (clipped) stderr."""


class GitTimeout(GitFailed):
    """git did not finish before the deadline and was killed."""


def clip(text: str, limit: int = ERROR_CHARS) -> str:
    """text cut to limit characters, saying how much was left out (logs and answers)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


def run_git(
    args: list[str], *, cwd: Path, deadline: float, config: dict[str, str] | None = None
) -> bytes:
    """stdout of `git -c k=v … args` in cwd; GitTimeout once time.monotonic() passes
    deadline, GitFailed on a non-zero exit."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise GitTimeout(f"git {args[0]}: no time left of the delivery's git budget")
    options = [arg for key, value in (config or {}).items() for arg in ("-c", f"{key}={value}")]
    ssh = os.environ.get("GIT_SSH_COMMAND") or "ssh -o BatchMode=yes"
    process = subprocess.Popen(
        ["git", *options, *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **_ENV, "GIT_SSH_COMMAND": ssh},
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=remaining)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        process.communicate()
        raise GitTimeout(f"git {args[0]} did not finish within {remaining:.1f} s") from None
    except BaseException:
        _kill_group(process)
        process.wait()
        raise
    if process.returncode != 0:
        message = err.decode("utf-8", "replace").strip()
        raise GitFailed(f"git {args[0]} failed ({process.returncode}): {clip(message)}")
    return out


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)

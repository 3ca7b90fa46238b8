"""``unshare --mount --propagation private -- python -m sandbox.kubelet.mountns
--bind SRC:DST[:ro] ... --workdir DIR -- COMMAND...``: a container's mounts, then its
command.

Run inside a private mount namespace, the bind mounts are seen by the command and its
children only, never by the machine's other processes (tests of other checkouts run in
parallel, each with its own token at the same path). A missing mount point is created as
an empty directory, as a runtime creates it in an image's root filesystem.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence


def _bind(spec: str) -> None:
    source, target, *flags = spec.split(":")
    os.makedirs(target, exist_ok=True)
    subprocess.run(["mount", "--bind", source, target], check=True)
    if "ro" in flags:
        subprocess.run(["mount", "-o", "remount,bind,ro", target], check=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.kubelet.mountns")
    parser.add_argument("--bind", action="append", default=[], metavar="SRC:DST[:ro]")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("command", nargs="+")
    args = parser.parse_args(argv)
    try:
        for spec in args.bind:
            _bind(spec)
        os.chdir(args.workdir)
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"container set-up failed: {exc}", file=sys.stderr)
        return 128
    try:
        os.execvp(args.command[0], args.command)
    except OSError as exc:
        print(f'exec: "{args.command[0]}": {exc.strerror}', file=sys.stderr)
        return 127
    return 0  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main())

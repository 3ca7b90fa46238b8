"""The faults a server can be started with, and the crash of a pod without libcuda."""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import NoReturn


class Fault(StrEnum):
    zero_key_band = "zero_key_band"
    """The image lacks the GDN conv fix: key channels zeroed, answers silently wrong."""
    crash_on_start = "crash_on_start"
    """No nvidia runtime class: cudarc cannot load libcuda and the process panics."""
    slow_start = "slow_start"
    """A cold start: /health answers 503 for `slow_start_s` seconds."""
    halved_logits = "halved_logits"
    """Logits halved (a temperature of 2 folded into the output head, a wrong norm scale):
    every greedy token kept, every distribution flatter than the model's."""
    stall = "stall"
    """Every stream stops after `stall_after_tokens` tokens and never finishes."""
    forgets_answers = "forgets_answers"
    """A share of the task-suite answers the profile knows are lost: the model no longer
    does part of its clients' work (sandbox.modelserver.known)."""


CUDARC_EXIT_CODE = 101  # what a Rust panic exits with
CUDARC_PANIC = (
    "thread 'main' panicked at /root/.cargo/registry/src/index.crates.io-6f17d22bba15001f/"
    "cudarc-0.11.9/src/driver/sys/mod.rs:18:5:\n"
    'Unable to dynamically load the cuda shared library - searched for library names: ["cuda", '
    '"nvcuda"]. Ensure that `LD_LIBRARY_PATH` has the correct path to the installed library.\n'
    "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n"
)


def crash_without_cuda() -> NoReturn:
    sys.stderr.write(CUDARC_PANIC)
    sys.stderr.flush()
    sys.exit(CUDARC_EXIT_CODE)

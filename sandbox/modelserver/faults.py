"""The crash a candle-vllm pod shows when it runs without the nvidia runtime class."""

from __future__ import annotations

import sys
from typing import NoReturn

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

"""Keep OpenBLAS to one thread in the model-server processes.

The model's matrices are tiny: OpenBLAS's worker threads cost more than they save, and on a
small shared machine their spin-waiting takes CPU from the clock thread (3x the CPU per token
measured on 2 cores). The library numpy bundles is reached through ctypes because the
environment variable is read only when numpy is first imported.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

_SETTERS = ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads")


def single_threaded_blas() -> bool:
    """True when an OpenBLAS thread setter was found and called."""
    libs = Path(np.__file__).parent.parent / "numpy.libs"
    for path in sorted(libs.glob("*openblas*")):
        lib = ctypes.CDLL(str(path))
        for name in _SETTERS:
            setter = getattr(lib, name, None)
            if setter is not None:
                setter(1)
                return True
    return False

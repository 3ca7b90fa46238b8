"""Precision-aware array operations for the tiny language model.

The reference runs in float32. The half-precision candidate keeps fp16 storage semantics the
way a tensor-core kernel does: inputs rounded to fp16, products accumulated in float32, every
op's output rounded back to fp16. Computing in float32 and rounding at op boundaries gives the
same values as native fp16 storage while staying on numpy's fast float32 paths.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sandbox.modelserver.precision import Precision

Array = np.ndarray

_RMS_EPS = 1e-6


_FP16_MIN_NORMAL = np.float32(2.0**-14)
_FP16_SUBNORMAL_STEP = np.float32(2.0**-24)


def to_fp16_grid(x: Array) -> Array:
    """Round to the nearest fp16 value, returned as float32 (weights are stored this way)."""
    return x.astype(np.float16).astype(np.float32)


def round_to_fp16(x: Array) -> Array:
    """The same values as `to_fp16_grid` for float32 input below fp16's overflow (65520), in
    a third of the time: round the float32 mantissa to fp16's 10 bits, nearest-even, and
    subnormals (below 2**-14) to fp16's fixed 2**-24 spacing."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    odd = (bits >> np.uint32(13)) & np.uint32(1)
    rounded = ((bits + np.uint32(0x0FFF) + odd) & np.uint32(0xFFFFE000)).view(np.float32)
    tiny = np.abs(x) < _FP16_MIN_NORMAL
    if tiny.any():
        subnormal = np.round(x / _FP16_SUBNORMAL_STEP) * _FP16_SUBNORMAL_STEP
        rounded = np.where(tiny, subnormal, rounded)
    return rounded


@dataclass(frozen=True)
class Numerics:
    """The op set for one precision; `r` rounds an op's output to that precision."""

    precision: Precision

    def r(self, x: Array) -> Array:
        if self.precision == "fp16":
            return round_to_fp16(x)
        return x.astype(np.float32, copy=False)

    def matmul(self, x: Array, w: Array) -> Array:
        return self.r(x @ w)

    def rmsnorm(self, x: Array, gain: Array) -> Array:
        # The mean of squares accumulates in float32 in both precisions, as real kernels do.
        scale = 1.0 / np.sqrt(np.mean(np.square(x), axis=-1, keepdims=True) + _RMS_EPS)
        return self.r(x * scale * gain)

    def l2norm(self, x: Array) -> Array:
        norm = np.sqrt(np.sum(np.square(x), axis=-1, keepdims=True) + _RMS_EPS)
        return self.r(x / norm)

    def silu(self, x: Array) -> Array:
        return self.r(x / (1.0 + np.exp(-x)))

    def sigmoid(self, x: Array) -> Array:
        return self.r(1.0 / (1.0 + np.exp(-x)))

    def softplus(self, x: Array) -> Array:
        return self.r(np.logaddexp(0.0, x))

    def add(self, x: Array, y: Array) -> Array:
        return self.r(x + y)

    def mul(self, x: Array, y: Array) -> Array:
        return self.r(x * y)

    def softmax(self, x: Array, axis: int = -1) -> Array:
        # Attention softmax accumulates in float32 (flash-attention style); output rounded.
        z = x - np.max(x, axis=axis, keepdims=True)
        e = np.exp(z)
        return self.r(e / np.sum(e, axis=axis, keepdims=True))

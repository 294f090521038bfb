"""numba kernel of ``noa bin``: parallel over output rows; each row accumulates its ``kd * kh`` input rows
into a float64 (complex128) row buffer, so the input is read row by row, contiguously. Cached on disk."""

from __future__ import annotations

import numba
import numpy as np
from numba.extending import overload

from noa_core.kernels.runtime import compile_parted, parts_of


def _bin(src, dst, kd, kh, kw, accumulator, control):
    """``accumulator``: an empty array of the type sums are made in (float64 or complex128); integer
    outputs take the nearest integer (half to even) of the mean."""
    nb, nd, nh, nw = dst.shape
    scale = 1.0 / (kd * kh * kw)
    for row in parts_of(nb * nd * nh):
        b, rest = row // (nd * nh), row % (nd * nh)
        d, h = rest // nh, rest % nh
        acc = np.zeros(nw, accumulator.dtype)
        for zd in range(kd):
            for zh in range(kh):
                line = src[b, d * kd + zd, h * kh + zh]
                for w in range(nw):
                    for zw in range(kw):
                        acc[w] += line[w * kw + zw]
        for w in range(nw):
            dst[b, d, h, w] = _mean_as(acc[w] * scale, dst)


def _mean_as(value, dst):
    """A mean as ``dst`` stores it: the nearest integer (half to even) for integer outputs."""
    return np.rint(value) if dst.dtype.kind in "iu" else value


@overload(_mean_as)
def _mean_as_typed(value, dst):
    if isinstance(dst.dtype, numba.types.Integer):
        return lambda value, dst: np.rint(value)
    return lambda value, dst: value


bin_kernel = compile_parted(_bin, {"np": np, "_mean_as": _mean_as})

"""Moments of values, accumulated over blocks: count, minimum, maximum, mean and the sum of squared
deviations (:class:`Moments`), merged exactly (Chan et al.), and :class:`RunningStatistics`, which turns them
into the four numbers a header records (:class:`noa_core.io.metadata.HeaderStatistics`).

A block's moments come from one parallel pass (:func:`block_moments`); the streamed statistics of
whole files (per section, percentiles) are :mod:`noa_core.statistics`.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from noa_core.array import Array, asarray
from noa_core.errors import DTypeError

if TYPE_CHECKING:
    from noa_core.io.metadata import HeaderStatistics


@dataclass(frozen=True)
class Moments:
    """Count, minimum, maximum, mean and sum of squared deviations from the mean (``m2``).

    Minimum and maximum are None for complex data (they have no order); NaN propagates as in NumPy.
    Two sets of moments of disjoint data merge exactly with :meth:`merge` (Chan et al.).
    """

    count: int
    min: float | None
    max: float | None
    mean: float | complex
    m2: float

    def merge(self, other: Moments) -> Moments:
        if other.count == 0:
            return self
        if self.count == 0:
            return other
        from noa_core.kernels import BUILTIN_OPS  # numba: only merging needs it
        from noa_core.kernels import cpu as cpu_kernels

        count, mean, m2 = cpu_kernels.chan_merge(self.count, self.mean, self.m2, other.count, other.mean, other.m2)
        return Moments(count, _extreme(BUILTIN_OPS["minimum"], self.min, other.min),
                       _extreme(BUILTIN_OPS["maximum"], self.max, other.max), mean, m2)


EMPTY_MOMENTS = Moments(0, None, None, 0.0, 0.0)


def _extreme(pick: Callable, a: float | None, b: float | None) -> float | None:
    """``pick(a, b)`` (a NaN-propagating minimum or maximum), where None means no value."""
    if a is None or b is None:
        return b if a is None else a
    return pick(a, b)



class RunningStatistics:
    """Minimum, maximum, mean and RMS deviation accumulated over blocks (float64; complex: RMS only).

    Each block's moments come from one parallel pass (:func:`block_moments`); blocks
    merge with Chan et al.'s formula, so merging the same blocks in the same order gives the same
    bits, whichever process computed them.
    """

    def __init__(self, moments: Moments | None = None) -> None:
        self.moments = EMPTY_MOMENTS if moments is None else moments

    def add(self, block: np.ndarray | Array) -> None:
        self.merge(RunningStatistics.of(block))

    @classmethod
    def of(cls, block: np.ndarray | Array) -> RunningStatistics:
        """The statistics of one block."""
        return cls(block_moments(block if isinstance(block, Array) else asarray(block)))

    def merge(self, other: RunningStatistics) -> None:
        """Add the values ``other`` accumulated."""
        self.moments = self.moments.merge(other.moments)

    def result(self) -> HeaderStatistics:
        from noa_core.io.metadata import HeaderStatistics  # the io package imports this module

        m = self.moments
        if m.count == 0:
            return HeaderStatistics(None, None, None, None)
        rms = math.sqrt(m.m2 / m.count)
        if m.min is None:  # complex: MRC statistics are real numbers, only the RMS deviation means something
            return HeaderStatistics(None, None, None, rms)
        return HeaderStatistics(m.min, m.max, float(m.mean), rms)


HALF_SLAB = 1 << 20  # float16 elements widened at a time for moments: 4 MiB of float32, in cache


def _float16_moments(array: Array) -> Moments:
    """:func:`block_moments` of float16 data, widened a slab of rows at a time into one small float32 buffer
    (numba has no float16 on the CPU): widening the whole array would cost a copy twice its size."""
    from noa_core import layout
    from noa_core.dispatch import FLOAT16_COMPUTE, half_bits, launch
    from noa_core.kernels import BUILTIN_OPS

    b, d, h, w = array.shape
    rows = builtins.max(1, HALF_SLAB // builtins.max(w, 1))
    scratch = np.empty(builtins.min(h, rows) * w, FLOAT16_COMPUTE)
    total = EMPTY_MOMENTS
    for i in range(b):
        for j in range(d):
            for r in range(0, h, rows):
                slab = array[i:i + 1, j:j + 1, r:r + rows]
                wide = Array(scratch, 0, slab.shape, layout.strides_for(slab.shape), FLOAT16_COMPUTE)
                launch(BUILTIN_OPS["half_value"], [half_bits(slab)], [wide])
                total = total.merge(block_moments(wide))
    return total


def block_moments(array: Array) -> Moments:
    """The :class:`Moments` of every element, in one parallel pass over memory (CPU).

    Accumulates in float64 (complex128). Used for file header statistics, tile by tile.
    """
    from noa_core import dtypes, layout  # numba: imported when data are measured, not for reading headers
    from noa_core.dispatch import flat_buffer
    from noa_core.kernels import cpu as cpu_kernels

    if dtypes.element_shape_of(array.dtype):
        raise DTypeError(f"moments take scalar element types, not {array.dtype}")
    dt = array.dtype
    if array.size == 0:
        return EMPTY_MOMENTS
    if array.device != "cpu":
        array = array.to("cpu")
    if array.dtype == np.float16:
        return _float16_moments(array)
    planned_shape, (planned_strides,) = layout.plan_iteration(array.shape, array.strides)
    flat, _ = flat_buffer(array)
    count, lo, hi, mean, m2 = cpu_kernels.moments(flat, planned_shape, planned_strides)
    if dt.kind == "c":
        return Moments(int(count), None, None, complex(mean), float(m2))
    return Moments(int(count), float(lo), float(hi), float(mean), float(m2))

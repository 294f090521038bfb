"""Moments of values, accumulated over blocks: count, minimum, maximum, mean and the sum of squared
deviations (:class:`Moments`), merged exactly (Chan et al.), and :class:`RunningStatistics`, which turns them
into the four numbers a header records (:class:`HeaderStatistics`).

A block's moments come from one parallel pass (:func:`block_moments`); the streamed statistics of
whole files (per section, percentiles) are :mod:`noa_core.images.statistics`.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
from numpy.lib.stride_tricks import as_strided

from noa_core import compute, kernels  # faces: the kernels' path loads numba, and only when it runs
from noa_core.array import Array, asarray, dtypes, layout
from noa_core.array.dtypes import FLOAT16_COMPUTE
from noa_core.array.scalar_ops import CHUNK, LANES, chan_merge, maximum, minimum
from noa_core.compute import compute_path
from noa_core.errors import DTypeError


@dataclass(frozen=True)
class HeaderStatistics:
    """Header statistics: minimum, maximum, mean and RMS deviation from the mean (None: unknown)."""

    min: float | None
    max: float | None
    mean: float | None
    rms: float | None


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
        count, mean, m2 = chan_merge(self.count, self.mean, self.m2, other.count, other.mean, other.m2)
        return Moments(count, _extreme(minimum, self.min, other.min), _extreme(maximum, self.max, other.max),
                       mean, m2)


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

    @classmethod
    def merged(cls, parts: Iterable[RunningStatistics]) -> RunningStatistics:
        """The statistics of ``parts`` together, merged in their order."""
        total = cls()
        for part in parts:
            total.merge(part)
        return total

    def result(self) -> HeaderStatistics:

        m = self.moments
        if m.count == 0:
            return HeaderStatistics(None, None, None, None)
        rms = math.sqrt(m.m2 / m.count)
        if m.min is None:  # complex: MRC statistics are real numbers, only the RMS deviation means something
            return HeaderStatistics(None, None, None, rms)
        return HeaderStatistics(m.min, m.max, float(cast(float, m.mean)), rms)  # real: min is set


HALF_SLAB = 1 << 20  # float16 elements widened at a time for moments: 4 MiB of float32, in cache


def _float16_moments(array: Array) -> Moments:
    """:func:`block_moments` of float16 data, widened a slab of rows at a time into one small float32 buffer
    (numba has no float16 on the CPU): widening the whole array would cost a copy twice its size."""
    b, d, h, w = array.shape
    rows = builtins.max(1, HALF_SLAB // builtins.max(w, 1))
    scratch = np.empty(builtins.min(h, rows) * w, FLOAT16_COMPUTE)
    total = EMPTY_MOMENTS
    for i in range(b):
        for j in range(d):
            for r in range(0, h, rows):
                slab = array[i:i + 1, j:j + 1, r:r + rows]
                wide = Array(scratch, 0, slab.shape, layout.strides_for(slab.shape), FLOAT16_COMPUTE)
                if compute_path.numpy_path():
                    np.copyto(wide.numpy(), slab.numpy())  # float16 to float32 is exact: the kernel's values
                else:
                    half_value = kernels.BUILTIN_OPS["half_value"]
                    compute.dispatch.launch(half_value, [compute.dispatch.half_bits(slab)], [wide])
                total = total.merge(block_moments(wide))
    return total


def block_moments(array: Array) -> Moments:
    """The :class:`Moments` of every element, in one parallel pass over memory (CPU).

    Accumulates in float64 (complex128). Used for file header statistics, tile by tile.
    """
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
    if compute_path.numpy_path():
        with np.errstate(all="ignore"):  # inf - inf is NaN, as in the kernel, without warnings
            count, lo, hi, mean, m2 = _numpy_moments(array, planned_shape, planned_strides)
    else:
        flat, _ = compute.dispatch.flat_buffer(array)
        count, lo, hi, mean, m2 = kernels.cpu.moments(flat, planned_shape, planned_strides)
    if dt.kind == "c":
        return Moments(int(count), None, None, complex(mean), float(m2))
    return Moments(int(count), float(lo), float(hi), float(mean), float(m2))


def _numpy_moments(array: Array, shape: Sequence[int], strides: Sequence[int]) -> tuple:
    """What ``noa_core.kernels.cpu.moments`` computes, to the bit, with NumPy. Over the planned layout, one
    task per run of at most ``CHUNK`` elements of a row, in row order: contiguous real runs sum their
    float64 values in ``LANES`` lanes added row by row, then the lanes in order, then the run's tail; other
    runs add their values one by one; the squared deviations from the run's mean likewise. The runs are
    then merged in task order (:func:`chan_merge`, NaN-propagating extremes; ties between 0.0 and -0.0
    resolved as the kernel's order resolves them)."""
    values = as_strided(array.numpy(), shape=tuple(shape), strides=tuple(s * array.itemsize for s in strides),
                        writeable=False)
    complex_input = values.dtype.kind == "c"
    lanes = (shape[3] == 1 or strides[3] == 1) and not complex_input
    rows = values.reshape(-1, shape[3])
    chunk = builtins.min(CHUNK, shape[3])
    columns = []  # per column range: (length, lows, highs, means, m2s) of every row's run
    for start in range(0, shape[3], chunk):
        runs = rows[:, start:start + chunk].astype(np.complex128 if complex_input else np.float64)
        lows = highs = None
        if not complex_input:
            lows, highs = _run_extreme(runs, lanes, "min"), _run_extreme(runs, lanes, "max")
        means = _run_means(_run_sums(runs, lanes), runs.shape[1])
        d = np.subtract(runs, means[:, None], out=runs)  # in place: the values are not needed again
        m2s = _run_sums(d.real * d.real + d.imag * d.imag if complex_input else np.multiply(d, d, out=d), lanes)
        columns.append((runs.shape[1], lows, highs, means, m2s))
    n, lo, hi, mean, m2 = None, np.inf, -np.inf, 0.0, 0.0
    for row in range(rows.shape[0]):  # the kernel's task order: the runs of a row, then the next row
        for length, lows, highs, means, m2s in columns:
            run_mean, run_m2 = means[row].item(), m2s[row].item()
            if n is None:
                n, mean, m2 = length, run_mean, run_m2
                if lows is not None and highs is not None:
                    lo, hi = lows[row], highs[row]
                continue
            n, mean, m2 = chan_merge(n, mean, m2, length, run_mean, run_m2)
            if lows is not None and highs is not None:
                lo, hi = minimum(lo, lows[row]), maximum(hi, highs[row])
    return n, lo, hi, mean, m2


def _run_means(sums: np.ndarray, count: int) -> np.ndarray:
    """``sums / count`` as the kernel divides: a complex sum by CPython's algorithm (numba's), with the
    count as ``count + 0j`` (NumPy's vectorised complex division rounds otherwise)."""
    if sums.dtype.kind != "c":
        return sums / count
    ratio = 0.0 / count
    means = np.empty_like(sums)
    means.real = (sums.real + sums.imag * ratio) / count
    means.imag = (sums.imag - sums.real * ratio) / count
    return means


def _run_sums(runs: np.ndarray, lanes: bool) -> np.ndarray:
    """Per row of ``runs``, the sum the kernel makes, starting from 0: in ``LANES`` lanes added row by
    row, the lanes added in order, then the tail (``lanes``); else every value in order. In order is
    ``np.add.accumulate``'s order, and ``np.add.reduce``'s along an axis that is not the innermost (along the
    innermost, NumPy's sums pair values up, which rounds differently); the lanes' reduce is 13x faster than
    their accumulate."""
    zero = np.zeros((runs.shape[0], 1), runs.dtype)
    if not lanes:
        return np.add.accumulate(np.concatenate([zero, runs], axis=1), axis=1)[:, -1]
    full = runs.shape[1] // LANES * LANES
    grid = runs[:, :full].reshape(runs.shape[0], -1, LANES)
    lane_sums = np.add.reduce(grid, axis=1, initial=0.0)
    return np.add.accumulate(np.concatenate([zero, lane_sums, runs[:, full:]], axis=1), axis=1)[:, -1]


def _run_extreme(runs: np.ndarray, lanes: bool, which: str) -> list[float]:
    """Per row, the NaN-propagating minimum or maximum the kernel finds. Only a zero can differ (0.0 and
    -0.0 compare equal, and the kernel keeps one by its order): the lanes keep their last, the lanes are
    taken in order keeping the last, then the tail's last; the one-by-one loop keeps the first."""
    found = runs.min(axis=1) if which == "min" else runs.max(axis=1)  # NaN propagates, as the kernel's
    out = [float(v) for v in found]
    for row in np.flatnonzero(found == 0):
        zeros = np.flatnonzero(runs[row] == 0)
        if lanes:
            full = runs.shape[1] // LANES * LANES
            tail = zeros[zeros >= full]
            if len(tail):
                pick = tail[-1]
            else:
                lane = zeros % LANES
                last_lane = lane.max()
                pick = zeros[lane == last_lane][-1]
        else:
            pick = zeros[0]
        out[row] = float(runs[row, pick])
    return out

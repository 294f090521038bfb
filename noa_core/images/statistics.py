"""Statistics of arrays larger than memory, streamed in tiles: per section, over the whole array, and
percentiles by a histogram pass.

Percentiles (``np.percentile``'s default 'linear' method: the order statistics around rank
``q / 100 * (n - 1)``, interpolated) take two passes over the data, each with bounded memory:

1. minimum and maximum (with the moments, :func:`noa_core.io.stream.batch_statistics`);
2. a histogram of ``HISTOGRAM_BINS`` (2**20) equal bins between them.

The order statistics are then read off the cumulative counts. Integer data whose range spans at
most 2**20 values (every 8- and 16-bit type) get one bin per value: the result is **exact**. Other
data (floats, wide integers) are assumed spread evenly within a bin: the error is at most one bin
width, ``(max - min) / 2**20`` (about 1e-6 of the range), and 0 at q = 0 and q = 100.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from noa_core.array import Array, layout
from noa_core.compute.moments import RunningStatistics
from noa_core.compute.tiles import plan_tile, tiles
from noa_core.errors import DTypeError, ShapeError, ValueRangeError
from noa_core.io import mapped, remote
from noa_core.io.stream import batch_statistics

HISTOGRAM_BINS = 1 << 20
HISTOGRAM_BLOCK_BYTES = 16 << 20  # the histogram pass holds an index per value: smaller tiles than a copy's


def _check_real(array: Array, what: str) -> None:
    if array.size == 0:
        raise ShapeError(f"{what}: the array of shape {array.shape} is empty")
    if array.dtype.kind == "c":
        raise DTypeError(f"{what}: complex data ({array.dtype}) have no order; convert to a real type first")


def _blocks(array: Array, entry_index: tuple[int, int] | None, block_bytes: int):
    """The values of ``array`` (or of its section ``(b, d)``), tile by tile, read into memory with pread."""
    b, d, h, w = array.shape
    entry = layout.Shape4((1, 1, h, w) if entry_index is not None else (b, d, h, w))
    tile = plan_tile(entry, [(array.strides, array.itemsize)], block_bytes)
    for key in tiles(entry, tile, array.strides):
        if entry_index is not None:
            bi, di = entry_index
            key = (slice(bi, bi + 1), slice(di, di + 1), *key[2:])
        yield mapped.read_view(array[key].numpy())


def section_statistics(array: Array, block_bytes: int = 128 << 20) -> list[RunningStatistics]:
    """The statistics of every (height, width) section, in (batch, depth) order, in one streamed pass."""
    b, d, _, _ = array.shape
    per_section = []
    with mapped.scratch_buffers():
        for bi in range(b):
            for di in range(d):
                per_section.append(RunningStatistics.merged(map(RunningStatistics.of,
                                                                _blocks(array, (bi, di), block_bytes))))
    return per_section


def whole_statistics(array: Array) -> RunningStatistics:
    """The statistics of the whole array, in one streamed pass."""
    return RunningStatistics.merged(batch_statistics(array))


def check_finite(stats: RunningStatistics, what: str) -> None:
    """Refuse data holding NaN or infinite values (their minimum, maximum or mean is then not finite)."""
    m = stats.moments
    values = (m.min, m.max, float(np.real(m.mean)))
    if not all(v is not None and math.isfinite(v) for v in values):
        raise ValueRangeError(f"{what}: the data hold NaN or infinite values; this needs finite values")


def _integral_range(array: Array, low: float, high: float) -> bool:
    return array.dtype.kind in "iub" and high - low + 1 <= HISTOGRAM_BINS


def histogram(array: Array, low: float, high: float, bins: int, *,
              block_bytes: int = HISTOGRAM_BLOCK_BYTES) -> np.ndarray:
    """Counts of the values of ``array`` in ``bins`` equal bins over ``[low, high]`` (the last bin closed),
    streamed tile by tile. Values outside are counted in the first or last bin."""
    counts = np.zeros(bins, np.int64)
    width = (high - low) / bins
    with mapped.scratch_buffers():
        for block in _blocks(array, None, block_bytes):
            flat = block.reshape(-1)
            if width == 0:
                counts[0] += flat.size
                continue
            index = np.floor((flat.astype(np.float64) - low) / width)
            np.clip(index, 0, bins - 1, out=index)
            counts += np.bincount(index.astype(np.intp), minlength=bins)
    return counts


def _order_statistic(counts: np.ndarray, cumulative: np.ndarray, rank: int, low: float, width: float,
                     exact: bool) -> float:
    """The value of rank ``rank`` (0-based) from a histogram: exact for one bin per integer value, else
    spread evenly within its bin."""
    j = int(np.searchsorted(cumulative, rank, side="right"))
    if exact:
        return low + j
    before = int(cumulative[j - 1]) if j else 0
    return low + (j + (rank - before + 0.5) / int(counts[j])) * width


def percentiles(array: Array, qs: Sequence[float], stats: RunningStatistics | None = None) -> tuple[float, ...]:
    """``np.percentile(array, qs)`` (the 'linear' method) of an array of any size, streamed: see the module
    documentation for the passes and their accuracy. ``stats``: the array's statistics when known."""
    _check_real(array, "percentiles")
    for q in qs:
        if not 0 <= q <= 100:
            raise ValueRangeError(f"percentiles: {q} is outside 0..100")
    stats = stats if stats is not None else whole_statistics(array)
    check_finite(stats, "percentiles")
    assert stats.moments.min is not None and stats.moments.max is not None  # real values (checked above)
    low, high = float(stats.moments.min), float(stats.moments.max)
    n = stats.moments.count
    exact = _integral_range(array, low, high)
    bins = int(high - low + 1) if exact else HISTOGRAM_BINS
    counts = histogram(array, low - 0.5 if exact else low, high + 0.5 if exact else high, bins)
    cumulative = np.cumsum(counts)
    width = 1.0 if exact else (high - low) / bins
    found = []
    for q in qs:
        position = q / 100 * (n - 1)
        k = math.floor(position)
        fraction = position - k
        v0 = _order_statistic(counts, cumulative, k, low, width, exact)
        v1 = _order_statistic(counts, cumulative, min(k + 1, n - 1), low, width, exact) if fraction else v0
        value = min(max(v0 + fraction * (v1 - v0), low), high)
        found.append(low if q == 0 else high if q == 100 else value)
    return tuple(found)


# -- a file's statistics, remembered by the file's identity ---------------------------------------------
# A plan is made again in every Dask task that fills tiles of a split output: the statistics pass of a
# file is then made once per process, not once per task.

_REMEMBERED: dict[tuple, object] = {}
_REMEMBER_AT_MOST = 16


def remembered(path, what: tuple, compute):
    """``compute()``, remembered per file (device, inode, size, modification time) and ``what``."""
    import os

    if remote.is_remote(path):  # no inode to know it by: computed each time
        return compute()
    st = os.stat(path)
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, what)
    if key not in _REMEMBERED:
        if len(_REMEMBERED) >= _REMEMBER_AT_MOST:
            _REMEMBERED.pop(next(iter(_REMEMBERED)))
        _REMEMBERED[key] = compute()
    return _REMEMBERED[key]

"""numba kernels of the FSC's per-shell sums (:mod:`noa_core.fourier.resolution`): one pass over both half transforms
adds ``Re(F1 conj F2)``, ``|F1|^2`` and ``|F2|^2`` (float64) into the shell accumulators, where NumPy
needs a shell index array and three ``bincount`` passes.

Both transforms are seen as rows ``(R, W // 2 + 1)`` (every leading axis flattened). Rows are summed in
chunks of ``rows_per_chunk``, each chunk from zero in row-major order, and the chunks' sums are added to
``sums`` in chunk order: the order :func:`noa_core.fourier.resolution.shell_sums` keeps on the NumPy path, so
both paths give the same bits. Chunks run in parallel in waves of ``wave`` (per-chunk partial sums, merged
in order after each wave: memory bounded by ``wave``, whatever the map's size); small maps run them on the
calling thread alone (:func:`noa_core.kernels.runtime.launch`). Cached on disk.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from noa_core.kernels import runtime


@numba.njit(cache=runtime.CACHE_ENABLED, nogil=True)
def _relion_chunk(f1, f2, row_r2, column_r2, table, start, stop, acc):
    """RELION's rule over rows ``start .. stop``: shell ``table[row_r2[r] + column_r2[j]]`` (the rounded
    radius of the integer squared radius), samples in shells ``>= acc.shape[1]`` left out."""
    count = acc.shape[1]
    for r in range(start, stop):
        base = row_r2[r]
        a, b = f1[r], f2[r]
        for j in range(a.shape[0]):
            s = table[base + column_r2[j]]
            if s < count:
                re1, im1 = np.float64(a[j].real), np.float64(a[j].imag)
                re2, im2 = np.float64(b[j].real), np.float64(b[j].imag)
                acc[0, s] += re1 * re2 + im1 * im2
                acc[1, s] += re1 * re1 + im1 * im1
                acc[2, s] += re2 * re2 + im2 * im2


@numba.njit(cache=runtime.CACHE_ENABLED, nogil=True)
def _linear_chunk(f1, f2, row_first, row_second, column, scale, nyquist, start, stop, low, high):
    """The linear rule over rows ``start .. stop``: ``|f|^2 = row_first[r] + (row_second[r] + column[j])``;
    within ``nyquist`` (|f|^2), ``r = |f| * scale`` puts ``1 - frac(r)`` of each product into ``low`` at
    ``floor(r)`` and ``frac(r)`` into ``high`` at ``floor(r) + 1`` (the last shell at most)."""
    last = low.shape[1] - 1
    for r in range(start, stop):
        first, second = row_first[r], row_second[r]
        a, b = f1[r], f2[r]
        for j in range(a.shape[0]):
            r2 = first + (second + column[j])
            if r2 <= nyquist:
                radius = math.sqrt(r2) * scale
                floor = math.floor(radius)
                fraction = radius - floor
                s = int(floor)
                t = min(s + 1, last)
                keep = 1.0 - fraction
                re1, im1 = np.float64(a[j].real), np.float64(a[j].imag)
                re2, im2 = np.float64(b[j].real), np.float64(b[j].imag)
                cross, power1, power2 = re1 * re2 + im1 * im2, re1 * re1 + im1 * im1, re2 * re2 + im2 * im2
                low[0, s] += cross * keep
                low[1, s] += power1 * keep
                low[2, s] += power2 * keep
                high[0, t] += cross * fraction
                high[1, t] += power1 * fraction
                high[2, t] += power2 * fraction


@numba.njit(parallel=True, cache=runtime.CACHE_ENABLED, nogil=True)
def relion_sums(f1, f2, row_r2, column_r2, table, rows_per_chunk, wave, sums):
    """Add RELION's per-shell sums of the rows ``f1``, ``f2`` (complex, ``(R, W // 2 + 1)``) to ``sums``
    (``(3, shells)`` float64: cross term, power of ``f1``, power of ``f2``)."""
    rows = f1.shape[0]
    chunks = (rows + rows_per_chunk - 1) // rows_per_chunk
    partials = np.empty((min(wave, chunks), 3, sums.shape[1]))
    for first in range(0, chunks, wave):
        n = min(wave, chunks - first)
        for c in numba.prange(n):
            partials[c] = 0.0
            start = (first + c) * rows_per_chunk
            _relion_chunk(f1, f2, row_r2, column_r2, table, start, min(rows, start + rows_per_chunk), partials[c])
        for c in range(n):
            sums += partials[c]


@numba.njit(parallel=True, cache=runtime.CACHE_ENABLED, nogil=True)
def linear_sums(f1, f2, row_first, row_second, column, scale, nyquist, rows_per_chunk, wave, sums):
    """Add the linear rule's per-shell sums to ``sums`` (``(3, shells)``); per chunk, the sums of the lower
    shells, then those of the upper ones (see :func:`_linear_chunk`)."""
    rows = f1.shape[0]
    chunks = (rows + rows_per_chunk - 1) // rows_per_chunk
    partials = np.empty((min(wave, chunks), 2, 3, sums.shape[1]))
    for first in range(0, chunks, wave):
        n = min(wave, chunks - first)
        for c in numba.prange(n):
            partials[c] = 0.0
            start = (first + c) * rows_per_chunk
            _linear_chunk(f1, f2, row_first, row_second, column, scale, nyquist, start,
                          min(rows, start + rows_per_chunk), partials[c, 0], partials[c, 1])
        for c in range(n):
            sums += partials[c, 0]
            sums += partials[c, 1]


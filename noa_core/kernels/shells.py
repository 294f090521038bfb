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
from noa_core.kernels.runtime import compile_parted, parts_of


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


def _relion_chunks(f1, f2, row_r2, column_r2, table, rows_per_chunk, first, partials, control):
    """The sums of chunks ``first ..`` (``partials``: ``(n, 1, 3, shells)``) of this part."""
    rows = f1.shape[0]
    for c in parts_of(partials.shape[0]):
        partials[c] = 0.0
        start = (first + c) * rows_per_chunk
        _relion_chunk(f1, f2, row_r2, column_r2, table, start, min(rows, start + rows_per_chunk), partials[c, 0])


def _linear_chunks(f1, f2, row_first, row_second, column, scale, nyquist, rows_per_chunk, first, partials, control):
    """The sums of chunks ``first ..`` (``partials``: ``(n, 2, 3, shells)``, the lower shells' then the upper
    ones') of this part."""
    rows = f1.shape[0]
    for c in parts_of(partials.shape[0]):
        partials[c] = 0.0
        start = (first + c) * rows_per_chunk
        _linear_chunk(f1, f2, row_first, row_second, column, scale, nyquist, start,
                      min(rows, start + rows_per_chunk), partials[c, 0], partials[c, 1])


_RELION_CHUNKS = compile_parted(_relion_chunks, {"_relion_chunk": _relion_chunk})
_LINEAR_CHUNKS = compile_parted(_linear_chunks, {"_linear_chunk": _linear_chunk})


def relion_sums(f1, f2, row_r2, column_r2, table, rows_per_chunk: int, wave: int, sums: np.ndarray,
                parallel: bool) -> None:
    """Add RELION's per-shell sums of the rows ``f1``, ``f2`` (complex, ``(R, W // 2 + 1)``) to ``sums``
    (``(3, shells)`` float64: cross term, power of ``f1``, power of ``f2``)."""
    _in_waves(_RELION_CHUNKS, (f1, f2, row_r2, column_r2, table), rows_per_chunk, wave, sums, parallel, 1)


def linear_sums(f1, f2, row_first, row_second, column, scale: float, nyquist: float, rows_per_chunk: int,
                wave: int, sums: np.ndarray, parallel: bool) -> None:
    """Add the linear rule's per-shell sums to ``sums`` (``(3, shells)``); per chunk, the sums of the lower
    shells, then those of the upper ones (see :func:`_linear_chunk`)."""
    _in_waves(_LINEAR_CHUNKS, (f1, f2, row_first, row_second, column, scale, nyquist), rows_per_chunk, wave, sums,
              parallel, 2)


def _in_waves(chunks_kernel, args: tuple, rows_per_chunk: int, wave: int, sums: np.ndarray, parallel: bool,
              per_chunk: int) -> None:
    """Run ``chunks_kernel`` over every chunk of rows, ``wave`` chunks at a time, adding each chunk's
    ``per_chunk`` partial sums to ``sums`` in chunk order once its wave is done."""
    rows = args[0].shape[0]
    chunks = -(-rows // rows_per_chunk)
    partials = np.empty((min(wave, chunks), per_chunk, *sums.shape))
    for first in range(0, chunks, wave):
        n = min(wave, chunks - first)
        runtime.launch(chunks_kernel, parallel, *args, rows_per_chunk, first, partials[:n])
        for partial in partials[:n].reshape(-1, *sums.shape):
            sums += partial

"""numba kernel of ``noa symmetrize``: for every output voxel, the sum over a point group's operators of the
trilinear sample of the map at ``R r``, divided by the group's order, in RELION 3.1.3's arithmetic.

RELION's ``symmetriseMap`` (``src/symmetries.cpp``) adds, in double precision (its CPU build's ``RFLOAT``),
the map and one ``applyGeometry(img, aux, R, IS_INV, DONT_WRAP)`` per operator (``src/transformations.h``);
this kernel does the same sums without the copies, a tile of output rows at a time, operators outer (each
operator's samples then walk along a rod of the map, whose reads stay in cache), each voxel summed in a
float64 buffer in RELION's order: the map first, then the operators in their order. Per operator and row
it transcribes ``applyGeometry``: ``xp = x A00 + y A01 + z A02`` from the row's start ``x = -cen_x``
(``cen = N // 2``), then ``xp += A00`` per column; a sample whose ``xp`` is below ``-cen_x - 1e-6`` or
above ``N - 1 - cen_x + 1e-6`` on any axis reads 0 (RELION's ``XMIPP_EQUAL_ACCURACY``); inside, the
corner is the integer part (truncated, as C's ``(int)``) of ``xp + cen_x`` and a neighbour past the last
voxel adds nothing. Compiled with ``fastmath`` off, so the sums round as RELION's do. Parallel over
tiles of rows; cached on disk.
"""

from __future__ import annotations

import numba
import numpy as np

from noa_core import runtime

EQUAL = 1e-6  # RELION's XMIPP_EQUAL_ACCURACY: the margin of its bounds test
# Output rows are summed in tiles of TILE x TILE rows (z, y) of whole rows: an operator's samples for one tile
# then read a rod of the map that stays in cache, each voxel being read by several samples. Whole rows, as
# RELION steps xp along a row by additions whose roundings the kernel repeats. 8 measured best (256^3, I1:
# 21 ns per sample and core against 35 for tiles of 16 rows of one plane; 16 x 16: 23).
TILE = 8


@numba.njit(parallel=True, cache=runtime.CACHE_ENABLED, nogil=True)
def symmetrize_kernel(src, dst, matrices, order, columns, tiles):
    """``src`` (D, H, W) float32 or float64; ``dst`` (D, H, W) float32 or float64, written where computed;
    ``matrices`` (K, 3, 3) float64: the operators but the identity, on (x, y, z); ``order``: what the sum
    is divided by; ``columns`` (D, H) int64: how many leading voxels of each row to compute (W, 1 or 0:
    the caller fills the rest from symmetric rows); ``tiles`` (T, 2) int64: the first (z, y) row of every
    TILE x TILE tile holding rows to compute (:func:`tiles_of`), shared among the threads."""
    nz, ny, nx = src.shape
    cz, cy, cx = nz // 2, ny // 2, nx // 2
    low_x, high_x = float(-cx) - EQUAL, float(nx - cx - 1) + EQUAL
    low_y, high_y = float(-cy) - EQUAL, float(ny - cy - 1) + EQUAL
    low_z, high_z = float(-cz) - EQUAL, float(nz - cz - 1) + EQUAL
    for task in numba.prange(tiles.shape[0]):
        k0, i0 = tiles[task, 0], tiles[task, 1]
        k1, i1 = min(k0 + TILE, nz), min(i0 + TILE, ny)
        acc = np.empty((k1 - k0, i1 - i0, nx), np.float64)
        for k in range(k0, k1):  # RELION's sum starts from the map
            for i in range(i0, i1):
                for j in range(columns[k, i]):
                    acc[k - k0, i - i0, j] = src[k, i, j]
        for s in range(matrices.shape[0]):
            a = matrices[s]
            for k in range(k0, k1):
                z = float(k - cz)
                for i in range(i0, i1):
                    row = acc[k - k0, i - i0]
                    y = float(i - cy)
                    x = float(-cx)
                    xp = x * a[0, 0] + y * a[0, 1] + z * a[0, 2]
                    yp = x * a[1, 0] + y * a[1, 1] + z * a[1, 2]
                    zp = x * a[2, 0] + y * a[2, 1] + z * a[2, 2]
                    for j in range(columns[k, i]):
                        if low_x <= xp <= high_x and low_y <= yp <= high_y and low_z <= zp <= high_z:
                            row[j] += _sample(src, xp + cx, yp + cy, zp + cz)
                        xp += a[0, 0]
                        yp += a[1, 0]
                        zp += a[2, 0]
        for k in range(k0, k1):
            for i in range(i0, i1):
                for j in range(columns[k, i]):
                    dst[k, i, j] = acc[k - k0, i - i0, j] / order


def tiles_of(columns: np.ndarray) -> np.ndarray:
    """The first (z, y) row of every TILE x TILE tile of ``columns`` (D, H) with a row to compute."""
    nz, ny = columns.shape
    busy = np.zeros(((nz + TILE - 1) // TILE, (ny + TILE - 1) // TILE), bool)
    k, i = np.nonzero(columns)
    busy[k // TILE, i // TILE] = True
    return np.argwhere(busy).astype(np.int64) * TILE


@numba.njit(inline="always", nogil=True)
def _sample(src, wx, wy, wz):
    """RELION's trilinear sample at index coordinates (wx, wy, wz), each within [-1e-6, N - 1 + 1e-6]: its
    terms in its order and grouping, a neighbour past the last voxel left out."""
    nz, ny, nx = src.shape
    m1, n1, o1 = int(wx), int(wy), int(wz)  # C's (int): towards zero, so -1e-6 reads voxel 0
    wx, wy, wz = wx - m1, wy - n1, wz - o1
    ux, uy, uz = 1 - wx, 1 - wy, 1 - wz
    tmp = uz * uy * ux * np.float64(src[o1, n1, m1])
    if m1 + 1 < nx and n1 + 1 < ny and o1 + 1 < nz:  # inside: every term, no more tests
        tmp += uz * uy * wx * np.float64(src[o1, n1, m1 + 1])
        tmp += uz * wy * ux * np.float64(src[o1, n1 + 1, m1])
        tmp += uz * wy * wx * np.float64(src[o1, n1 + 1, m1 + 1])
        tmp += wz * uy * ux * np.float64(src[o1 + 1, n1, m1])
        tmp += wz * uy * wx * np.float64(src[o1 + 1, n1, m1 + 1])
        tmp += wz * wy * ux * np.float64(src[o1 + 1, n1 + 1, m1])
        tmp += wz * wy * wx * np.float64(src[o1 + 1, n1 + 1, m1 + 1])
        return tmp
    m2, n2, o2 = m1 + 1, n1 + 1, o1 + 1
    if m2 < nx:
        tmp += uz * uy * wx * np.float64(src[o1, n1, m2])
    if n2 < ny:
        tmp += uz * wy * ux * np.float64(src[o1, n2, m1])
        if m2 < nx:
            tmp += uz * wy * wx * np.float64(src[o1, n2, m2])
    if o2 < nz:
        tmp += wz * uy * ux * np.float64(src[o2, n1, m1])
        if m2 < nx:
            tmp += wz * uy * wx * np.float64(src[o2, n1, m2])
        if n2 < ny:
            tmp += wz * wy * ux * np.float64(src[o2, n2, m1])
            if m2 < nx:
                tmp += wz * wy * wx * np.float64(src[o2, n2, m2])
    return tmp

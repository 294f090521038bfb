"""Kernels of ``noa symmetrize``, CPU and CUDA from one source: for every output voxel, the sum over a point
group's operators of the trilinear sample of the map at ``R r``, divided by the group's order, in RELION
3.1.3's arithmetic.

RELION's ``symmetriseMap`` (``src/symmetries.cpp``) adds, in double precision (its CPU build's ``RFLOAT``),
the map and one ``applyGeometry(img, aux, R, IS_INV, DONT_WRAP)`` per operator (``src/transformations.h``);
these kernels do the same sums without the copies, each voxel summed in float64 in RELION's order: the map
first, then the operators in their order. Per operator and row, :func:`add_operator` transcribes
``applyGeometry``: ``xp = x A00 + y A01 + z A02`` from the row's start ``x = -cen_x`` (``cen = N // 2``), then
``xp += A00`` per column; a sample whose ``xp`` is below ``-cen_x - 1e-6`` or above ``N - 1 - cen_x + 1e-6`` on
any axis reads 0 (RELION's ``XMIPP_EQUAL_ACCURACY``); inside, the corner is the integer part (truncated, as
C's ``(int)``) of ``xp + cen_x`` and a neighbour past the last voxel adds nothing.

The functions below are plain Python, compiled per target as :mod:`noa_core.kernels.transform` compiles its
own: :data:`symmetrize_kernel` for the CPU (``numba.njit``, ``fastmath`` off so the sums round as RELION's do,
parallel over tiles of rows, cached on disk) and :func:`cuda_kernels` (one thread per output row, the sums
in a float64 volume; rows copied between symmetric rows by a second kernel), so both compute the same sums
in the same order. (A GPU compiler may fuse a multiply and an add into one rounding: there the sums may
differ from the CPU's in their last bit of double.)
"""

from __future__ import annotations

import threading

import numba
import numpy as np

from noa_core.kernels.runtime import compile_parted, parts_of
from noa_core.kernels.transform import rebind

EQUAL = 1e-6  # RELION's XMIPP_EQUAL_ACCURACY: the margin of its bounds test
# Output rows are summed in tiles of TILE x TILE rows (z, y) of whole rows: an operator's samples for one tile
# then read a rod of the map that stays in cache, each voxel being read by several samples. Whole rows, as
# RELION steps xp along a row by additions whose roundings the kernel repeats. 8 measured best (256^3, I1:
# 21 ns per sample and core against 35 for tiles of 16 rows of one plane; 16 x 16: 23).
TILE = 8


# -- sums (plain Python, compiled per target) ----------------------------------------------------------


def sample(src, wx, wy, wz):
    """RELION's trilinear sample at index coordinates (wx, wy, wz), each within [-1e-6, N - 1 + 1e-6]: its
    terms in its order and grouping, a neighbour past the last voxel left out."""
    nz, ny, nx = src.shape
    m1, n1, o1 = int(wx), int(wy), int(wz)  # C's (int): towards zero, so -1e-6 reads voxel 0
    wx, wy, wz = wx - m1, wy - n1, wz - o1
    ux, uy, uz = 1 - wx, 1 - wy, 1 - wz
    tmp = uz * uy * ux * float(src[o1, n1, m1])
    if m1 + 1 < nx and n1 + 1 < ny and o1 + 1 < nz:  # inside: every term, no more tests
        tmp += uz * uy * wx * float(src[o1, n1, m1 + 1])
        tmp += uz * wy * ux * float(src[o1, n1 + 1, m1])
        tmp += uz * wy * wx * float(src[o1, n1 + 1, m1 + 1])
        tmp += wz * uy * ux * float(src[o1 + 1, n1, m1])
        tmp += wz * uy * wx * float(src[o1 + 1, n1, m1 + 1])
        tmp += wz * wy * ux * float(src[o1 + 1, n1 + 1, m1])
        tmp += wz * wy * wx * float(src[o1 + 1, n1 + 1, m1 + 1])
        return tmp
    m2, n2, o2 = m1 + 1, n1 + 1, o1 + 1
    if m2 < nx:
        tmp += uz * uy * wx * float(src[o1, n1, m2])
    if n2 < ny:
        tmp += uz * wy * ux * float(src[o1, n2, m1])
        if m2 < nx:
            tmp += uz * wy * wx * float(src[o1, n2, m2])
    if o2 < nz:
        tmp += wz * uy * ux * float(src[o2, n1, m1])
        if m2 < nx:
            tmp += wz * uy * wx * float(src[o2, n1, m2])
        if n2 < ny:
            tmp += wz * wy * ux * float(src[o2, n2, m1])
            if m2 < nx:
                tmp += wz * wy * wx * float(src[o2, n2, m2])
    return tmp


def add_operator(src, acc, ak, ai, a, k, i, count):
    """Add to ``acc[ak, ai, :count]`` the samples of ``src`` (D, H, W) at ``a r`` (``a`` 3x3 on x, y, z) for the
    first ``count`` voxels of the output row (k, i): RELION's applyGeometry along one row."""
    nz, ny, nx = src.shape
    cz, cy, cx = nz // 2, ny // 2, nx // 2
    low_x, high_x = float(-cx) - EQUAL, float(nx - cx - 1) + EQUAL
    low_y, high_y = float(-cy) - EQUAL, float(ny - cy - 1) + EQUAL
    low_z, high_z = float(-cz) - EQUAL, float(nz - cz - 1) + EQUAL
    z = float(k - cz)
    y = float(i - cy)
    x = float(-cx)
    xp = x * a[0, 0] + y * a[0, 1] + z * a[0, 2]
    yp = x * a[1, 0] + y * a[1, 1] + z * a[1, 2]
    zp = x * a[2, 0] + y * a[2, 1] + z * a[2, 2]
    for j in range(count):
        if low_x <= xp <= high_x and low_y <= yp <= high_y and low_z <= zp <= high_z:
            acc[ak, ai, j] += sample(src, xp + cx, yp + cy, zp + cz)
        xp += a[0, 0]
        yp += a[1, 0]
        zp += a[2, 0]


# -- kernels ---------------------------------------------------------------------------------------------


def cpu_symmetrize(src, dst, matrices, order, columns, tiles, control):
    """``src`` (D, H, W) float32 or float64; ``dst`` (D, H, W) float32 or float64, written where computed;
    ``matrices`` (K, 3, 3) float64: the operators but the identity, on (x, y, z); ``order``: what the sum
    is divided by; ``columns`` (D, H) int64: how many leading voxels of each row to compute (W, 1 or 0:
    the caller fills the rest from symmetric rows); ``tiles`` (T, 2) int64: the first (z, y) row of every
    TILE x TILE tile holding rows to compute (:func:`tiles_of`), shared among the threads. Operators outer
    within a tile: each operator's samples then walk along a rod of the map, whose reads stay in cache."""
    nz, ny, nx = src.shape
    for task in parts_of(tiles.shape[0]):
        k0, i0 = tiles[task, 0], tiles[task, 1]
        k1, i1 = min(k0 + TILE, nz), min(i0 + TILE, ny)
        acc = np.empty((k1 - k0, i1 - i0, nx), np.float64)
        for k in range(k0, k1):  # RELION's sum starts from the map
            for i in range(i0, i1):
                for j in range(columns[k, i]):
                    acc[k - k0, i - i0, j] = src[k, i, j]
        for s in range(matrices.shape[0]):
            for k in range(k0, k1):
                for i in range(i0, i1):
                    add_operator(src, acc, k - k0, i - i0, matrices[s], k, i, columns[k, i])
        for k in range(k0, k1):
            for i in range(i0, i1):
                for j in range(columns[k, i]):
                    dst[k, i, j] = acc[k - k0, i - i0, j] / order


def cuda_symmetrize(src, dst, total, matrices, order, columns):
    """:func:`cpu_symmetrize` with one thread per output row (grid-stride), summed in ``total`` (D, H, W)
    float64."""
    nz, ny = columns.shape
    start = cuda.grid(1)  # noqa: F821 (numba.cuda, from the namespace)
    step = cuda.gridsize(1)  # noqa: F821
    for task in range(start, nz * ny, step):
        k = task // ny
        i = task - k * ny
        count = columns[k, i]
        for j in range(count):
            total[k, i, j] = src[k, i, j]
        for s in range(matrices.shape[0]):
            add_operator(src, total, k, i, matrices[s], k, i, count)
        for j in range(count):
            dst[k, i, j] = total[k, i, j] / order


def cuda_copy_rows(volume, targets, sources, flipped):
    """The rows ``targets`` of ``volume`` (flat z H + y indices) copied from the rows ``sources``, reversed
    about W//2 where ``flipped`` (the first voxel of an even row kept): ``symmetry._copy_rows`` on CUDA."""
    ny, nx = volume.shape[1], volume.shape[2]
    first = 1 if nx % 2 == 0 else 0
    start = cuda.grid(1)  # noqa: F821
    step = cuda.gridsize(1)  # noqa: F821
    for t in range(start, targets.shape[0], step):
        tz, sz = targets[t] // ny, sources[t] // ny
        ty, sy = targets[t] - tz * ny, sources[t] - sz * ny
        if flipped[t]:
            for j in range(first, nx):
                volume[tz, ty, j] = volume[sz, sy, nx - 1 + first - j]
        else:
            for j in range(nx):
                volume[tz, ty, j] = volume[sz, sy, j]


def tiles_of(columns: np.ndarray) -> np.ndarray:
    """The first (z, y) row of every TILE x TILE tile of ``columns`` (D, H) with a row to compute."""
    nz, ny = columns.shape
    busy = np.zeros(((nz + TILE - 1) // TILE, (ny + TILE - 1) // TILE), bool)
    k, i = np.nonzero(columns)
    busy[k // TILE, i // TILE] = True
    return np.argwhere(busy).astype(np.int64) * TILE


_CPU: dict = {"__name__": __name__, "np": np, "EQUAL": EQUAL, "TILE": TILE}
_CPU.update({f.__name__: numba.njit(inline="always", nogil=True)(rebind(f, _CPU)) for f in (sample, add_operator)})
symmetrize_kernel = compile_parted(cpu_symmetrize, _CPU)

_LOCK = threading.Lock()
_CUDA: dict = {}


def cuda_kernels() -> dict:
    """``{'symmetrize': kernel, 'copy_rows': kernel}`` compiled with numba-cuda (launch with
    :func:`noa_core.kernels.transform.launch_cuda`)."""
    from numba import cuda

    with _LOCK:
        if not _CUDA:
            namespace: dict = {"__name__": __name__, "cuda": cuda, "EQUAL": EQUAL}
            for helper in (sample, add_operator):
                namespace[helper.__name__] = cuda.jit(device=True)(rebind(helper, namespace))
            _CUDA.update(symmetrize=cuda.jit(rebind(cuda_symmetrize, namespace)),
                         copy_rows=cuda.jit(rebind(cuda_copy_rows, namespace)))
        return _CUDA

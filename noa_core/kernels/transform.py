"""Affine transform kernels (2-d and 3-d, nearest / linear / cubic B-spline), CPU and CUDA from one source.

The sampling functions below are plain Python; :func:`cpu_kernels` compiles them with
``numba.njit`` (cached on disk, the kernels parallel over output rows) and :func:`cuda_kernels`
with ``numba.cuda.jit(device=True)`` (one thread per output element), each in its own namespace so
that a function calls the other functions of its own target. Conventions are scipy.ndimage's:
an output index ``o`` (``(y, x)`` or ``(z, y, x)``) samples the input at ``M[:, :-1] @ o + M[:, -1]``
(``M`` the inverse matrix of the batch entry); nearest rounds half up (``floor(c + 0.5)``); cubic
interpolates B-spline coefficients (the caller prefilters) around ``floor(c) - 1 .. floor(c) + 2``.
Borders: zero (samples outside read 0, scipy's 'grid-constant'), clamp ('nearest') and mirror
(half-sample symmetric, ``d c b a | a b c d | d c b a``: scipy's 'reflect').
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from types import FunctionType
from typing import Any, cast

import numba

from noa_core.kernels import runtime
from noa_core.kernels.runtime import compile_parted, parts_of

NEAREST, LINEAR, CUBIC = 0, 1, 3
ZERO, CLAMP, MIRROR = 0, 1, 2
INTERPOLATIONS = {"nearest": NEAREST, "linear": LINEAR, "cubic": CUBIC}
BORDERS = {"zero": ZERO, "clamp": CLAMP, "mirror": MIRROR}
# Coordinates further out than this are treated as outside (zero), whatever the border: their integer
# parts would overflow, and no matrix a user means gets there.
FAR = 1e15


# -- sampling (plain Python, compiled per target) -----------------------------------------------


def fold(i, n, border):
    """The index that sample ``i`` of an axis of ``n`` reads, or -1 for a zero sample."""
    if i >= 0 and i < n:
        return i
    if border == 0:
        return -1
    if border == 1:
        return 0 if i < 0 else n - 1
    period = 2 * n
    i = i % period
    if i < 0:
        i += period
    if i >= n:
        i = period - 1 - i
    return i


def bspline(t, k):
    """Weight of neighbour ``k`` (0..3, at floor(c) - 1 + k) of the cubic B-spline at fraction ``t``."""
    if k == 0:
        return (1.0 - t) * (1.0 - t) * (1.0 - t) / 6.0
    if k == 1:
        return (3.0 * t * t * t - 6.0 * t * t + 4.0) / 6.0
    if k == 2:
        return (-3.0 * t * t * t + 3.0 * t * t + 3.0 * t + 1.0) / 6.0
    return t * t * t / 6.0


def sample_2d(src, y, x, interp, border):
    """``src`` (H, W) at (y, x)."""
    h, w = src.shape
    if not (abs(y) < 1e15 and abs(x) < 1e15):
        return 0.0
    if interp == 0:
        iy = fold(int(math.floor(y + 0.5)), h, border)
        ix = fold(int(math.floor(x + 0.5)), w, border)
        if iy < 0 or ix < 0:
            return 0.0
        return src[iy, ix] * 1.0
    fy, fx = math.floor(y), math.floor(x)
    ty, tx = y - fy, x - fx
    y0, x0 = int(fy), int(fx)
    if interp == 1:
        if y0 >= 0 and y0 + 1 < h and x0 >= 0 and x0 + 1 < w:  # inside: no border rule needed
            top = src[y0, x0] * (1.0 - tx) + src[y0, x0 + 1] * tx
            bottom = src[y0 + 1, x0] * (1.0 - tx) + src[y0 + 1, x0 + 1] * tx
            return top * (1.0 - ty) + bottom * ty
        total = 0.0
        for dy in range(2):
            iy = fold(y0 + dy, h, border)
            if iy < 0:
                continue
            wy = ty if dy == 1 else 1.0 - ty
            for dx in range(2):
                ix = fold(x0 + dx, w, border)
                if ix < 0:
                    continue
                total += wy * (tx if dx == 1 else 1.0 - tx) * src[iy, ix]
        return total
    total = 0.0
    inside = y0 >= 1 and y0 + 2 < h and x0 >= 1 and x0 + 2 < w
    for dy in range(4):
        iy = y0 - 1 + dy
        if not inside:
            iy = fold(iy, h, border)
            if iy < 0:
                continue
        wy = bspline(ty, dy)
        row = 0.0
        for dx in range(4):
            ix = x0 - 1 + dx
            if not inside:
                ix = fold(ix, w, border)
                if ix < 0:
                    continue
            row += bspline(tx, dx) * src[iy, ix]
        total += wy * row
    return total


def sample_3d(src, z, y, x, interp, border):
    """``src`` (D, H, W) at (z, y, x)."""
    d, h, w = src.shape
    if not (abs(z) < 1e15 and abs(y) < 1e15 and abs(x) < 1e15):
        return 0.0
    if interp == 0:
        iz = fold(int(math.floor(z + 0.5)), d, border)
        iy = fold(int(math.floor(y + 0.5)), h, border)
        ix = fold(int(math.floor(x + 0.5)), w, border)
        if iz < 0 or iy < 0 or ix < 0:
            return 0.0
        return src[iz, iy, ix] * 1.0
    fz, fy, fx = math.floor(z), math.floor(y), math.floor(x)
    tz, ty, tx = z - fz, y - fy, x - fx
    z0, y0, x0 = int(fz), int(fy), int(fx)
    taps = 2 if interp == 1 else 4
    first = 0 if interp == 1 else 1
    inside = (z0 >= first and z0 + taps - first - 1 < d and y0 >= first and y0 + taps - first - 1 < h
              and x0 >= first and x0 + taps - first - 1 < w)
    total = 0.0
    for dz in range(taps):
        iz = z0 - first + dz
        if not inside:
            iz = fold(iz, d, border)
            if iz < 0:
                continue
        if interp == 1:
            wz = tz if dz == 1 else 1.0 - tz
        else:
            wz = bspline(tz, dz)
        plane = 0.0
        for dy in range(taps):
            iy = y0 - first + dy
            if not inside:
                iy = fold(iy, h, border)
                if iy < 0:
                    continue
            if interp == 1:
                wy = ty if dy == 1 else 1.0 - ty
            else:
                wy = bspline(ty, dy)
            row = 0.0
            for dx in range(taps):
                ix = x0 - first + dx
                if not inside:
                    ix = fold(ix, w, border)
                    if ix < 0:
                        continue
                if interp == 1:
                    wx = tx if dx == 1 else 1.0 - tx
                else:
                    wx = bspline(tx, dx)
                row += wx * src[iz, iy, ix]
            plane += wy * row
        total += wz * plane
    return total


# -- kernels --------------------------------------------------------------------------------------


def cpu_transform_2d(src, dst, matrices, interp, border, offset, control):
    """dst[b, y, x] = src[b or 0] at M_b @ (y, x, 1) + offset; parallel over output rows."""
    n_batch, height, width = dst.shape
    for task in parts_of(n_batch * height):
        b = task // height
        y = task % height
        m = matrices[b if matrices.shape[0] > 1 else 0]
        image = src[b if src.shape[0] > 1 else 0]
        cy = m[0, 0] * y + m[0, 2] + offset
        cx = m[1, 0] * y + m[1, 2] + offset
        dy, dx = m[0, 1], m[1, 1]
        if interp == 1:  # the common case, inlined: pixels whose 4 neighbours lie inside need no border rule
            h, w = image.shape
            for x in range(width):
                sy = cy + dy * x
                sx = cx + dx * x
                fy = math.floor(sy)
                fx = math.floor(sx)
                if fy >= 0.0 and fy < h - 1 and fx >= 0.0 and fx < w - 1:
                    y0 = int(fy)
                    x0 = int(fx)
                    ty = sy - fy
                    tx = sx - fx
                    top = image[y0, x0] + (image[y0, x0 + 1] - image[y0, x0]) * tx
                    bottom = image[y0 + 1, x0] + (image[y0 + 1, x0 + 1] - image[y0 + 1, x0]) * tx
                    dst[b, y, x] = top + (bottom - top) * ty
                else:
                    dst[b, y, x] = sample_2d(image, sy, sx, interp, border)
        else:
            for x in range(width):
                dst[b, y, x] = sample_2d(image, cy + dy * x, cx + dx * x, interp, border)


def cpu_transform_3d(src, dst, matrices, interp, border, offset, control):
    """dst[b, z, y, x] = src[b or 0] at M_b @ (z, y, x, 1) + offset; parallel over output rows."""
    n_batch, depth, height, width = dst.shape
    for task in parts_of(n_batch * depth * height):
        y = task % height
        r = task // height
        z = r % depth
        b = r // depth
        m = matrices[b if matrices.shape[0] > 1 else 0]
        volume = src[b if src.shape[0] > 1 else 0]
        cz = m[0, 0] * z + m[0, 1] * y + m[0, 3] + offset
        cy = m[1, 0] * z + m[1, 1] * y + m[1, 3] + offset
        cx = m[2, 0] * z + m[2, 1] * y + m[2, 3] + offset
        for x in range(width):
            dst[b, z, y, x] = sample_3d(volume, cz + m[0, 2] * x, cy + m[1, 2] * x, cx + m[2, 2] * x,
                                        interp, border)


def cuda_transform_2d(src, dst, matrices, interp, border, offset):
    """One thread per output element (grid-stride)."""
    n_batch, height, width = dst.shape
    count = n_batch * height * width
    start = cuda.grid(1)  # noqa: F821 (numba.cuda, from the namespace)
    step = cuda.gridsize(1)  # noqa: F821
    for index in range(start, count, step):
        x = index % width
        r = index // width
        y = r % height
        b = r // height
        m = matrices[b if matrices.shape[0] > 1 else 0]
        image = src[b if src.shape[0] > 1 else 0]
        dst[b, y, x] = sample_2d(image, m[0, 0] * y + m[0, 1] * x + m[0, 2] + offset,
                                 m[1, 0] * y + m[1, 1] * x + m[1, 2] + offset, interp, border)


def cuda_transform_3d(src, dst, matrices, interp, border, offset):
    """One thread per output element (grid-stride)."""
    n_batch, depth, height, width = dst.shape
    count = n_batch * depth * height * width
    start = cuda.grid(1)  # noqa: F821
    step = cuda.gridsize(1)  # noqa: F821
    for index in range(start, count, step):
        x = index % width
        r = index // width
        y = r % height
        r = r // height
        z = r % depth
        b = r // depth
        m = matrices[b if matrices.shape[0] > 1 else 0]
        volume = src[b if src.shape[0] > 1 else 0]
        dst[b, z, y, x] = sample_3d(volume, m[0, 0] * z + m[0, 1] * y + m[0, 2] * x + m[0, 3] + offset,
                                    m[1, 0] * z + m[1, 1] * y + m[1, 2] * x + m[1, 3] + offset,
                                    m[2, 0] * z + m[2, 1] * y + m[2, 2] * x + m[2, 3] + offset, interp, border)


_HELPERS = (fold, bspline, sample_2d, sample_3d)
_LOCK = threading.Lock()
_BUILT: dict[str, dict] = {}


def rebind(func: Callable[..., Any], namespace: dict) -> FunctionType:
    """``func`` with ``namespace`` as its globals: its calls reach the functions compiled for one target."""
    plain = cast(FunctionType, func)  # one of the plain Python functions above
    rebound = FunctionType(plain.__code__, namespace, plain.__name__, plain.__defaults__)
    rebound.__qualname__ = plain.__qualname__
    return rebound


def cpu_kernels() -> dict:
    """``{'2d': kernel, '3d': kernel}`` compiled with numba for the CPU (cached on disk)."""
    with _LOCK:
        if "cpu" not in _BUILT:
            namespace: dict = {"__name__": __name__, "math": math}
            device = numba.njit(cache=runtime.CACHE_ENABLED, nogil=True)
            for helper in _HELPERS:
                namespace[helper.__name__] = device(rebind(helper, namespace))
            _BUILT["cpu"] = {"2d": compile_parted(cpu_transform_2d, namespace),
                             "3d": compile_parted(cpu_transform_3d, namespace)}
        return _BUILT["cpu"]


def cuda_kernels() -> dict:
    """``{'2d': kernel, '3d': kernel}`` compiled with numba-cuda (launch ``kernel[blocks, threads]``)."""
    from numba import cuda

    with _LOCK:
        if "cuda" not in _BUILT:
            namespace: dict = {"__name__": __name__, "math": math, "cuda": cuda}
            for helper in _HELPERS:
                namespace[helper.__name__] = cuda.jit(device=True)(rebind(helper, namespace))
            _BUILT["cuda"] = {"2d": cuda.jit(rebind(cuda_transform_2d, namespace)),
                              "3d": cuda.jit(rebind(cuda_transform_3d, namespace))}
        return _BUILT["cuda"]


def launch_cuda(kernel, count: int, *args) -> None:
    """Run a CUDA transform kernel over ``count`` output elements."""
    from numba import cuda

    threads = max(1, min(256, count))
    blocks = max(1, min(65535, math.ceil(count / threads)))
    kernel[blocks, threads](*args)
    cuda.synchronize()

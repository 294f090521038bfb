"""Affine transforms of image stacks (2-d) and volumes (3-d), and the matrices that describe them.

:func:`transform_2d` and :func:`transform_3d` take the **inverse** matrix of each batch entry: the
output index ``(y, x)`` (``(z, y, x)``) samples the input at ``M @ (y, x, 1)``, as
``scipy.ndimage.affine_transform`` does (rows and columns in array-index order, never x first).
Matrices are arrays of ``noa.matrix`` elements, shape ``(n, 1, 1, 1)`` with element shape ``(2, 3)``
or ``(3, 3)`` for 2-d, ``(3, 4)`` or ``(4, 4)`` for 3-d (the last row of a square one is ignored),
or anything NumPy reads as ``(n, rows, cols)``; ``n`` is 1 (one matrix for every entry) or the
output's batch. :func:`affine_2d` and :func:`affine_3d` build them from a rotation (degrees,
counter-clockwise with x right and y up; in 3-d RELION's ZYZ Euler angles, rotating as
``relion_project --3d_rot`` does), a shift (pixels, the content moves by it) and a scale
(magnification) about the centre ``n // 2`` of each axis.

Interpolation: 'nearest', 'linear' or 'cubic' (cubic B-spline with the exact prefilter: scipy's
``order=3``). Borders: 'zero', 'clamp' or 'mirror' (half-sample symmetric; scipy's 'grid-constant',
'nearest' and 'reflect'). Kernels: numba on the CPU (parallel over rows) and on CUDA.

Example::

    import noa_core as noa
    out = noa.empty(stack.shape)
    noa.geometry.transform_2d(stack, out, noa.geometry.affine_2d(stack.shape, rotate=30, shift=(0, 5)))
"""

from __future__ import annotations

import io
import math
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from noa_core import kernels  # a face: the matrices need no numba, the kernels load when a transform runs
from noa_core.array import Array, asarray
from noa_core.errors import DeviceError, DTypeError, ParameterError, PathRefusedError, ReadOnlyError, ShapeError
from noa_core.io import beneath

__all__ = ["transform_2d", "transform_3d", "affine_2d", "affine_3d", "rotate_2d", "euler_zyz", "relion_rotated",
           "as_matrices", "INTERPOLATIONS", "BORDERS"]

INTERPOLATIONS = ("linear", "cubic", "nearest")
BORDERS = ("zero", "clamp", "mirror")
_SCIPY_MODES = {"zero": "grid-constant", "clamp": "nearest", "mirror": "reflect"}
_PREFILTER_PAD = 12  # scipy pads 'grid-constant' and 'nearest' inputs so before its spline prefilter


# -- matrices -----------------------------------------------------------------------------------


def rotate_2d(degrees: float) -> np.ndarray:
    """The 2x2 rotation of the content by ``degrees`` counter-clockwise (x right, y up), acting on
    ``(y, x)``."""
    c, s = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
    return np.array([[c, s], [-s, c]])


def euler_zyz(rot: float, tilt: float, psi: float) -> np.ndarray:
    """RELION's rotation matrix for the Euler angles ``(rot, tilt, psi)`` (degrees, ZYZ), acting on
    ``(z, y, x)``.

    This is RELION's ``Euler_angles2matrix(rot, tilt, psi)`` (src/euler.cpp) ``A``, which acts on
    ``(x, y, z)``, with its rows and columns reversed. ``A = Rz(-psi) Ry(-tilt) Rz(-rot)`` with
    right-handed active rotations ``R``, so ``A`` turns the content by ``-rot`` about z, then ``-tilt``
    about y, then ``-psi`` about z. RELION rotates a map by ``A`` (``relion_project --3d_rot``, and its
    projections are along z of the map so rotated): :func:`affine_3d` does the same."""
    a, b, g = (math.radians(v) for v in (rot, tilt, psi))
    ca, sa, cb, sb, cg, sg = math.cos(a), math.sin(a), math.cos(b), math.sin(b), math.cos(g), math.sin(g)
    xyz = np.array([[cg * cb * ca - sg * sa, cg * cb * sa + sg * ca, -cg * sb],
                    [-sg * cb * ca - cg * sa, -sg * cb * sa + cg * ca, sg * sb],
                    [sb * ca, sb * sa, cb]])
    return xyz[::-1, ::-1].copy()  # (x, y, z) -> (z, y, x)


def _affine(shape: Sequence[int], linear: np.ndarray, shift: Sequence[float], scale: float | Sequence[float],
            center: Sequence[float] | None) -> np.ndarray:
    n = linear.shape[0]
    centre = np.array([s // 2 for s in shape], float) if center is None else np.asarray(center, float)
    scales = np.broadcast_to(np.asarray(scale, float), (n,))
    if not np.all(scales > 0):
        raise ParameterError(f"{tuple(scales)} must be above 0", "scale")
    forward = np.eye(n + 1)
    forward[:n, :n] = linear @ np.diag(scales)
    forward[:n, n] = centre + np.asarray(shift, float) - forward[:n, :n] @ centre
    return np.linalg.inv(forward)


def affine_2d(shape: Sequence[int], rotate: float = 0.0, shift: Sequence[float] = (0.0, 0.0),
              scale: float | Sequence[float] = 1.0, center: Sequence[float] | None = None) -> np.ndarray:
    """The inverse 3x3 matrix for :func:`transform_2d` that scales (``scale`` or ``(sy, sx)``), then
    rotates by ``rotate`` degrees, about ``center`` (default ``(H // 2, W // 2)`` of the BDHW or
    (H, W) ``shape``), then shifts the content by ``shift = (dy, dx)`` pixels."""
    hw = tuple(shape)[-2:]
    return _affine(hw, rotate_2d(rotate), shift, scale, center)


def affine_3d(shape: Sequence[int], euler: Sequence[float] = (0.0, 0.0, 0.0),
              shift: Sequence[float] = (0.0, 0.0, 0.0), scale: float | Sequence[float] = 1.0,
              center: Sequence[float] | None = None) -> np.ndarray:
    """The inverse 4x4 matrix for :func:`transform_3d`: scale, rotate the map by RELION's matrix ``A``
    of the Euler angles ``euler = (rot, tilt, psi)`` (:func:`euler_zyz`) about ``center`` (default
    ``n // 2`` of D, H, W), then shift the content by ``(dz, dy, dx)``.

    The output at ``r`` (from the centre) is the input at ``A^T r``: exactly what
    ``relion_project --3d_rot --rot --tilt --psi`` writes (its ``--xoff/--yoff/--zoff`` move the content
    by minus the offset: ``shift=(-zoff, -yoff, -xoff)``). noa 0.1.0 before issue 25 took ``euler`` as
    the opposite rotation, ``(-rot, -tilt, -psi)`` in RELION's terms."""
    dhw = tuple(shape)[-3:]
    return _affine(dhw, euler_zyz(*euler), shift, scale, center)


def as_matrices(matrices, ndim: int) -> np.ndarray:
    """``(n, ndim, ndim + 1)`` float64 inverse matrices from noa matrix arrays, NumPy arrays or lists
    (``(rows, cols)`` or ``(n, rows, cols)``, rows ``ndim`` or ``ndim + 1``)."""
    if isinstance(matrices, Array):
        values = matrices.to("cpu").numpy()
        if values.ndim != 6 or values.shape[1:4] != (1, 1, 1):
            raise ShapeError(f"matrices: an array of matrix elements of shape (n, 1, 1, 1) is expected, not "
                             f"{matrices.shape} with element shape {matrices.element_shape}")
        values = values.reshape(values.shape[0], *values.shape[4:])
    else:
        values = np.asarray(matrices, dtype=np.float64)
        if values.ndim == 2:
            values = values[None]
    if values.ndim != 3 or values.shape[1] not in (ndim, ndim + 1) or values.shape[2] != ndim + 1:
        raise ShapeError(f"matrices: {ndim}-d transforms take {ndim}x{ndim + 1} or {ndim + 1}x{ndim + 1} "
                         f"matrices; got shape {values.shape[1:] if values.ndim == 3 else values.shape}")
    values = np.ascontiguousarray(values[:, :ndim, :], dtype=np.float64)
    if not np.isfinite(values).all():
        raise ParameterError("the matrices hold values that are not finite numbers", "matrices")
    return values


# -- transforms ---------------------------------------------------------------------------------


def _check(name: str, input: Array, output: Array, count: int, interp: str, border: str) -> None:
    if interp not in INTERPOLATIONS:
        raise ParameterError(f"{interp!r} is not one of {', '.join(INTERPOLATIONS)}", "interp")
    if border not in BORDERS:
        raise ParameterError(f"{border!r} is not one of {', '.join(BORDERS)}", "border")
    if input.device != output.device:
        raise DeviceError(f"{name}: the input is on {input.device} and the output on {output.device}")
    for what, array in (("input", input), ("output", output)):
        if array.element_shape or array.dtype.kind not in "fiub":
            raise DTypeError(f"{name}: the {what} of element type {array.dtype} is not real scalars")
    if output.dtype not in (np.float32, np.float64):
        raise DTypeError(f"{name}: the output must be float32 or float64, not {output.dtype}")
    if not output.writable:
        raise ReadOnlyError(f"{name}: the output is read-only (or broadcast)")
    batch = output.shape[0]
    if input.shape[0] not in (1, batch):
        raise ShapeError(f"{name}: the input's batch of {input.shape[0]} (shape {input.shape}) must be 1 or the "
                         f"output's, {batch} (shape {output.shape})")
    if count not in (1, batch):
        raise ShapeError(f"{name}: {count} matrices for an output batch of {batch}; give 1 or {batch}")


def _prefiltered(values: np.ndarray, spatial: int, border: str) -> tuple[np.ndarray, float]:
    """B-spline coefficients of ``values`` along its last ``spatial`` axes, exactly as scipy.ndimage
    computes them before an ``order=3`` interpolation (padded for 'zero' and 'clamp'), and the offset
    of the original samples in them."""
    from scipy import ndimage

    mode = _SCIPY_MODES[border]
    pad = _PREFILTER_PAD if border in ("zero", "clamp") else 0
    coefficients = values.astype(np.float64)
    if pad:
        widths = [(0, 0)] * (values.ndim - spatial) + [(pad, pad)] * spatial
        coefficients = np.pad(coefficients, widths, mode="constant" if border == "zero" else "edge")
    for axis in range(values.ndim - spatial, values.ndim):
        coefficients = ndimage.spline_filter1d(coefficients, 3, axis=axis, output=np.float64, mode=mode)
    return coefficients, float(pad)


def _run(name: str, ndim: int, input: Array, output: Array, matrices, interp: str, border: str) -> Array:
    transform_kernels = kernels.transform
    m = as_matrices(matrices, ndim)
    _check(name, input, output, m.shape[0], interp, border)
    if output.size == 0:
        return output
    if input.size == 0:
        raise ShapeError(f"{name}: the input of shape {input.shape} is empty; there is nothing to sample")
    real = output.dtype
    device = output.device
    codes = (transform_kernels.INTERPOLATIONS[interp], transform_kernels.BORDERS[border])
    direct = interp != "cubic" and input.dtype == real  # the kernel reads the input where it lies
    offset = 0.0
    values: Any = None  # the input's values on the CPU, where they are read
    if device == "cpu" or not direct:
        values = (input if device == "cpu" else input.to("cpu")).numpy()
        values = values[:, 0] if ndim == 2 else values
        if interp == "cubic":
            values, offset = _prefiltered(values, ndim, border)
            values = values.astype(real, copy=False)
        elif values.dtype != real:
            values = values.astype(real)
    if device == "cpu":
        out = output.numpy()
        kernel = transform_kernels.cpu_kernels()[f"{ndim}d"]
        kernels.runtime.launch(kernel, True, kernels.runtime.read_only(values), out[:, 0] if ndim == 2 else out, m,
                               *codes, offset)
        return output
    from numba import cuda

    src = input if direct else asarray(np.ascontiguousarray(values[:, None] if ndim == 2 else values)).to("cuda")
    src_view, dst_view = kernels.cuda.view4d(src), kernels.cuda.view4d(output)
    if ndim == 2:
        src_view, dst_view = src_view[:, 0], dst_view[:, 0]
    transform_kernels.launch_cuda(transform_kernels.cuda_kernels()[f"{ndim}d"], output.size, src_view, dst_view,
                                  cuda.to_device(m), *codes, offset)
    return output


def transform_2d(input: Array | np.ndarray, output: Array | np.ndarray, matrices, interp: str = "linear",
                 border: str = "zero") -> Array:
    """Fill ``output`` (B, 1, H', W'; an Array or a NumPy array, written in place) with each image of
    ``input`` ((B or 1), 1, H, W) sampled at the inverse ``matrices`` (1 or B of them, see the module);
    returns ``output`` as an Array. A volume (depth > 1) is refused: use :func:`transform_3d`."""
    x = input if isinstance(input, Array) else asarray(input)
    output = output if isinstance(output, Array) else asarray(output)  # a NumPy output is written in place
    for what, array in (("input", x), ("output", output)):
        if array.shape[1] != 1:
            raise ShapeError(f"transform_2d: the {what} of shape {array.shape} is a volume (depth "
                             f"{array.shape[1]}); transform_2d takes images (B, 1, H, W): use transform_3d")
    return _run("transform_2d", 2, x, output, matrices, interp, border)


def transform_3d(input: Array | np.ndarray, output: Array | np.ndarray, matrices, interp: str = "linear",
                 border: str = "zero") -> Array:
    """Fill ``output`` (B, D', H', W'; an Array or a NumPy array, written in place) with each volume of ``input``
    ((B or 1), D, H, W) sampled at the
    inverse ``matrices`` (1 or B of them); returns ``output``. A stack of images (depth 1) is
    refused: use :func:`transform_2d`."""
    x = input if isinstance(input, Array) else asarray(input)
    output = output if isinstance(output, Array) else asarray(output)
    for what, array in (("input", x), ("output", output)):
        if array.shape[1] == 1:
            raise ShapeError(f"transform_3d: the {what} of shape {array.shape} is not a volume (depth "
                             f"{array.shape[1]}); transform_3d takes volumes (B, D, H, W): use transform_2d")
    return _run("transform_3d", 3, x, output, matrices, interp, border)


RELION_PADDING = 2  # relion_project's --pad default: the map is padded to twice its size before its transform


def relion_rotated(volume: np.ndarray, euler: Sequence[float] = (0.0, 0.0, 0.0),
                   shift: Sequence[float] = (0.0, 0.0, 0.0)) -> np.ndarray:
    """The cube ``volume`` (D, H, W) as ``relion_project --3d_rot --rot --tilt --psi --xoff --yoff --zoff`` (RELION
    3.1.3) writes it, float64: its Projector (src/projector.cpp: griddingCorrect, computeFourierTransformMap,
    rotate3D) and src/apps/project.cpp transcribed. ``euler`` and ``shift`` (dz, dy, dx: RELION's offsets negated)
    mean what they mean in :func:`affine_3d`; RELION reads them as float32, and so they are rounded here.

    The rotation happens in Fourier space, so it differs from :func:`transform_3d`'s in three ways: the result is
    periodic (content rotated or shifted out of the box comes back in at the opposite face); it holds only the
    frequencies within the Nyquist sphere (|k| <= N // 2); and for an odd N the map comes out one voxel further
    along every axis (RELION's CenterFFT puts the origin at N // 2 + 1). Steps: the map divided by sinc²(r / 2N)
    (trilinear interpolation's transform), padded into 2N (its centre at N), transformed (normalised by the
    samples, times pad³) with the origin moved to the centre by sign; samples of |k| <= 2 (N // 2) kept (logical
    index k < N + 1 is k, else k - 2N: -N never stored); each output sample of |k| <= N // 2 (logical k <= N // 2
    is k, else k - N) interpolated trilinearly in that grid at 2 A⁻¹ k (conjugated where x < 0), unless
    int(|2 A⁻¹ k|²) > (2 (N // 2))²; the offsets applied as phases exp(-2πi k.s / N) (k < N // 2 + 1 is k, else
    k - N); the inverse transform unnormalised; and the origin rolled from index 0 by -(N // 2)."""
    from scipy import fft as scipy_fft  # as ndimage above: importing geometry does not import scipy (0.3 s)

    n = volume.shape[0]
    if volume.ndim != 3 or volume.shape != (n, n, n):
        raise ShapeError(f"relion_project rotates cubes; the volume of shape {volume.shape} is not one")
    half = n // 2
    pad_size = RELION_PADDING * n
    logical = np.arange(n) - half
    radius = np.sqrt(logical[:, None, None] ** 2 + logical[None, :, None] ** 2 + logical[None, None, :] ** 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        rval = radius / pad_size
        sinc = np.where(radius > 0, np.sin(np.pi * rval) / (np.pi * rval), 1.0)
    padded = np.zeros((pad_size,) * 3)
    start = n - half  # the map's logical 0 at the padded box's logical 0, index n
    padded[start:start + n, start:start + n, start:start + n] = volume.astype(np.float64) / (sinc * sinc)
    # the half transform along x first, then the other axes in place: the padded map and one transform held at once
    spectrum = scipy_fft.rfft(padded, axis=2)
    del padded
    spectrum = scipy_fft.fftn(spectrum, axes=(0, 1), overwrite_x=True)
    spectrum *= RELION_PADDING ** 3 / pad_size ** 3
    sign = np.where(np.arange(pad_size) % 2 == 1, -1.0, 1.0)  # CenterFFTbySign: (-1)^(k + i + j)
    spectrum *= sign[:, None, None]
    spectrum *= sign[None, :, None]
    spectrum *= sign[None, None, :n + 1]
    ref_r2 = (RELION_PADDING * half) ** 2

    def data(z: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Projector::data at logical (z, y, x): 0 beyond |k|² = ref_r2 and on the planes -N (never filled)."""
        kept = (z * z + y * y + x * x <= ref_r2) & (z != -n) & (y != -n)
        # spectrum: deleted below only after the last call (to free it before the inverse transform)
        return np.where(kept, spectrum[z % pad_size, y % pad_size, np.minimum(x, n)], 0.0)  # noqa: F821

    a = euler_zyz(*(float(np.float32(v)) for v in euler))[::-1, ::-1]  # RELION's A, acting on (x, y, z)
    inverse = np.linalg.inv(a) * RELION_PADDING
    def lerp(t: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:  # RELION's LIN_INTERP
        return low + (high - low) * t

    out = np.zeros((n, n, half + 1), np.complex128)
    signed = np.where(np.arange(n) <= half, np.arange(n), np.arange(n) - n)  # logical index of a depth or row
    y, x = np.meshgrid(signed, np.arange(half + 1), indexing="ij")
    for k, z in enumerate(signed):
        inside = x * x + y * y + z * z <= half * half
        xo, yo = x[inside], y[inside]
        xp, yp, zp = (inverse[row, 0] * xo + inverse[row, 1] * yo + inverse[row, 2] * z for row in range(3))
        keep = (xp * xp + yp * yp + zp * zp).astype(np.int64) <= ref_r2  # C's int(): truncation
        xp, yp, zp, rows, columns = xp[keep], yp[keep], zp[keep], yo[keep] % n, xo[keep]
        negative = xp < 0  # only the half x >= 0 is stored: the Hermitian mate, conjugated
        xp, yp, zp = (np.where(negative, -v, v) for v in (xp, yp, zp))
        x0, y0, z0 = (np.floor(v).astype(np.int64) for v in (xp, yp, zp))
        fx, fy, fz = xp - x0, yp - y0, zp - z0
        dx00 = lerp(fx, data(z0, y0, x0), data(z0, y0, x0 + 1))
        dx01 = lerp(fx, data(z0 + 1, y0, x0), data(z0 + 1, y0, x0 + 1))
        dx10 = lerp(fx, data(z0, y0 + 1, x0), data(z0, y0 + 1, x0 + 1))
        dx11 = lerp(fx, data(z0 + 1, y0 + 1, x0), data(z0 + 1, y0 + 1, x0 + 1))
        value = lerp(fz, lerp(fy, dx00, dx10), lerp(fy, dx01, dx11))
        out[k, rows, columns] = np.where(negative, np.conj(value), value)
    del spectrum
    offsets = [float(np.float32(v)) for v in shift]  # (dz, dy, dx): RELION's shift vector (-zoff, -yoff, -xoff)
    if any(abs(v) > 0.001 for v in offsets):  # project.cpp shifts only past 0.001 pixel
        phase = (offsets[0] * signed[:, None, None] + offsets[1] * signed[None, :, None]
                 + offsets[2] * np.arange(half + 1)[None, None, :]) * (-2 * np.pi / n)
        out *= np.cos(phase) + 1j * np.sin(phase)
    rotated = np.fft.irfftn(out, s=(n, n, n), axes=(0, 1, 2)) * float(n) ** 3
    return np.roll(rotated, -half, axis=(0, 1, 2))


MATRIX_FILE_BYTES_PER_MATRIX = 4096  # the most a file may spend on one matrix (text with comments, or .npy)


def _matrix_file_bytes(path, most: int) -> bytes:
    """The bytes of a matrices file, refused unless it is a regular file of at most ``most`` bytes: a FIFO
    or a device (/dev/zero) would block or never end, and nothing is read beyond what the batch can use."""
    try:
        fd = beneath.open_path(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except PathRefusedError:
        raise
    except OSError as exc:
        raise ParameterError(f"{path}: cannot be read ({exc.strerror or exc})", "matrices") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ParameterError(f"{path}: not a regular file (a pipe, device or folder cannot hold matrices)",
                                 "matrices")
        data = bytearray()
        while chunk := os.read(fd, most + 1 - len(data)):  # bounded, should the file grow meanwhile
            data += chunk
            if len(data) > most:
                raise ParameterError(f"{path}: more than the {most} bytes its matrices can need (at most "
                                     f"{MATRIX_FILE_BYTES_PER_MATRIX} per batch entry)", "matrices")
        return bytes(data)
    finally:
        os.close(fd)


def read_matrices(path, ndim: int, count: int = 1) -> np.ndarray:
    """Inverse matrices from a file, as :func:`as_matrices` gives them: ``.npy`` holding ``(n, rows, cols)``
    or ``(rows, cols)``, or text with one matrix per batch entry, rows of whitespace-separated numbers
    (``ndim x ndim+1`` or square with the last row ``0 ... 0 1``; blank lines and ``#`` comments ignored).
    ``count`` is the most matrices that can be used (the batch): a larger file is refused unread.
    ParameterError (``matrices``) names the file and what is wrong."""
    path = Path(path)
    cols = ndim + 1
    raw = _matrix_file_bytes(path, MATRIX_FILE_BYTES_PER_MATRIX * max(1, count))
    try:
        if path.suffix.lower() == ".npy":
            values = np.load(io.BytesIO(raw), allow_pickle=False)
        else:
            values = np.loadtxt(io.StringIO(raw.decode("utf-8", "replace")), dtype=np.float64, comments="#",
                                ndmin=2)
    except (ValueError, EOFError) as exc:
        raise ParameterError(f"{path}: not a table of numbers ({str(exc).splitlines()[0]})", "matrices") from None
    values = np.asarray(values, dtype=np.float64)
    if path.suffix.lower() != ".npy":
        if values.size == 0 or values.shape[1] != cols:
            raise ParameterError(f"{path}: {ndim}-d matrices have rows of {cols} numbers; the file's rows have "
                                 f"{values.shape[1] if values.size else 0}", "matrices")
        rows = values.shape[0]
        last = np.zeros(cols)
        last[-1] = 1
        square = rows % cols == 0 and np.allclose(values[cols - 1::cols], last)
        per = cols if square else ndim
        if rows % per:
            raise ParameterError(f"{path}: {rows} rows do not make whole {ndim}x{cols} (or {cols}x{cols}) matrices",
                                 "matrices")
        values = values.reshape(rows // per, per, cols)
    try:
        return as_matrices(values, ndim)
    except ShapeError as exc:
        raise ParameterError(f"{path}: {exc}", "matrices") from None

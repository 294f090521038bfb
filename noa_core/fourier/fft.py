"""Fourier transforms of BDHW arrays over H, W (2-d: every batch and depth slice) or D, H, W (3-d).

The transforms are scipy.fft's on the CPU (its pocketfft, called as scipy.fft calls it: :func:`r2c`,
:func:`c2r`, :func:`c2c`; ``workers=`` the numba thread count, so a service worker keeps to its share of
the cores) and cuFFT's through CuPy on CUDA (``pip install
'.[cupy]'`` in noa's checkout); noa writes no FFT of its own. The non-redundant dimension of a real transform is
the **width**: a ``(B, 1, H, W)`` real array gives ``(B, 1, H, W // 2 + 1)`` complex values.
``norm`` is NumPy's ("backward", "ortho", "forward"). Inputs may be C or F ordered or strided
views; outputs are new C-contiguous arrays on the input's device.

Example::

    import noa_core as noa
    spectrum = noa.fft.rfft(stack)                  # (B, 1, H, W // 2 + 1), complex64
    back = noa.fft.irfft(spectrum, width=stack.shape[3])
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from noa_core import kernels, limits  # kernels a face: CUDA's (numba-cuda) load only for arrays on a GPU
from noa_core.array import Array, asarray, layout
from noa_core.errors import DeviceError, DTypeError, ParameterError, ShapeError

NORMS = ("backward", "ortho", "forward")
CUPY_HINT = ("install CuPy for cuFFT (in noa's checkout: pip install -e '.[cupy]', or pip install '.[cupy]'; "
             "or the cupy-cudaXXx wheel of your CUDA version)")


__all__ = ["rfft", "irfft", "fft", "ifft", "r2c", "c2r", "c2c", "pocketfft", "transform_axes", "workers", "NORMS"]


def workers() -> int:
    """Threads scipy.fft may use: numba's count for this thread (a service worker's share) where numba is
    loaded; else what numba would start with (NUMBA_NUM_THREADS, or the cores), without loading it (a
    small file on the NumPy path, :mod:`noa_core.compute.compute_path`). Results do not depend on it."""
    if "numba" in sys.modules:
        return max(1, int(sys.modules["numba"].get_num_threads()))
    return max(1, int(os.environ.get("NUMBA_NUM_THREADS") or limits.available_cores()))


def transform_axes(shape: Sequence[int], ndim: int | None = None) -> tuple[int, ...]:
    """The BDHW axes a transform of ``ndim`` dimensions runs over: (2, 3), or (1, 2, 3) for 3-d.

    ``ndim`` None takes the array's own: 3 when the depth is above 1, else 2."""
    shape4 = layout.as_shape4(shape)
    if ndim is None:
        ndim = 3 if shape4[1] > 1 else 2
    if ndim not in (2, 3):
        raise ParameterError(f"{ndim} is not 2 or 3", "ndim")
    return (2, 3) if ndim == 2 else (1, 2, 3)


def as_array(x) -> Array:
    return x if isinstance(x, Array) else asarray(x)


def _check_norm(norm: str) -> str:
    if norm not in NORMS:
        raise ParameterError(f"{norm!r} is not one of {', '.join(NORMS)}", "norm")
    return norm


def real_dtype(dtype: np.dtype, what: str) -> np.dtype:
    if dtype.subdtype is not None:
        raise DTypeError(f"{what}: element type {dtype} is not a scalar")
    if dtype.kind == "c":
        raise DTypeError(f"{what}: the input is complex ({dtype}); a real transform needs real values (use fft)")
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def _complex_dtype(dtype: np.dtype, what: str) -> np.dtype:
    if dtype.subdtype is not None:
        raise DTypeError(f"{what}: element type {dtype} is not a scalar")
    return np.dtype(np.complex128) if dtype in (np.float64, np.complex128) else np.dtype(np.complex64)


# -- CuPy bridge (cuFFT) ------------------------------------------------------------------------


def cupy_module():
    try:
        import cupy
    except ImportError:
        raise DeviceError(f"FFTs on device 'cuda' need CuPy, which is not installed: {CUPY_HINT}") from None
    return cupy


def to_cupy(array: Array):
    cupy = cupy_module()
    view = kernels.cuda.view4d(array)
    return cupy.asarray(view)


def from_cupy(values) -> Array:
    from numba import cuda

    cupy = cupy_module()
    values = cupy.ascontiguousarray(values)
    flat = cuda.as_cuda_array(values.reshape(-1))
    return Array(flat, 0, tuple(values.shape), layout.strides_for(tuple(values.shape), "C"),
                 np.dtype(values.dtype), "cuda")


# -- transforms ---------------------------------------------------------------------------------


POCKETFFT = "scipy.fft._pocketfft.pypocketfft"  # scipy.fft's transforms: the C++ module its functions call
_NORM_CODES = {"backward": 0, "ortho": 1, "forward": 2}  # pocketfft's code of a forward transform's norm


@functools.cache  # looked for once: every transform asks, and a scipy without the file is searched in vain
def pocketfft():
    """scipy's pocketfft extension, the module scipy.fft's functions call, or None where this scipy keeps it
    elsewhere (scipy 1.18 moved it: :func:`r2c`, :func:`c2r` and :func:`c2c` then call scipy.fft's functions).
    Loaded from its file alone where scipy.fft is not imported yet: ``import scipy.fft`` costs 0.2-0.5 s (its
    array-API layer and scipy.special), most of a small file's call (issue 27); the module itself, 2 ms.
    Registered under its own name, so a later ``import scipy.fft`` uses this very module."""
    module = sys.modules.get(POCKETFFT)
    if module is not None:
        return module
    scipy_spec = importlib.util.find_spec("scipy")  # finds the package without running it
    folders = scipy_spec.submodule_search_locations if scipy_spec else None
    for suffix in importlib.machinery.EXTENSION_SUFFIXES if folders else ():
        path = Path(folders[0]) / "fft" / "_pocketfft" / f"pypocketfft{suffix}"
        if path.is_file():
            spec = importlib.util.spec_from_file_location(POCKETFFT, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules[POCKETFFT] = module
            return module
    return None


def _scipy_fft():
    """scipy.fft itself, where its pocketfft module is not found (imported here: 0.2-0.5 s, see pocketfft)."""
    import scipy.fft

    return scipy.fft


def _native(values: np.ndarray) -> np.ndarray:
    """``values`` as pocketfft takes them, as scipy.fft prepares them: native byte order, aligned."""
    dtype = values.dtype.newbyteorder("=")
    return np.array(values, dtype=dtype, copy=None if values.flags.aligned else True)


def r2c(values: np.ndarray, axes: tuple[int, ...], norm: str = "backward") -> np.ndarray:
    """``scipy.fft.rfftn(values, axes=axes, norm=norm)`` of real float32 or float64 NumPy values, bit for bit."""
    module = pocketfft()
    if module is None:
        return _scipy_fft().rfftn(values, axes=axes, norm=norm, workers=workers())
    return module.r2c(_native(values), axes, True, _NORM_CODES[norm], None, workers())


def c2r(values: np.ndarray, axes: tuple[int, ...], width: int, norm: str = "backward") -> np.ndarray:
    """``scipy.fft.irfftn(values, s=(..., width), axes=axes, norm=norm)`` of complex NumPy values whose last
    axis holds ``width // 2 + 1`` values, bit for bit."""
    module = pocketfft()
    if module is None:
        sizes = [values.shape[a] for a in axes[:-1]] + [width]
        return _scipy_fft().irfftn(values, s=sizes, axes=axes, norm=norm, workers=workers())
    return module.c2r(_native(values), axes, width, False, 2 - _NORM_CODES[norm], None, workers())


def c2c(values: np.ndarray, axes: tuple[int, ...], forward: bool, norm: str = "backward", *,
        overwrite: bool = False) -> np.ndarray:
    """``scipy.fft.fftn`` (``forward``) or ``ifftn`` of complex NumPy values, bit for bit; ``overwrite``
    computes in place where ``values`` allows it (native and aligned), as their ``overwrite_x``."""
    module = pocketfft()
    if module is None:
        scipy_fft = _scipy_fft()
        transform = scipy_fft.fftn if forward else scipy_fft.ifftn
        return transform(values, axes=axes, norm=norm, overwrite_x=overwrite, workers=workers())
    prepared = _native(values)
    code = _NORM_CODES[norm] if forward else 2 - _NORM_CODES[norm]
    out = prepared if (overwrite or prepared is not values) and prepared.dtype.kind == "c" else None
    return module.c2c(prepared, axes, forward, code, out, workers())


def _run(name: str, x: Array, axes: tuple[int, ...], norm: str, dtype: np.dtype, width: int | None = None) -> Array:
    if x.device == "cuda":
        cupy = cupy_module()
        values = to_cupy(x).astype(dtype, copy=False)
        transform = getattr(cupy.fft, name + "n")
        shape = None if width is None else [x.shape[a] for a in axes[:-1]] + [width]
        return from_cupy(transform(values, s=shape, axes=axes, norm=norm))
    values = x.numpy()
    if values.dtype != dtype:
        values = values.astype(dtype)
    if x.size == 0:  # pocketfft refuses empty axes: the result is empty too
        out_shape = list(x.shape)
        if name == "rfft":
            out_shape[3] = x.shape[3] // 2 + 1
        elif name == "irfft":
            out_shape[3] = width
        kind = np.float64 if dtype in (np.float64, np.complex128) else np.float32
        out_dtype = kind if name == "irfft" else (np.complex128 if kind == np.float64 else np.complex64)
        return asarray(np.zeros(out_shape, out_dtype))
    if name == "rfft":
        return asarray(r2c(values, axes, norm))
    if name == "irfft":
        assert width is not None  # irfft gives one
        return asarray(c2r(values, axes, width, norm))
    return asarray(c2c(values, axes, name == "fft", norm))


def rfft(array, *, ndim: int | None = None, norm: str = "backward") -> Array:
    """Real-to-complex transform over H, W (``ndim=2``) or D, H, W (``ndim=3``; default: 3 for a
    volume, else 2). The width becomes ``W // 2 + 1``. Integer and float16 inputs are computed as
    float32, float64 as float64 (complex64 / complex128 out)."""
    x = as_array(array)
    axes = transform_axes(x.shape, ndim)
    return _run("rfft", x, axes, _check_norm(norm), real_dtype(x.dtype, "rfft"))


def irfft(array, width: int | None = None, *, ndim: int | None = None, norm: str = "backward") -> Array:
    """Complex-to-real inverse of :func:`rfft`: ``width`` is the real array's width (default
    ``2 * (W - 1)``, even; give it for odd widths)."""
    x = as_array(array)
    axes = transform_axes(x.shape, ndim)
    if width is None:
        width = 2 * (x.shape[3] - 1)
    if width < 1 or width // 2 + 1 != x.shape[3]:
        raise ShapeError(f"irfft: a width of {width} needs {width // 2 + 1} complex values per row; "
                         f"the array of shape {x.shape} has {x.shape[3]}")
    return _run("irfft", x, axes, _check_norm(norm), _complex_dtype(x.dtype, "irfft"), width)


def fft(array, *, ndim: int | None = None, norm: str = "backward") -> Array:
    """Complex-to-complex forward transform over H, W or D, H, W (real inputs are made complex)."""
    x = as_array(array)
    axes = transform_axes(x.shape, ndim)
    return _run("fft", x, axes, _check_norm(norm), _complex_dtype(x.dtype, "fft"))


def ifft(array, *, ndim: int | None = None, norm: str = "backward") -> Array:
    """Complex-to-complex inverse transform over H, W or D, H, W."""
    x = as_array(array)
    axes = transform_axes(x.shape, ndim)
    return _run("ifft", x, axes, _check_norm(norm), _complex_dtype(x.dtype, "ifft"))

"""Fourier filters and spectra of BDHW arrays: RELION's band-pass, B-factors, power spectra.

Frequencies are measured per axis (``k / n`` cycles per pixel for integer frequency ``k`` of an axis
of ``n`` samples), so rectangular images are handled; resolutions are in Ångström with the array's
pixel size (square pixels: one size for every axis). Filters run over H, W (2-d: every image of a
stack) or D, H, W (3-d: volumes), like :mod:`noa_core.fourier.fft`.

Example::

    import noa_core as noa
    filtered = noa.spectral.bandpass(stack, lowpass=8.0, highpass=200.0, pixel_size=1.06)
    spectrum = noa.spectral.power_spectrum(stack, log=True)           # centred, H x W
    profile = noa.spectral.power_spectrum(stack, rotational_average=True)   # (B, 1, 1, min(H, W) // 2 + 1)
    table = noa.spectral.relion_power(stack)   # (B, W // 2 + 2): relion_image_handler --power
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from noa_core.array import Array, asarray
from noa_core.errors import ParameterError
from noa_core.fourier import fft as noa_fft
from noa_core.fourier import resampling

DEFAULT_EDGE_WIDTH = 2  # RELION's --filter_edge_width: Fourier shells of the raised cosine (an integer)
MAX_BFACTOR_GAIN = 60.0  # the most a B-factor may amplify Nyquist: e**60 (~1e26), well inside float32
__all__ = ["bandpass", "bandpass_weights", "bfactor_weights", "check_bandpass", "multiply_spectrum",
           "power_spectrum", "relion_power", "shell_resolutions", "frequencies", "weights_module", "DEFAULT_EDGE_WIDTH",
           "RELION_NO_RESOLUTION"]


def frequencies(sizes: Sequence[int], half: bool = True, xp: Any = np) -> np.ndarray:
    """|f| in cycles per pixel at every Fourier sample of a transform of ``sizes`` (the last axis
    non-redundant when ``half``): ``sqrt(sum((k_a / n_a) ** 2))`` (float64), in ``xp``'s arrays (NumPy, or CuPy
    for weights computed on the GPU)."""
    squared: float | np.ndarray = 0.0
    for i, n in enumerate(sizes):
        k = xp.fft.rfftfreq(n) if (half and i == len(sizes) - 1) else xp.fft.fftfreq(n)
        shape = [1] * len(sizes)
        shape[i] = k.size
        squared = squared + (k ** 2).reshape(shape)
    return xp.sqrt(squared)


def check_bandpass(lowpass: float | None, highpass: float | None, pixel_size: float | None,
                   edge_width: int = DEFAULT_EDGE_WIDTH, bfactor: float = 0.0) -> float:
    """The pixel size to filter with, after checking the request; ParameterError names the bad value."""
    if lowpass is None and highpass is None and not bfactor:
        raise ParameterError("give a lowpass, a highpass or a bfactor", "lowpass")
    if pixel_size is None or not pixel_size > 0 or not math.isfinite(pixel_size):
        raise ParameterError(f"the pixel size is unknown ({pixel_size}); resolutions in Å need it: give it",
                             "pixel_size")
    if lowpass is not None:
        if not lowpass > 0:
            raise ParameterError(f"{lowpass:g} Å must be above 0", "lowpass")
        if lowpass < 2 * pixel_size:
            raise ParameterError(f"{lowpass:g} Å is finer than Nyquist, 2 x the pixel size = {2 * pixel_size:g} Å",
                                 "lowpass")
    if highpass is not None:
        if not highpass > 0:
            raise ParameterError(f"{highpass:g} Å must be above 0", "highpass")
        if lowpass is not None and highpass <= lowpass:
            raise ParameterError(f"{highpass:g} Å must be coarser (larger) than the lowpass, {lowpass:g} Å", "highpass")
    if not edge_width >= 0 or edge_width != int(edge_width):
        raise ParameterError(f"{edge_width:g} shells: a whole number, 0 or more (as RELION counts its edge width)",
                             "edge_width")
    gain = -bfactor / (16.0 * pixel_size ** 2)  # the exponent at Nyquist, 1 / (2 x pixel size) Å⁻¹
    if gain > MAX_BFACTOR_GAIN:
        raise ParameterError(f"{bfactor:g} Å² at {pixel_size:g} Å/pixel multiplies Nyquist by e^{gain:.4g}, beyond "
                             f"what float32 holds; the strongest sharpening at this pixel size is "
                             f"{-MAX_BFACTOR_GAIN * 16.0 * pixel_size ** 2:.6g}", "bfactor")
    return float(pixel_size)


def bandpass_weights(sizes: Sequence[int], pixel_size: float, lowpass: float | None = None,
                     highpass: float | None = None, edge_width: int = DEFAULT_EDGE_WIDTH,
                     bfactor: float = 0.0, xp: Any = np) -> np.ndarray:
    """The real weights of :func:`bandpass` over a half (rfft) transform of ``sizes`` (float64), in ``xp``'s
    arrays: NumPy, or CuPy where the map is on the GPU (computed there: sent over, a volume's weights cost more
    than its filtering).

    RELION's relion_image_handler rules, with its ``ori_size`` the width ``n = sizes[-1]``: a
    resolution ``R`` is the shell ``floor(n * pixel_size / R + 0.5)`` (RELION's ROUND: halves up); the
    raised cosine spans ``2 * (edge_width // 2)`` shells centred on it (RELION halves its integer
    --filter_edge_width in integers: 3 gives 2): below ``(shell - edge_width // 2) / n`` cycles per pixel a
    low-pass keeps everything, above ``(shell + edge_width // 2) / n`` nothing, between ``0.5 + 0.5 cos(pi (f - low) /
    width)``; a high-pass is the complement. ``bfactor`` multiplies by ``exp(-bfactor / 4 * (f /
    pixel_size) ** 2)`` (negative sharpens) up to Nyquist, and zeroes every frequency beyond it (the
    corners of the box), as RELION does whenever it applies a B-factor (:func:`bfactor_weights`)."""
    f = frequencies(sizes, xp=xp)
    n = sizes[-1]
    weights = xp.ones_like(f)
    half_edge = int(edge_width) // 2

    def edges(resolution: float) -> tuple[float, float]:
        shell = math.floor(n * pixel_size / resolution + 0.5)
        return max(0.0, (shell - half_edge) / n), (shell + half_edge) / n

    def raised_cosine(low: float, high: float, sign: float) -> np.ndarray:
        """``below`` under ``low``, ``1 - below`` over ``high``, ``0.5 + sign * 0.5 cos(...)`` between: the cosine
        evaluated in the edge's shells alone (a thin band of a volume's transform; all of it took 0.5 s at 256³)."""
        below = 1.0 if sign > 0 else 0.0
        factor = xp.where(f < low, below, 1.0 - below)
        if high > low:
            band = (f >= low) & (f <= high)
            factor[band] = 0.5 + sign * 0.5 * xp.cos(np.pi * (f[band] - low) / (high - low))
        else:  # no edge: the shell itself is kept (f == low)
            factor[f == low] = 1.0
        return factor

    if lowpass is not None:
        weights *= raised_cosine(*edges(lowpass), 1.0)
    if highpass is not None:
        weights *= raised_cosine(*edges(highpass), -1.0)
    if bfactor:
        weights *= bfactor_weights(sizes, pixel_size, bfactor, xp)
    return weights


def bfactor_weights(sizes: Sequence[int], pixel_size: float, bfactor: float, xp: Any = np) -> np.ndarray:
    """RELION's applyBFactorToMap (src/fftw.cpp) over a half transform of ``sizes``, evaluated as it does, in
    double: ``res = sqrt(r2) / (n * pixel_size)`` with ``r2`` the squared radius in Fourier pixels of the width
    ``n``; ``exp(-(bfactor / 4) * res * res)`` where ``res <= 1 / (pixel_size * 2)``, 0 beyond. Samples exactly
    at Nyquist (``r2 = (n / 2) ** 2``) fall on either side as that rounding falls: at 1.3 Å/pixel and an even
    width of 20, 40 or 160 they are zeroed, at 2 Å kept. Other axes are counted in true frequencies (``k * n /
    n_axis`` Fourier pixels of the width): integers, RELION's own, for square images and cubic volumes."""
    n = sizes[-1]
    r2: float | np.ndarray = 0.0
    for i, size in enumerate(sizes):
        index = xp.arange(size // 2 + 1 if i == len(sizes) - 1 else size)
        k = xp.where(index <= size // 2, index, index - size) * n / size  # the integer k where size == n
        shape = [1] * len(sizes)
        shape[i] = k.size
        r2 = r2 + (k ** 2).reshape(shape)
    res = xp.sqrt(r2) / (n * pixel_size)
    # the corners' exponent is at most 3 x Nyquist's (MAX_BFACTOR_GAIN): finite in float64 before it is dropped
    return xp.where(res <= 1.0 / (pixel_size * 2.0), xp.exp(-(bfactor / 4.0) * res * res), 0.0)


def multiply_spectrum(x: Array, axes: tuple[int, ...], weights: np.ndarray) -> Array:
    """irfft(rfft(x) * weights) over ``axes``, on x's device, in x's real precision (``weights``: NumPy, or on a
    GPU map's device already, :func:`weights_module`)."""
    spectrum = noa_fft.rfft(x, ndim=len(axes))
    shape = (1,) * (4 - len(axes)) + weights.shape
    if spectrum.device == "cuda":
        cupy = noa_fft.cupy_module()
        values = noa_fft.to_cupy(spectrum) * cupy.asarray(weights).reshape(shape).astype(np.float32)
        filtered = noa_fft.from_cupy(values.astype(spectrum.dtype))
    else:
        values = spectrum.numpy()
        values *= weights.reshape(shape).astype(values.real.dtype)
        filtered = spectrum
    return noa_fft.irfft(filtered, width=x.shape[3], ndim=len(axes))


def bandpass(array, lowpass: float | None = None, highpass: float | None = None, *,
             pixel_size: float | None = None, edge_width: int = DEFAULT_EDGE_WIDTH, bfactor: float = 0.0,
             ndim: int | None = None) -> Array:
    """``array`` low-passed to ``lowpass`` Å and/or high-passed to ``highpass`` Å, with a raised-cosine
    edge ``edge_width`` Fourier shells wide, and a ``bfactor`` (Å², negative sharpens), as
    ``relion_image_handler --lowpass --highpass --filter_edge_width --bfactor`` (see
    :func:`bandpass_weights`). ``pixel_size`` in Å/pixel. A lowpass finer than Nyquist (below 2 x the
    pixel size) is refused. 2-d per image, or 3-d for volumes (``ndim``)."""
    x = array if isinstance(array, Array) else asarray(array)
    pixel = check_bandpass(lowpass, highpass, pixel_size, edge_width, bfactor)
    axes = noa_fft.transform_axes(x.shape, ndim)
    sizes = tuple(x.shape[a] for a in axes)
    if x.size == 0:
        return resampling.fourier_resize(x, sizes, ndim=len(axes))
    weights = bandpass_weights(sizes, pixel, lowpass, highpass, edge_width, bfactor, weights_module(x))
    return multiply_spectrum(x, axes, weights)


def weights_module(x: Array) -> Any:
    """Where the weights for ``x`` are computed: CuPy for a map on the GPU, else NumPy."""
    return noa_fft.cupy_module() if x.device == "cuda" else np


def _shells(sizes: Sequence[int]) -> tuple[np.ndarray, int]:
    """Shell index of every sample of a centred full transform of ``sizes``, and the shell count:
    ``round(|f| * min(sizes))``, shells ``0 .. min(sizes) // 2`` (corners beyond are left out)."""
    f = np.fft.fftshift(frequencies(sizes, half=False))
    smallest = min(sizes)
    return np.rint(f * smallest).astype(np.int64), smallest // 2 + 1


def power_spectrum(array, rotational_average: bool = False, log: bool = False, *, ndim: int | None = None) -> Array:
    """The power spectrum ``|F|**2 / N`` (N samples per transform, so its mean is the mean of
    ``x**2``), centred (zero frequency at ``n // 2`` of each axis, as ``numpy.fft.fftshift`` puts it):
    the full H x W (or D x H x W) of each image, float32 (float64 for float64 inputs).

    ``rotational_average``: the mean over each shell instead (shell ``round(|f| * min(n))`` with
    ``|f|`` in cycles per pixel per axis), ``min(n) // 2 + 1`` values in the width: ``(B, D, 1, S)``
    for 2-d, ``(B, 1, 1, S)`` for 3-d. ``log``: the natural logarithm of the result (of the average);
    a power of 0 gives the log of the smallest normal float32."""
    x = array if isinstance(array, Array) else asarray(array)
    axes = noa_fft.transform_axes(x.shape, ndim)
    sizes = tuple(x.shape[a] for a in axes)
    real = np.dtype(np.float64) if x.dtype == np.float64 else np.dtype(np.float32)
    if x.device == "cuda":
        x = x.to("cpu")  # the spectrum and shells are computed on the host (one image's worth per call)
    if x.size == 0:
        shape = list(x.shape)
        if rotational_average:
            shape[axes[0]:] = [1] * (len(axes) - 1) + [min(sizes) // 2 + 1 if min(sizes) else 0]
        return asarray(np.zeros(shape, real))
    spectrum = noa_fft.fft(x, ndim=len(axes)).numpy()
    power = (spectrum.real ** 2 + spectrum.imag ** 2) / math.prod(sizes)
    power = np.fft.fftshift(power, axes=axes)
    if rotational_average:
        shells, count = _shells(sizes)
        inside = (shells < count).reshape(-1)
        index = shells.reshape(-1)[inside]
        samples = np.bincount(index, minlength=count).astype(np.float64)
        outer = x.shape[:axes[0]]
        flat = power.reshape(math.prod(outer), -1)[:, inside]
        sums = np.stack([np.bincount(index, weights=row, minlength=count) for row in flat])
        power = (sums / samples).reshape(*outer, *([1] * (len(axes) - 1)), count)
    if log:
        power = np.log(np.maximum(power, np.finfo(np.float32).tiny))
    return asarray(np.ascontiguousarray(power, dtype=real))


RELION_NO_RESOLUTION = 999.0  # what RELION writes as the resolution (Å) of shell 0, which has none


def relion_power(array, *, ndim: int | None = None) -> np.ndarray:
    """The rotationally averaged power as ``relion_image_handler --power`` tabulates it (its ``getSpectrum``
    with ``POWER_SPECTRUM``): float64 of shape (images, S), one row per image (per volume in 3-d).

    RELION's conventions, not :func:`power_spectrum`'s: the transform is divided by N (the samples of an
    image), so each sample's power is ``|F / N|**2 = (|F|**2 / N) / N``; a shell is the mean over the
    half (rfft) transform of the samples with ``floor(|f| * W + 0.5)`` = shell, ``|f|`` in cycles per
    pixel per axis and ``W`` the width (for square images and cubic volumes this is RELION's rounded
    ``|k|`` in Fourier pixels; RELION counts every axis of a rectangular image in Fourier pixels, which
    is no frequency). Rows are shells ``0 .. W // 2 + 1`` (at most W) as RELION writes them: the last
    lies beyond Nyquist and averages the corners; a shell with no sample is 0."""
    x = array if isinstance(array, Array) else asarray(array)
    axes = noa_fft.transform_axes(x.shape, ndim)
    sizes = tuple(x.shape[a] for a in axes)
    rows = min(sizes[-1] // 2 + 2, sizes[-1])
    images = math.prod(x.shape[:axes[0]])
    if x.size == 0:
        return np.zeros((images, rows))
    if x.device == "cuda":
        x = x.to("cpu")  # a table's worth of values: computed on the host
    values = x.numpy().astype(np.float64, copy=False)
    spectrum = np.fft.rfftn(values, axes=axes)
    count = math.prod(sizes)
    power = (spectrum.real ** 2 + spectrum.imag ** 2).reshape(images, -1) / float(count) ** 2
    shells = np.floor(frequencies(sizes) * sizes[-1] + 0.5).astype(np.int64).reshape(-1)
    inside = shells < rows
    index = shells[inside]
    samples = np.bincount(index, minlength=rows).astype(np.float64)
    sums = np.stack([np.bincount(index, weights=row[inside], minlength=rows) for row in power])
    return np.divide(sums, samples, out=np.zeros_like(sums), where=samples > 0)


def shell_resolutions(width: int, pixel_size: float, shells: int) -> tuple[np.ndarray, np.ndarray]:
    """``(1/Å, Å)`` of shells ``0 .. shells - 1`` of an image ``width`` pixels wide: shell ``i`` is
    ``width * pixel_size / i`` Å, as RELION tabulates it; shell 0 (no resolution) gets RELION's
    :data:`RELION_NO_RESOLUTION` (999 Å, 1/999 per Å)."""
    index = np.arange(shells, dtype=np.float64)
    angstrom = np.full(shells, RELION_NO_RESOLUTION)
    np.divide(width * pixel_size, index, out=angstrom, where=index > 0)
    return 1.0 / angstrom, angstrom

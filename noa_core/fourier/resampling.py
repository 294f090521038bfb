"""Resampling by Fourier cropping and padding: :func:`fourier_resize` to a new box, :func:`rescale` by a
factor or to a new pixel size, with noa's or RELION's conventions (``like``).

Example::

    import noa_core as noa
    half = noa.fourier_resize(stack, (stack.shape[2] // 2, stack.shape[3] // 2))   # Fourier crop
    binned = noa.rescale(stack, 0.5)                                                # the same, by a factor
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from noa_core import images  # a face: RELION's rescale alone crops and pads (noa resize, its window about N//2)
from noa_core.array import Array, asarray
from noa_core.errors import ParameterError, ShapeError
from noa_core.fourier import fft

LIKE = ("noa", "relion")  # the conventions of fourier_resize and rescale (see fourier_resize)



def _window_full(values, axis: int, old: int, new: int, xp=np):
    """Frequencies of a full (two-sided) axis windowed from ``old`` to ``new`` samples.

    Integer frequencies present in both sizes are kept; the rest are dropped (crop) or zero (pad).
    An even size's Nyquist bin stands for both +n/2 and -n/2: cropping to an even size folds the
    two bins into it, padding from an even size splits it in halves, as scipy.signal.resample does,
    so the result is the band-limited interpolation of the input and stays real."""
    if new == old:
        return values
    shape = list(values.shape)
    shape[axis] = new
    out = xp.zeros(shape, values.dtype)
    n = min(old, new)
    positive = n // 2 + 1 if n % 2 else n // 2  # 0 .. ceil(n/2)-1 (the Nyquist bin of an even n separately)
    negative = (n - 1) // 2  # -1 .. -(n-1)//2

    def at(index) -> tuple:
        return (slice(None),) * axis + (index,)

    out[at(slice(0, positive))] = values[at(slice(0, positive))]
    if negative:
        out[at(slice(new - negative, new))] = values[at(slice(old - negative, old))]
    if n % 2 == 0:  # the Nyquist bin of the smaller even size
        nyquist = n // 2
        if new < old:  # fold +n/2 and -n/2 of the input into the output's single bin
            out[at(nyquist)] = values[at(nyquist)] + values[at(old - nyquist)]
        else:  # split the input's bin over +n/2 and -n/2 of the output
            out[at(nyquist)] = values[at(nyquist)] * 0.5
            out[at(new - nyquist)] = values[at(nyquist)] * 0.5
    return out


def _window_half(values, axis: int, old: int, new: int, xp=np):
    """The non-redundant (width) axis of a real transform windowed from ``old`` to ``new`` real samples
    (``old // 2 + 1`` to ``new // 2 + 1`` values), Nyquist bins as :func:`_window_full` treats them."""
    if new == old:
        return values
    shape = list(values.shape)
    shape[axis] = new // 2 + 1
    out = xp.zeros(shape, values.dtype)
    n = min(old, new)
    keep = n // 2 + 1

    def at(index) -> tuple:
        return (slice(None),) * axis + (index,)

    out[at(slice(0, keep))] = values[at(slice(0, keep))]
    if n % 2 == 0:
        # The bin at n/2 holds +n/2; its mirror -n/2 is implied by symmetry. Cropping folds both into
        # the output's Nyquist bin (2x: the inverse takes it once); padding halves it (its mirror is explicit).
        out[at(n // 2)] *= 2.0 if new < old else 0.5
    return out


def _logical(n: int) -> np.ndarray:
    """The frequency each index of a full axis of ``n`` samples stands for, as RELION's
    FOR_ALL_ELEMENTS_IN_FFTW_TRANSFORM counts them: ``k`` up to ``n // 2`` (an even size's Nyquist
    bin is +n/2), ``k - n`` above."""
    k = np.arange(n)
    return np.where(k <= n // 2, k, k - n)


def _window_sphere(values, axes: tuple[int, ...], old: int, new: int, xp=np):
    """RELION 3.1.3's ``windowFourierTransform`` (src/fftw.h) on the half transform of a square or cubic
    box (the width, ``axes[-1]``, last), ``old`` to ``new`` samples a side.

    Shrinking, every output frequency is read where the input has it: an even new size's single
    Nyquist bin takes +new/2 alone (-new/2 is dropped, not folded in). Enlarging, only the input's
    frequencies within the sphere of radius ``old // 2`` are kept (RELION: "nothing in the corners"),
    the rest of the new box is zero; an even old size's Nyquist bin lands on +old/2 only. The same size
    is returned as it is (RELION: "If same size, just return input")."""
    full = axes[:-1]
    if new == old:
        return values
    if new < old:
        source = xp.asarray(_logical(new) % old)
        for a in full:
            values = xp.take(values, source, axis=a)
        return values[..., :new // 2 + 1]
    frequencies = [_logical(old)] * len(full) + [np.arange(old // 2 + 1)]
    grids = np.ix_(*frequencies)
    inside = sum(f * f for f in grids) <= (old // 2) ** 2
    shape = list(values.shape)
    for a in full:
        shape[a] = new
    shape[axes[-1]] = new // 2 + 1
    out = xp.zeros(shape, values.dtype)
    places = np.ix_(*[f % new for f in frequencies[:-1]], frequencies[-1])
    out[(slice(None),) * axes[0] + tuple(xp.asarray(p) for p in places)] = values * xp.asarray(inside)
    return out


def _check_like(like: str) -> str:
    if like not in LIKE:
        raise ParameterError(f"{like!r} is not one of {', '.join(LIKE)}", "like")
    return like


def fourier_resize(array, shape: Sequence[int], *, ndim: int | None = None, like: str = "noa") -> Array:
    """A real array resampled to ``shape`` by cropping or zero-padding its Fourier transform.

    ``shape`` is the new (H, W), (D, H, W) or BDHW shape; batch (and, for 2-d, depth) stay. Values
    keep their scale (a constant image stays that constant): the result is multiplied by the new
    size over the old. Computed in float32 (float64 for float64 inputs).

    ``like="noa"``: each axis is windowed on its own, Nyquist bins of even sizes folded or split (see
    :func:`_window_full`), so the result equals ``scipy.signal.resample`` along each axis in turn.
    ``like="relion"``: RELION 3.1.3's ``resizeMap`` (see :func:`_window_sphere`); old and new boxes must
    be square (cubic in 3-d), as RELION's are."""
    x = fft.as_array(array)
    axes = fft.transform_axes(x.shape, ndim)
    _check_like(like)
    target = tuple(int(n) for n in shape)
    if len(target) == 4:
        target = tuple(target[a] for a in axes)
    if len(target) != len(axes) or any(n < 1 for n in target):
        raise ShapeError(f"resize: the new shape {tuple(shape)} must give {len(axes)} sizes of at least 1 for "
                         f"the {len(axes)}-d transform of shape {x.shape}")
    old = tuple(x.shape[a] for a in axes)
    if like == "relion" and (len(set(old)) > 1 or len(set(target)) > 1):
        raise ShapeError(f"resize like RELION: boxes must be square (cubic in 3-d); {old} to {target} are not")
    out_shape = list(x.shape)
    for a, n in zip(axes, target):
        out_shape[a] = n
    real = fft.real_dtype(x.dtype, "resize")
    if x.size == 0 or target == old:
        return asarray(np.zeros(out_shape, real)) if x.size == 0 else x.astype(real)
    spectrum = fft.rfft(x, ndim=len(axes))
    on_cuda = spectrum.device == "cuda"
    # the windowing is plain array slicing: CuPy arrays take the same code on the device
    xp = fft.cupy_module() if on_cuda else np
    values = fft.to_cupy(spectrum) if on_cuda else spectrum.numpy()
    if like == "relion":
        values = _window_sphere(values, axes, old[0], target[0], xp)
    else:
        for a, o, n in zip(axes[:-1], old[:-1], target[:-1]):
            values = _window_full(values, a, o, n, xp)
        values = _window_half(values, 3, old[-1], target[-1], xp)
    # RELION's forward transform divides by the old size, its inverse does not: the same new / old. In place:
    # ``values`` is this function's own (a new window, or the transform itself), never the caller's array.
    values *= math.prod(target) / math.prod(old)
    values = xp.ascontiguousarray(values)
    if on_cuda:
        result = fft.irfft(fft.from_cupy(values), width=target[-1], ndim=len(axes))
    else:
        result = _irfft_consuming(values, axes, target[-1])
    return result if result.dtype == real else result.astype(real)


ROW_BYTES = 4 << 20  # the real rows of an inverse transform computed at a time by _irfft_consuming


def _irfft_consuming(values: np.ndarray, axes: tuple[int, ...], width: int) -> Array:
    """:func:`irfft` of the C-contiguous half spectrum ``values``, which it overwrites: the full axes are
    transformed in place, then the width :data:`ROW_BYTES` of rows at a time. scipy's multi-axis inverse
    would hold a second spectrum-sized buffer (pocketfft's own, outside NumPy) besides its result: here
    memory is the spectrum and the result."""
    if values.size == 0:
        return fft.irfft(asarray(values), width=width, ndim=len(axes))
    if len(axes) > 1:
        values = fft.c2c(values, axes[:-1], False, overwrite=True)
    real = np.float64 if values.dtype == np.complex128 else np.float32
    out = np.empty(values.shape[:-1] + (width,), real)
    rows, out_rows = values.reshape(-1, values.shape[-1]), out.reshape(-1, width)
    step = max(1, ROW_BYTES // (width * out.itemsize))
    for first in range(0, len(rows), step):
        out_rows[first:first + step] = fft.c2r(rows[first:first + step], (1,), width)
    return asarray(out)


def rescaled_sizes(sizes: Sequence[int], factor: float) -> tuple[int, ...]:
    """Sizes scaled by ``factor`` as RELION's ``--rescale_angpix`` scales a box: ``round(n * factor)``,
    made even (one less when odd); axes of size 1 stay 1. ShapeError when a size would fall below 2."""
    if not factor > 0 or not math.isfinite(factor):
        raise ParameterError(f"{factor!r} must be a finite number above 0", "factor")
    out = []
    for n in sizes:
        if n == 1:
            out.append(1)
            continue
        new = math.floor(n * factor + 0.5)
        new -= new % 2
        if new < 2:
            raise ShapeError(f"rescale: a size of {n} scaled by {factor:g} leaves fewer than 2 pixels")
        out.append(new)
    return tuple(out)


def pixel_factor(from_pixel_size: float, pixel_size: float, like: str = "noa") -> float:
    """The size factor that takes pixels of ``from_pixel_size`` to ``pixel_size`` (Å): their ratio.
    ``like="relion"`` takes both as float32 first, as RELION reads ``--angpix`` and ``--rescale_angpix``
    (textToFloat, sscanf "%f"): that decides ties such as 15 x 1.5 / 0.6 = 37.5 (RELION: 37, made 36)."""
    if not pixel_size > 0 or not math.isfinite(pixel_size):
        raise ParameterError(f"{pixel_size:g} Å must be a finite number above 0", "pixel_size")
    if _check_like(like) == "relion":
        return float(np.float32(from_pixel_size)) / float(np.float32(pixel_size))
    return from_pixel_size / pixel_size


@dataclass(frozen=True)
class Rescaling:
    """Where a rescale puts its samples, per transform axis ((H, W) or (D, H, W)): the new ``sizes``, the
    ``spacing`` (new pixel size over the old) and the ``start`` (where output sample 0 lies, in input
    pixels: the origin moves by ``start`` x the old pixel size so that the content stays in place)."""

    sizes: tuple[int, ...]
    spacing: tuple[float, ...]
    start: tuple[float, ...]


def rescaling(sizes: Sequence[int], factor: float, like: str = "noa") -> Rescaling:
    """The box that :func:`rescale` makes of ``sizes`` scaled by ``factor``.

    ``like="noa"``: every axis alone (:func:`rescaled_sizes`), sample 0 stays at 0. ``like="relion"``,
    as relion_image_handler --rescale_angpix: the box is scaled as one square (cube) of side N, the
    largest size, to N' = round(N x factor) made even; a non-square image is padded to that square
    about its centre N//2, and the N' square cropped back about N'//2 to ``round(size x N' / N)``
    made even per axis. The spacing is N / N' on every axis. Volumes must be cubic (RELION makes a
    cube of any volume) and every side at least 2 pixels (ParameterError ``like``)."""
    old = tuple(int(n) for n in sizes)
    if _check_like(like) == "noa":
        new = rescaled_sizes(old, factor)
        return Rescaling(new, tuple(o / n for o, n in zip(old, new)), (0.0,) * len(old))
    if min(old) < 2:
        raise ParameterError(f"like RELION, images must be at least 2 pixels a side; {old} is not", "like")
    if len(old) == 3 and len(set(old)) > 1:
        raise ParameterError(f"like RELION, volumes must be cubic; {' x '.join(map(str, old))} is not "
                             "(RELION would make a cube of it)", "like")
    side = max(old)
    square = rescaled_sizes([side], factor)[0]
    sides: list[int] = []
    for n in old:
        # image_handler.cpp: ROUND(oldxsize * (angpix / real_angpix)), real_angpix = oldsize * angpix / newsize
        m = math.floor(n * (1.0 / (side / square)) + 0.5)
        m -= m % 2
        if m < 2:
            raise ShapeError(f"rescale: a size of {n} scaled by {factor:g} leaves fewer than 2 pixels")
        sides.append(m)
    spacing = side / square
    # input sample 0 is sample (side//2 - n//2) of the square, output sample 0 sample (square//2 - m//2) of its rescale
    start = tuple((square // 2 - m // 2) * spacing - (side // 2 - n // 2) for n, m in zip(old, sides))
    return Rescaling(tuple(sides), (spacing,) * len(old), start)


def rescale(array, factor: float | None = None, *, pixel_size: float | None = None,
            from_pixel_size: float | None = None, ndim: int | None = None, like: str = "noa") -> Array:
    """``array`` Fourier-rescaled (:func:`resize`) by ``factor`` (new size / old size), or from the
    pixel size ``from_pixel_size`` to ``pixel_size`` (Å; ``factor = from_pixel_size / pixel_size``),
    to an even box as RELION's ``relion_image_handler --rescale_angpix`` makes it (see
    :func:`rescaling`). The pixel size that results is ``from_pixel_size * old / new`` per axis
    (RELION writes that exact value, not the one asked for).

    ``like="noa"`` equals ``scipy.signal.resample`` along each axis; ``like="relion"`` gives RELION
    3.1.3's output: a non-square image padded with zeros to a square about its centre, resized as
    :func:`resize` ``like="relion"`` does, and cropped about the centre to the sizes of :func:`rescaling`."""
    if (factor is None) == (pixel_size is None):
        raise ParameterError("give either a factor or a pixel size", "factor")
    if factor is None:
        if from_pixel_size is None or not from_pixel_size > 0:
            raise ParameterError(f"the input's pixel size is unknown ({from_pixel_size}); give it, or a factor",
                                 "pixel_size")
        assert pixel_size is not None  # exactly one of factor and pixel_size (checked above)
        factor = pixel_factor(from_pixel_size, pixel_size, like)
    x = fft.as_array(array)
    axes = fft.transform_axes(x.shape, ndim)
    old = [x.shape[a] for a in axes]
    box = rescaling(old, factor, like)
    if like == "noa":
        return fourier_resize(x, box.sizes, ndim=len(axes))
    side = max(old)
    square = rescaled_sizes([side], factor)[0]
    if len(set(old)) > 1:
        x = images.boxes.resize(x, (side,) * len(axes), fill="zero")
    result = fourier_resize(x, (square,) * len(axes), ndim=len(axes), like="relion")
    return result if box.sizes == (square,) * len(axes) else images.boxes.resize(result, box.sizes, fill="zero")

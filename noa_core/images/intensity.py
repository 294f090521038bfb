"""Intensities of stacks: rescale them linearly (``noa scale``) and normalise them (``noa normalize``,
RELION's particle normalisation with a background disc, ramp and dust removal).

The same value transforms serve the in-memory functions here and the tiles of the file operations, so
both give the same values.

Example::

    import noa_core as noa

    bytes8 = noa.scale(stack, (0, 255), percentiles=(0.1, 99.9), dtype="uint8")
    z = noa.normalize(stack, per_section=True)     # mean 0, standard deviation 1 per image
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from noa_core.array import Array, asarray, dtypes
from noa_core.errors import DTypeError, ParameterError, ShapeError, ValueRangeError, param

if TYPE_CHECKING:
    from noa_core.images.image import Values


def real_output_dtype(source: np.dtype, wanted: str | None = None) -> np.dtype:
    """The element type of a rescaled output: ``wanted``, else float64 for float64 data, else float32."""
    if wanted is not None:
        return dtypes.scalar_dtype(wanted)
    return np.dtype(np.float64) if np.dtype(source) == np.float64 else np.dtype(np.float32)


def check_real_input(dtype: np.dtype, what: str) -> None:
    if np.dtype(dtype).kind == "c":
        raise DTypeError(f"{what}: complex data ({np.dtype(dtype).name}) cannot be rescaled; convert to a real "
                         f"type first (copy, {param('dtype', 'float32')}, keeps the real part)")


def check_to_range(to_range: Sequence[float], out_dtype: np.dtype) -> tuple[float, float]:
    """The target range, checked: two numbers, low below high, both within the output type's range."""
    if len(to_range) != 2:
        raise ParameterError(f"{len(to_range)} values given, 2 expected (LOW,HIGH)", "to_range")
    low, high = (float(v) for v in to_range)
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ParameterError(f"{low:g},{high:g} is not a pair of finite numbers", "to_range")
    if not low < high:
        raise ParameterError(f"{low:g},{high:g}: the low end must be below the high end", "to_range")
    out_dtype = np.dtype(out_dtype)
    if out_dtype.kind in "iu":
        info = np.iinfo(out_dtype)
        if low < info.min or high > info.max:
            raise ParameterError(f"{low:g},{high:g} does not fit {out_dtype.name} ({info.min}..{info.max})",
                                 "to_range")
    elif out_dtype.kind == "b":
        raise ParameterError("a rescaled output cannot be boolean", "dtype")
    elif out_dtype.kind == "c":
        raise ParameterError("a rescaled output cannot be complex", "dtype")
    return low, high


def check_percentiles(percentiles: Sequence[float] | None) -> tuple[float, float] | None:
    if percentiles is None:
        return None
    if len(percentiles) != 2:
        raise ParameterError(f"{len(percentiles)} values given, 2 expected (LOW,HIGH)", "percentiles")
    low, high = (float(v) for v in percentiles)
    if not 0 <= low < high <= 100:
        raise ParameterError(f"{low:g},{high:g}: need 0 <= low < high <= 100", "percentiles")
    return low, high


def scaled(values: np.ndarray, source: tuple[float, float], target: tuple[float, float],
           integral: bool) -> np.ndarray:
    """``values`` mapped linearly from ``source`` (low, high) onto ``target``, clamped to ``target``
    (values beyond percentiles), rounded to the nearest integer (half to even) for an integer output.
    Source ends that coincide (constant data) send values at or below them to the low end, above to the
    high end. Computed in float64."""
    a, b = source
    low, high = target
    t = np.asarray(values, dtype=np.float64).copy()
    if b > a:
        t -= a
        t *= (high - low) / (b - a)
        t += low
    else:
        t = np.where(t > a, high, low)
    np.clip(t, low, high, out=t)
    if integral:
        np.rint(t, out=t)
    return t


def normalized(values: np.ndarray, mean: float, std: float, to_mean: float, to_std: float) -> np.ndarray:
    """``(values - mean) / std * to_std + to_mean`` in float64; constant data (std 0) become ``to_mean``."""
    t = np.asarray(values, dtype=np.float64).copy()
    if std > 0:
        t -= mean
        t *= to_std / std
        t += to_mean
    else:
        t[...] = to_mean
    return t


def check_normal(mean: float, std: float) -> None:
    if not math.isfinite(mean):
        raise ParameterError(f"{mean!r} is not a finite number", "mean")
    if not (math.isfinite(std) and std > 0):
        raise ParameterError(f"{std!r}: the standard deviation must be positive", "std")


# RELION's normalise (src/image.cpp) skips an image whose background standard deviation is below this.
RELION_SD_FLOOR = 1e-10
_DUST_SEED = 25  # dust noise is drawn from default_rng((_DUST_SEED, image index)): the same input, the same output


@dataclasses.dataclass(frozen=True)
class Background:
    """RELION's background of images (or volumes) of one shape, from :func:`background`.

    ``mask`` is True on the background pixels; with a ramp, ``plane`` holds the pixel coordinates
    ``(x, y)`` (columns, rows from the centre) and ``fit`` the inverse of the 3x3 normal matrix of the
    least-squares plane ``a x + b y + c`` over the background pixels (RELION solves the same equations)."""

    mask: np.ndarray
    plane: tuple[np.ndarray, np.ndarray] | None = None
    fit: np.ndarray | None = None


def background(shape: Sequence[int], radius: float, ramp: bool = True) -> Background:
    """The background of images (2-d ``shape``) or volumes (3-d) as RELION's ``--bg_radius`` defines it: the
    pixels with x² + y² (+ z²) > radius², coordinates counted from the centre N//2 of each axis (as RELION's
    calculateBackgroundAvgStddev). RELION's rule that 2 x radius may not exceed the box applies to every
    axis. ``ramp``: also prepare the plane fit, which RELION (and noa) do on images only."""
    shape = tuple(int(n) for n in shape)
    box = "x".join(map(str, shape))
    if not (math.isfinite(radius) and radius >= 0):
        raise ParameterError(f"{radius!r}: the background radius must be a number of pixels >= 0", "bg_radius")
    if 2 * radius > min(shape):
        raise ParameterError(f"{radius:g} pixels: the background circle must fit in the {box} box "
                             f"(2 x radius <= {min(shape)}, as RELION requires)", "bg_radius")
    grid = np.ogrid[tuple(slice(-(n // 2), n - n // 2) for n in shape)]
    mask = np.asarray(sum(g.astype(np.float64) ** 2 for g in grid) > radius * radius)
    if not ramp:
        if not mask.any():
            raise ParameterError(f"{radius:g} pixels leaves no background pixel in the {box} box", "bg_radius")
        return Background(mask)
    if len(shape) != 2:
        raise ParameterError(f"the background ramp is fitted to 2-d images only (RELION's too): turn it off for "
                             f"volumes ({param('ramp', 'false')}), or give {param('per_section')} to treat each "
                             "section as an image", "ramp")
    y, x = (np.broadcast_to(g, shape).astype(np.float64) for g in grid)
    xb, yb = x[mask], y[mask]
    normal = np.array([[xb @ xb, xb @ yb, xb.sum()], [xb @ yb, yb @ yb, yb.sum()], [xb.sum(), yb.sum(), xb.size]])
    if xb.size < 3 or np.linalg.matrix_rank(normal) < 3:  # RELION divides by zero here
        raise ParameterError(f"{radius:g} pixels leaves too few background pixels in the {box} box to fit a ramp",
                             "bg_radius")
    return Background(mask, (x, y), np.linalg.inv(normal))


def _background_moments(t: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation (over N, as RELION) of each image's background: arrays of shape (n,)."""
    values = t[:, mask]
    return values.mean(axis=1), values.std(axis=1)


def background_normalized(images: np.ndarray, bg: Background, white_dust: float | None = None,
                          black_dust: float | None = None, first: int = 0, to_mean: float = 0.0,
                          to_std: float = 1.0) -> np.ndarray:
    """``images`` (n images or volumes of ``bg``'s shape) normalised one by one as RELION's normalise
    (src/image.cpp), in float64:

    1. dust: pixels more than ``white_dust`` background standard deviations above the background mean
       (then those more than ``black_dust`` below it) are replaced by normal random values with the
       background's mean and standard deviation; the noise of image ``first + i`` is drawn from its own
       seeded generator, so a file gives the same output however it is tiled;
    2. the ramp: the least-squares plane through the background pixels is subtracted (when ``bg`` has one);
    3. ``(value - mean) / sd * to_std + to_mean`` with the background's mean and standard deviation (over N),
       measured again; an image whose background sd is below 1e-10 is left as steps 1-2 made it (RELION skips
       it with a warning)."""
    t = np.array(images, dtype=np.float64)
    if white_dust is not None or black_dust is not None:
        means, sds = _background_moments(t, bg.mask)
        for i, (mean, sd) in enumerate(zip(means, sds)):
            rng = np.random.default_rng((_DUST_SEED, first + i))
            image = t[i]
            for limit, sign in ((white_dust, 1.0), (black_dust, -1.0)):
                if limit is not None:  # RELION: aux - avg > thresh * stddev (white), < -thresh * stddev (black)
                    dust = sign * (image - mean) > limit * sd
                    image[dust] = rng.normal(mean, sd, int(dust.sum()))
    if bg.fit is not None and bg.plane is not None:  # a ramp: both are set
        x, y = bg.plane
        values = t[:, bg.mask]
        sums = np.stack([values @ x[bg.mask], values @ y[bg.mask], values.sum(axis=1)])  # A^T v per image
        a, b, c = (bg.fit @ sums)[:, :, None, None]
        t -= a * x + b * y + c
    means, sds = _background_moments(t, bg.mask)
    kept = sds >= RELION_SD_FLOOR
    scale = np.where(kept, to_std / np.where(kept, sds, 1.0), 1.0)
    shift = np.where(kept, to_mean - means * scale, 0.0)
    extra = (1,) * (t.ndim - 1)
    t *= scale.reshape(-1, *extra)
    t += shift.reshape(-1, *extra)
    return t


def particle_images(shape: Sequence[int], per_section: bool) -> tuple[int, ...]:
    """How a BDHW array of ``shape`` splits into the images RELION normalises one by one: ``(n, h, w)``
    for stacks of images (or every section, with ``per_section``), ``(n, d, h, w)`` for volumes."""
    b, d, h, w = shape
    return (b * d, h, w) if d == 1 or per_section else (b, d, h, w)


def check_background_options(bg_radius: float | None, ramp: bool, white_dust: float | None,
                             black_dust: float | None) -> None:
    """Refuse dust limits that are not positive, and the options that work on the background when no
    background radius is given."""
    for named, given in ((param("ramp", "false"), not ramp), (param("white_dust"), white_dust is not None),
                         (param("black_dust"), black_dust is not None)):
        if given and bg_radius is None:
            raise ParameterError(f"{named} works on the background: give the background radius in pixels",
                                 "bg_radius")
    for name, value in (("white_dust", white_dust), ("black_dust", black_dust)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ParameterError(f"{value!r}: give a positive number of standard deviations", name)


# -- in memory ---------------------------------------------------------------------------------------


def check_finite(values: np.ndarray, what: str) -> None:
    """Refuse in-memory data holding NaN or infinite values (``what``: the file or parameter they came from)."""
    if not np.isfinite(values).all():
        raise ValueRangeError(f"{what}: the data hold NaN or infinite values; this needs finite values")


def scale(array: Values, to_range: Sequence[float], percentiles: Sequence[float] | None = None,
          dtype: str | None = None) -> Array:
    """A new array: ``array`` rescaled linearly so that its minimum and maximum (or its ``percentiles``,
    e.g. ``(0.1, 99.9)``, values beyond them clamped) land on ``to_range`` (low, high). The output is
    ``dtype``, else float32 (float64 for float64 data); integer outputs are rounded.

    Args:
        array: the values (real, finite, not empty).
        to_range: ``(low, high)``, finite, low below high, within ``dtype``'s range.
        percentiles: ``(low, high)`` percentiles (0 <= low < high <= 100) mapped onto ``to_range`` in place of the
            minimum and maximum.
        dtype: the output's scalar type, neither boolean nor complex.

    Returns:
        The rescaled array, of the shape of ``array``.

    Raises:
        DTypeError: complex data, or an unknown ``dtype``.
        ParameterError: a ``to_range`` or ``percentiles`` that is not such a pair, or a boolean or complex
            ``dtype``.
        ShapeError: an empty array.
        ValueRangeError: NaN or infinite values.
    """
    source = asarray(array)
    check_real_input(source.dtype, "scale")
    out_dtype = real_output_dtype(source.dtype, dtype)
    target = check_to_range(to_range, out_dtype)
    qs = check_percentiles(percentiles)
    values = source.numpy()
    if values.size == 0:
        raise ShapeError(f"scale: the array of shape {source.shape} is empty")
    check_finite(values, "scale")
    if qs is None:
        ends = (float(values.min()), float(values.max()))
    else:
        low, high = np.percentile(values, qs)
        ends = (float(low), float(high))
    return asarray(scaled(values, ends, target, out_dtype.kind in "iu").astype(out_dtype))


def normalize(array: Values, per_section: bool = False, mean: float = 0.0, std: float = 1.0, *,
              bg_radius: float | None = None, ramp: bool = True, white_dust: float | None = None,
              black_dust: float | None = None) -> Array:
    """A new array (float32; float64 for float64 data): ``array`` shifted and scaled to ``mean`` and
    standard deviation ``std`` (NumPy's, over N), over the whole array or each (height, width) section.

    With ``bg_radius`` (pixels), RELION's particle normalisation (``relion_preprocess --norm --bg_radius``):
    each image (each volume; each section with ``per_section``) on its own, with the mean and sd of its
    background, after removing dust and a ramp (:func:`background_normalized`).

    Args:
        array: the values (real, finite, not empty).
        per_section: normalise each (height, width) section on its own (with ``bg_radius``: treat each section
            as an image).
        mean: the output's mean, finite.
        std: the output's standard deviation, positive.
        bg_radius: RELION's background radius in pixels (the background is outside it); at most half the box.
        ramp: subtract the least-squares plane through the background of each image (2-d images only).
        white_dust: replace pixels more than this many background standard deviations above the background mean
            by noise, as RELION's white dust removal.
        black_dust: the same below the mean (RELION's black dust).

    Returns:
        The normalised array (float32; float64 for float64 data), of the shape of ``array``.

    Raises:
        DTypeError: complex data.
        ParameterError: a ``mean`` or ``std`` out of range, a background option without ``bg_radius``, a
            radius that does not fit the box or leaves too few background pixels, a ramp on volumes, or dust
            limits that are not positive.
        ShapeError: an empty array.
        ValueRangeError: NaN or infinite values.
    """
    source = asarray(array)
    check_real_input(source.dtype, "normalize")
    check_normal(mean, std)
    check_background_options(bg_radius, ramp, white_dust, black_dust)
    values = source.numpy()
    if values.size == 0:
        raise ShapeError(f"normalize: the array of shape {source.shape} is empty")
    check_finite(values, "normalize")
    out_dtype = real_output_dtype(source.dtype)
    if bg_radius is not None:
        images = particle_images(values.shape, per_section)
        bg = background(images[1:], bg_radius, ramp)
        t = background_normalized(values.reshape(images), bg, white_dust, black_dust, 0, mean, std)
        return asarray(t.reshape(values.shape).astype(out_dtype))
    if not per_section:
        t = normalized(values, float(values.mean(dtype=np.float64)), float(values.std(dtype=np.float64)), mean,
                       std)
        return asarray(t.astype(out_dtype))
    out = np.empty(values.shape, out_dtype)
    for b in range(values.shape[0]):
        for d in range(values.shape[1]):
            section = values[b, d]
            out[b, d] = normalized(section, float(section.mean(dtype=np.float64)),
                                   float(section.std(dtype=np.float64)), mean, std)
    return asarray(out)

"""Pictures of images and volumes: planes read with bounded memory, contrast, colour maps, montages, PNG/JPEG.

The numbers behind ``noa preview``, ``noa.preview``, ``Array._repr_png_`` and the service's viewer:

- :func:`read_plane` reads one plane of a file (a section, a volume's slice on z, y or x, or a mean projection),
  cropped to a region and block-averaged ``step`` x ``step``, reading only what is drawn, in row bands;
- :func:`contrast_limits`, :func:`to_gray`, :func:`colorize` turn values into 8-bit pixels (RELION's
  ``--sigma_contrast`` rule by default); :func:`downsample`, :func:`log_spectrum`, :func:`histogram`;
- :func:`plan_layout` and :func:`preview` make the whole picture (the three central slices of a volume side by
  side, a montage, a scale bar, ``flip_y``; :func:`draw` also says how many values drawn were not finite);
  :func:`working_bytes` is the memory that holds; :func:`encode` writes PNG or JPEG through Pillow.

Rows are as stored (MRC row 0, the bottom of the image in IMOD's view, drawn at the top), as RELION's
``relion_image_handler --o x.png`` and mrcfile + Pillow show them; ``flip_y`` draws IMOD's view.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import math
import os
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from noa_core import fourier, limits  # fourier a face: its modules load only for a spectrum
from noa_core.array import Array, asarray
from noa_core.errors import ParameterError, param
from noa_core.io import formats, mapped, read_options

if TYPE_CHECKING:
    from noa_core.io import Metadata

CMAPS: tuple[str, ...] = ("gray", "fire", "ice", "viridis")
AXES: tuple[str, ...] = ("z", "y", "x")
PLANES = {"z": "XY", "y": "XZ", "x": "YZ"}  # the plane across each axis, as its panel is labelled
CONTRASTS: dict[str, str] = {
    "sigma:K": "mean ± K standard deviations of the values drawn (the sample deviation, n - 1, as RELION's "
               "relion_image_handler --sigma_contrast K computes it)",
    "percentiles:LO,HI": "the LO-th and HI-th percentiles of the values drawn (linear interpolation, numpy.percentile)",
    "minmax": "the smallest and largest value drawn",
    "range:A,B": "the values A and B, as given",
}
# The bytes a plane is read in at a time (at least one row of it): a band and its float64 sums stay in a core's
# cache (a 4096^2 micrograph binned by 4, a projection: a third less time than at 16 MiB, measured)
BAND_BYTES = 2 << 20
_BAND_VALUES = 1 << 15  # float64 values worked on at a time to turn values into pixels (256 KiB: in a core's cache)
GAP = 4  # pixels of background between the panels of a picture (central slices, montage)
MAX_PANELS = 10_000  # sections a montage draws (a 100 x 100 grid)
MAX_PIXELS = 1 << 28  # pixels of a picture (16384 x 16384): 256 MiB of gray, three times that in colour
FONT = "DejaVuSans.ttf"  # found by Pillow in the system's font folders (it has Å); Pillow's bundled font otherwise

# Colour maps, as knots (position 0..1, red, green, blue) joined linearly. fire: black, red, yellow, white
# (each channel ramps over a third of the range, as gnuplot's and matplotlib's "hot"); ice: the same ramps
# in blue, green, red; viridis: matplotlib's, at every 16th of its 256 entries and its last (within 2/255).
_RAMPS = {
    "fire": ((0.0, 0, 0, 0), (1 / 3, 255, 0, 0), (2 / 3, 255, 255, 0), (1.0, 255, 255, 255)),
    "ice": ((0.0, 0, 0, 0), (1 / 3, 0, 0, 255), (2 / 3, 0, 255, 255), (1.0, 255, 255, 255)),
    "viridis": tuple((i * 16 / 255, *rgb) for i, rgb in enumerate((
        (68, 1, 84), (71, 24, 106), (71, 44, 123), (66, 64, 133), (58, 82, 139), (50, 98, 141), (44, 114, 142),
        (38, 129, 142), (32, 144, 140), (30, 159, 136), (40, 174, 127), (62, 188, 115), (94, 201, 97),
        (131, 211, 75), (173, 220, 48), (215, 226, 25)))) + ((1.0, 253, 231, 37),),
}


# -- reading planes ------------------------------------------------------------------------------


def _read_options(reading: dict | None) -> dict[str, Any]:
    """noa's read options (as_stack: True for a stack, False for a volume; the other options of
    :mod:`noa_core.io.read_options` by name: TIFF's series, channel and level, EER's grouping, upsampling and gain)
    as :func:`noa_core.io.read` takes them."""
    given = dict(reading or {})
    as_stack = given.pop("as_stack", None)
    known = [name for name in read_options.fields() if name not in ("as_stack", "as_volume")]
    unknown = set(given) - set(known)
    if unknown:
        raise ParameterError(f"unknown read option {sorted(unknown)[0]!r}; as_stack, {', '.join(known)}", "reading")
    return {"as_stack": as_stack is True or None, "as_volume": as_stack is False or None,
            **{k: v for k, v in given.items() if v is not None}}


def open_data(path: str | os.PathLike, reading: dict | None = None,
              projects: Any = None) -> tuple[np.ndarray, Metadata]:
    """``(data, metadata)`` of the file at ``path``: ``data`` the 4-d BDHW NumPy view of the lazily read
    (memory-mapped) array, read only through the planes drawn (an EER movie decodes the fractions they are
    in); ``reading``: noa's read options (see :func:`_read_options`); ``projects``: how the stacks a particle
    file names are opened (:func:`noa_core.io.read`'s)."""
    array, meta = formats.read(path, tiles=True, projects=projects, **_read_options(reading))
    return array.numpy(), meta


def plane_shape(path: str | os.PathLike, *, axis: str = "z", reading: dict | None = None,
                projects: Any = None) -> tuple[int, int]:
    """(rows, cols) of a plane of the file at ``path`` on ``axis``: z (H, W), y (D, W), x (D, H); from the
    header alone."""
    return plane_extent(formats.probe(path, projects=projects, **_read_options(reading)).shape, _axis(axis))


def plane_extent(shape: Sequence[int], axis: str) -> tuple[int, int]:
    """(rows, cols) of a plane on ``axis`` of a BDHW ``shape``."""
    _, depth, height, width = shape
    return {"z": (height, width), "y": (depth, width), "x": (depth, height)}[axis]


def read_plane(path: str | os.PathLike, *, section: int | None = None, axis: str = "z", index: int | None = None,
               projection: bool = False, region: tuple[int, int, int, int] | None = None, step: int = 1,
               reading: dict | None = None, projects: Any = None) -> np.ndarray:
    """One plane of the file at ``path`` as float32 (rows, cols): see :func:`plane_of`."""
    data, _ = open_data(path, reading, projects)
    return plane_of(data, section=section, axis=axis, index=index, projection=projection, region=region, step=step)


def plane_of(data: np.ndarray, *, section: int | None = None, axis: str = "z", index: int | None = None,
             projection: bool = False, region: tuple[int, int, int, int] | None = None,
             step: int = 1) -> np.ndarray:
    """One plane of the BDHW ``data`` (a mapped input's view: only what is drawn is read, with pread).

    ``section``: the batch entry (a stack's image, default 0). A volume's plane is its slice on ``axis``
    (z: rows y, cols x; y: rows z, cols x; x: rows z, cols y) at ``index`` (default the centre, N // 2),
    or with ``projection`` the mean along ``axis`` (read in bands of sections). ``region`` = (y0, y1, x0,
    x1) in the plane's full-resolution pixels crops it; ``step`` = k averages k x k blocks (the last row
    and column of blocks over the pixels there are: none dropped), read in row bands, so that memory is
    bounded by the output and one band. Complex values give their modulus. Rows as stored."""
    batch, depth, _, _ = data.shape
    axis = _axis(axis)
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ParameterError(f"{step!r} is not a whole number of pixels from 1 up", "step")
    section = _in_range(0 if section is None else section, batch, "section", "sections")
    volume = data[section]
    rows, cols = plane_extent(data.shape, axis)
    if depth == 1 and axis != "z":
        raise ParameterError(f"an image has no {axis} slice or projection (it is one section); use z", "axis")
    y0, y1, x0, x1 = _region(region, rows, cols)
    if projection:
        return _projection(volume, axis, (y0, y1, x0, x1), step)
    index = _in_range(depth_extent(data.shape, axis) // 2 if index is None else index,
                      depth_extent(data.shape, axis), "index", f"{axis} slices")
    plane = volume[index] if axis == "z" else volume[:, index, :] if axis == "y" else volume[:, :, index]
    return _read_binned(plane[y0:y1, x0:x1], step)


def depth_extent(shape: Sequence[int], axis: str) -> int:
    """How many slices a BDHW ``shape`` has on ``axis``."""
    return {"z": shape[1], "y": shape[2], "x": shape[3]}[axis]


def _axis(axis: str) -> str:
    if axis not in AXES:
        raise ParameterError(f"{axis!r} is not one of z, y, x", "axis")
    return axis


def _in_range(value: int, count: int, name: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < count:
        raise ParameterError(f"{value!r} is outside 0..{count - 1} (there are {count} {what})", name)
    return int(value)


def _region(region, rows: int, cols: int) -> tuple[int, int, int, int]:
    if region is None:
        return 0, rows, 0, cols
    y0, y1, x0, x1 = (int(v) for v in region)
    if not (0 <= y0 < y1 <= rows and 0 <= x0 < x1 <= cols):
        raise ParameterError(f"({y0}, {y1}, {x0}, {x1}) is not a region (y0, y1, x0, x1) within the plane's "
                             f"{rows} x {cols} pixels", "region")
    return y0, y1, x0, x1


def _values(block: np.ndarray) -> np.ndarray:
    """Real values to draw: the modulus of complex ones (sums over them are taken in float64)."""
    return np.abs(block) if block.dtype.kind == "c" else block


def _read(view: np.ndarray) -> np.ndarray:
    """The values of ``view`` in memory (with pread when it views a mapped input), real."""
    return _values(mapped.read_view(view, 0))


def _read_binned(plane: np.ndarray, step: int) -> np.ndarray:
    """``plane`` (a 2-d view, maybe of a mapped file) read in bands of whole block rows and averaged
    ``step`` x ``step``: float32, (ceil(rows / step), ceil(cols / step))."""
    rows, cols = plane.shape
    out = np.empty((-(-rows // step), -(-cols // step)), np.float32)
    if step == 1 and plane.dtype == out.dtype:  # the values as they are: read straight into the answer (no band
        read = mapped.read_view(plane, 0, into=out)  # buffer copied from, no threads started for the copies)
        if read.ctypes.data != out.ctypes.data:  # not read in place (a crop of rows, an array in memory)
            out[...] = read
        return out
    # A band's bytes in memory: a row's stride covers the gaps between rows read as one run (a crop of a section),
    # but a plane read value by value (a volume's x slice, one value a row of the file) is held packed.
    row_bytes = max(cols * plane.itemsize, 1) if mapped.reads_spaced(plane) else \
        max(abs(plane.strides[0]), cols * plane.itemsize, 1)
    band = max(step, BAND_BYTES // row_bytes // step * step)
    firsts = range(0, rows, band)

    def average(first: int) -> None:
        block = _read(plane[first:first + band])
        with np.errstate(over="ignore"):  # float64 values past float32's range are drawn as infinities
            out[first // step:(first + block.shape[0] + step - 1) // step] = block_mean(block, step)

    # A plane read value by value is read by read_view's threads in file order, band after band: bands side by
    # side would be streams far apart in one file, which a cold page cache reads slower.
    threads = 1 if mapped.reads_spaced(plane) else min(len(firsts), limits.available_cores())
    if threads < 2:
        for first in firsts:
            average(first)
    else:  # NumPy's sums release the GIL: a band a core (memory: a band each)
        list(_band_threads().map(average, firsts))
    return out


@functools.cache
def _band_threads() -> ThreadPoolExecutor:
    """The threads that average a plane's bands, started once: starting them for each plane cost a viewer's
    request a millisecond a thread on a busy machine. Their own pool: a band's read waits on mapped's readers."""
    return ThreadPoolExecutor(limits.available_cores(), "noa-bands")


os.register_at_fork(after_in_child=_band_threads.cache_clear)  # a forked child has none of its parent's threads


def block_mean(values: np.ndarray, step: int) -> np.ndarray:
    """Means of ``step`` x ``step`` blocks of 2-d ``values``, summed in float64 (partial blocks at the ends:
    the mean of their own pixels)."""
    if step == 1:
        return values
    rows, cols = values.shape
    out_rows, out_cols = -(-rows // step), -(-cols // step)
    # Every step-th row, then every step-th column, added whole: step vectorised adds each, where a sum over a
    # short inner axis (reshape(..., step).sum) runs element by element.
    row_sums = np.zeros((out_rows, cols))
    sums = np.zeros((out_rows, out_cols))
    with np.errstate(invalid="ignore"):  # +inf and -inf in one block: its mean is NaN
        for i in range(min(step, rows)):
            part = values[i::step]
            row_sums[:part.shape[0]] += part
        for j in range(min(step, cols)):
            part = row_sums[:, j::step]
            sums[:, :part.shape[1]] += part
    counts = np.outer(np.minimum(step, rows - step * np.arange(out_rows)),
                      np.minimum(step, cols - step * np.arange(out_cols)))
    sums /= counts
    return sums


def _projection(volume: np.ndarray, axis: str, region: tuple[int, int, int, int], step: int) -> np.ndarray:
    """The mean of ``volume`` (D, H, W) along ``axis`` over ``region`` of the projected plane, averaged ``step`` x
    ``step``: float32. Made in bands of whole block rows whose float64 means fit :data:`BAND_BYTES` (at least one
    block row), so that memory is the picture and a few bands, never the full-resolution plane."""
    y0, y1, x0, x1 = region
    out = np.empty((-(-(y1 - y0) // step), -(-(x1 - x0) // step)), np.float32)
    band = max(step, BAND_BYTES // (8 * (x1 - x0)) // step * step)
    for first in range(y0, y1, band):
        last = min(first + band, y1)
        top = (first - y0) // step
        out[top:top + -(-(last - first) // step)] = block_mean(_projected_band(volume, axis, (first, last, x0, x1)),
                                                                step)
    return out


def _projected_band(volume: np.ndarray, axis: str, region: tuple[int, int, int, int]) -> np.ndarray:
    """The means (float64) of ``volume`` along ``axis`` over ``region``, a band of the projected plane: the sums
    are read in pieces of about :data:`BAND_BYTES`, whole sections where they fit, else rows of one section."""
    y0, y1, x0, x1 = region
    along = AXES.index(axis)
    if axis == "z":  # the plane's rows are the sections' rows
        part = volume[:, y0:y1, x0:x1]
    else:  # the plane's rows are sections, summed across their rows (y) or along them (x)
        part = volume[y0:y1, :, x0:x1] if axis == "y" else volume[y0:y1, x0:x1, :]
    sums = np.zeros((y1 - y0, x1 - x0))
    row_bytes = max(abs(part.strides[1]), part.shape[2] * part.itemsize, 1)
    rows = min(part.shape[1], max(1, BAND_BYTES // row_bytes))
    sections = max(1, BAND_BYTES // (rows * row_bytes)) if rows == part.shape[1] else 1
    with np.errstate(invalid="ignore"):  # +inf and -inf along one line: its mean is NaN
        for a in range(0, part.shape[0], sections):
            for b in range(0, part.shape[1], rows):
                piece = _read(part[a:a + sections, b:b + rows])
                if along == 0:
                    sums[b:b + piece.shape[1]] += piece.sum(axis=0, dtype=np.float64)
                elif along == 1:
                    sums[a:a + piece.shape[0]] += piece.sum(axis=1, dtype=np.float64)
                else:
                    sums[a:a + piece.shape[0], b:b + piece.shape[1]] = piece.sum(axis=2, dtype=np.float64)
    sums /= part.shape[along]
    return sums


# -- values to pixels ----------------------------------------------------------------------------


def parse_contrast(contrast: str) -> tuple[str, tuple[float, ...]]:
    """``(kind, numbers)`` of a contrast spec (:data:`CONTRASTS`); ParameterError naming ``contrast``."""
    kind, _, rest = str(contrast).strip().partition(":")
    counts = {"sigma": 1, "percentiles": 2, "minmax": 0, "range": 2}
    if kind not in counts or (counts[kind] == 0) != (rest == ""):
        raise ParameterError(f"{contrast!r} is not one of sigma:K, percentiles:LO,HI, minmax, range:A,B", "contrast")
    try:
        numbers = tuple(float(part) for part in rest.split(",")) if rest else ()
    except ValueError:
        raise ParameterError(f"{contrast!r}: {rest!r} is not {counts[kind]} number(s)", "contrast") from None
    if len(numbers) != counts[kind] or not all(math.isfinite(n) for n in numbers):
        raise ParameterError(f"{contrast!r}: {kind} takes {counts[kind]} finite number(s)", "contrast")
    if kind == "sigma" and not numbers[0] > 0:
        raise ParameterError(f"{contrast!r}: K must be above 0", "contrast")
    if kind == "percentiles" and not 0 <= numbers[0] < numbers[1] <= 100:
        raise ParameterError(f"{contrast!r}: give 0 <= LO < HI <= 100", "contrast")
    if kind == "range" and not numbers[0] < numbers[1]:
        raise ParameterError(f"{contrast!r}: give A < B", "contrast")
    return kind, numbers


def contrast_limits(values, contrast: str = "sigma:3") -> tuple[float, float]:
    """The values drawn black and white, ``lo < hi``, by ``contrast`` (:data:`CONTRASTS`) over the finite
    ``values`` (NaN and infinities are left out). A constant input gives its value ± 0.5; none: 0..1."""
    kind, numbers = parse_contrast(contrast)
    if kind == "range":
        return numbers[0], numbers[1]
    if kind == "sigma":
        count, mean, sd = _mean_sd(np.asarray(values))
        if count == 0:
            return 0.0, 1.0
        lo, hi = mean - numbers[0] * sd, mean + numbers[0] * sd
        return (lo, hi) if lo < hi else (mean - 0.5, mean + 0.5)
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    finite = np.isfinite(flat)
    if not finite.all():
        flat = flat[finite]
    if flat.size == 0:
        return 0.0, 1.0
    if kind == "percentiles":
        lo, hi = (float(v) for v in np.percentile(flat, numbers))
    else:
        lo, hi = float(flat.min()), float(flat.max())
    if not lo < hi:
        return lo - 0.5, lo + 0.5
    return lo, hi


def _mean_sd(values: np.ndarray) -> tuple[int, float, float]:
    """(count, mean, sample standard deviation (n - 1; 0 for one value)) of the finite ``values``, summed in float64
    in two passes (the deviations from the mean squared), a cache-sized band at a time: no float64 copy of the
    whole plane (a 1024² viewer picture's statistics took 4-6 ms through 8 MiB copies, 1.2 ms this way)."""
    flat = values.reshape(-1)
    with np.errstate(invalid="ignore", over="ignore"):  # +inf and -inf among them: a NaN sum, filtered below
        total = float(flat.sum(dtype=np.float64))
    if not math.isfinite(total):  # a NaN or an infinity among them (or float64 values whose sum overflows)
        flat = flat[np.isfinite(flat)]
        total = float(flat.sum(dtype=np.float64))
    if flat.size == 0:
        return 0, 0.0, 0.0
    mean = total / flat.size
    squares = 0.0
    deviations = np.empty(min(flat.size, _BAND_VALUES))
    for first in range(0, flat.size, _BAND_VALUES):
        band = deviations[:flat.size - first] if first + _BAND_VALUES > flat.size else deviations
        np.subtract(flat[first:first + band.size], mean, out=band, dtype=np.float64)
        band *= band
        squares += float(band.sum())
    return flat.size, mean, math.sqrt(squares / (flat.size - 1)) if flat.size > 1 else 0.0


def to_gray(values, lo: float, hi: float, *, invert: bool = False) -> np.ndarray:
    """uint8 levels of ``values``: clipped to ``lo..hi``, then floor((v - lo) / ((hi - lo) / 255)), the
    formula of RELION's PNG output (image_handler.cpp), so ``hi`` is 255; ``invert``: 255 minus that. NaN is
    drawn as ``lo`` (black), infinities as they clip."""
    if not hi > lo:
        raise ParameterError(f"{lo:g}..{hi:g}: the white value must be above the black one", "contrast")
    values = np.asarray(values)
    gray = np.empty(values.shape, np.uint8)
    flat, out = values.reshape(-1), gray.reshape(-1)
    # In float64, a cache-sized band at a time, worked on in place (no 8 MiB temporaries for a 1024² picture)
    levels = np.empty(min(flat.size, _BAND_VALUES))
    for first in range(0, flat.size, _BAND_VALUES):
        band = levels[:flat.size - first] if first + _BAND_VALUES > flat.size else levels
        np.fmax(flat[first:first + band.size], lo, out=band, dtype=np.float64)  # NaN -> lo
        np.fmin(band, hi, out=band)
        band -= lo
        band /= (hi - lo) / 255  # at most 255 (hi - lo rounded down, never up): no level past 255
        out[first:first + band.size] = band  # the floor: a cast truncates, and these are 0 or more
    return np.subtract(255, gray, out=gray) if invert else gray


def colour_table(cmap: str) -> np.ndarray:
    """The (256, 3) uint8 table of colour map ``cmap`` (one of :data:`CMAPS`; gray: r = g = b = level)."""
    if cmap not in CMAPS:
        raise ParameterError(f"{cmap!r} is not one of {', '.join(CMAPS)}", "cmap")
    levels = np.arange(256) / 255
    if cmap == "gray":
        return np.repeat(np.arange(256, dtype=np.uint8)[:, None], 3, axis=1)
    knots = np.array(_RAMPS[cmap], dtype=np.float64)
    return np.stack([np.rint(np.interp(levels, knots[:, 0], knots[:, c])) for c in (1, 2, 3)], axis=1).astype(np.uint8)


def colorize(gray, cmap: str = "gray") -> np.ndarray:
    """uint8 pixels of the levels ``gray``: (H, W) itself for gray, (H, W, 3) RGB for fire, ice, viridis."""
    table = colour_table(cmap)
    gray = np.asarray(gray, dtype=np.uint8)
    return gray.copy() if cmap == "gray" else table[gray]


def downsample(values, size: int) -> np.ndarray:
    """``values`` (2-d) averaged in k x k blocks, k the smallest with the longest side at most ``size``
    (partial blocks at the ends averaged over their pixels: nothing dropped); float32."""
    values = np.asarray(values)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ParameterError(f"{size!r} is not a size in pixels from 1 up", "size")
    step = max(1, -(-max(values.shape) // size))
    return block_mean(_values(values), step).astype(np.float32)


def log_spectrum(values) -> np.ndarray:
    """The natural log of the power spectrum |F|^2 / N of the 2-d image ``values``, zero frequency at
    (H // 2, W // 2) (numpy.fft.fftshift's centre), full width (the redundant half mirrors the other, as
    Thon rings are looked at); float32, same shape. A power of 0 gives the log of the smallest normal
    float32, as ``noa powerspectrum --log``."""
    image = np.asarray(values)
    if image.ndim != 2:
        raise ParameterError(f"a spectrum is of a 2-d image; got {image.ndim} dimensions", "spectrum")
    real = np.abs(image).astype(np.float32) if image.dtype.kind == "c" else image.astype(np.float32, copy=False)
    power = fourier.spectral.power_spectrum(asarray(np.ascontiguousarray(real)[None, None]), log=True, ndim=2)
    return power.numpy()[0, 0].astype(np.float32, copy=False)


def histogram(values, bins: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """``numpy.histogram`` of ``values`` over their range in ``bins`` equal bins: (counts, edges)."""
    if isinstance(bins, bool) or not isinstance(bins, int) or not 1 <= bins <= 1 << 16:
        raise ParameterError(f"{bins!r} is not a number of bins in 1..65536", "bins")
    return np.histogram(np.asarray(values, dtype=np.float64).reshape(-1), bins=bins)


FORMATS = {"png": ("PNG", ".png", "image/png"), "jpeg": ("JPEG", ".jpg", "image/jpeg")}
PNG_WORTHWHILE = 0.85  # a fast PNG is compressed when a sample shrinks below this fraction, else stored


def format_of(name: str) -> str | None:
    """'png' or 'jpeg' for a file name ending .png, .jpg or .jpeg (any case); None otherwise."""
    lower = str(name).lower()
    if lower.endswith(".png"):
        return "png"
    return "jpeg" if lower.endswith((".jpg", ".jpeg")) else None


def encode(pixels, fmt: str, quality: int = 90, *, fast: bool = False) -> bytes:
    """``pixels`` (uint8 (H, W) gray or (H, W, 3) RGB) encoded by Pillow as "png" (lossless) or "jpeg" at
    ``quality`` (1..95, Pillow's scale). ``fast``: a PNG as quick to make as it is to send (the viewer's), by
    libpng through imagecodecs at OpenCV's fast settings (zlib level 1, run-length strategy, the Sub filter: 5 to
    10 times quicker than Pillow's level 6, a few per cent larger on noisy pictures, up to ten times on smooth
    ones)."""
    from PIL import Image

    if fmt not in FORMATS:
        raise ParameterError(f"{fmt!r} is not one of png, jpeg", "format")
    if isinstance(quality, bool) or not isinstance(quality, int) or not 1 <= quality <= 95:
        raise ParameterError(f"{quality!r} is not a JPEG quality in 1..95", "quality")
    pixels = np.ascontiguousarray(pixels, dtype=np.uint8)
    if fast and fmt == "png":
        from imagecodecs import png_encode  # 50 ms to import: only where a fast PNG is made

        if _compressible(pixels):
            return bytes(png_encode(pixels, level=1, strategy=3, filter=16))
        return bytes(png_encode(pixels, level=0, filter=8))  # stored: no filter (it would shrink nothing)
    buffer = io.BytesIO()
    options = {"quality": quality} if fmt == "jpeg" else {"compress_level": 6}
    Image.fromarray(pixels, "L" if pixels.ndim == 2 else "RGB").save(buffer, format=FORMATS[fmt][0], **options)
    return buffer.getvalue()


def load_encoders() -> None:
    """The encoders :func:`encode` uses (Pillow, imagecodecs' libpng: 50 ms of imports) loaded, as a service starts:
    its first picture then does not wait for them."""
    for fmt in FORMATS:
        encode(np.zeros((2, 2), np.uint8), fmt, fast=True)


def _compressible(pixels: np.ndarray) -> bool:
    """Whether zlib saves enough on ``pixels`` to be worth its time, judged from 16 rows spread over it (a tenth of
    a millisecond for a 1024² picture; every 16th row took a millisecond): a noisy picture (a micrograph at sigma
    contrast) is stored instead, as its 1024² PNG at level 1 took 30 ms for 2% fewer bytes (1 ms stored), while a
    smooth one shrinks tenfold."""
    sample = np.ascontiguousarray(pixels[::max(1, len(pixels) // 16)]).tobytes()
    return len(zlib.compress(sample, 1)) < PNG_WORTHWHILE * len(sample)


# -- the picture ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Panel:
    """One plane of a picture: the batch entry ``section``, the slice (or ``projection``) on ``axis`` at
    ``index``, (``rows``, ``cols``) full-resolution pixels, placed at (``top``, ``left``) of the picture, and its
    ``label`` (what :func:`draw` writes on it with ``labels``: XY, XZ or YZ and the slice, a section's number)."""

    section: int
    axis: str
    index: int | None
    projection: bool
    rows: int
    cols: int
    top: int = 0
    left: int = 0
    label: str = ""


@dataclass(frozen=True)
class Layout:
    """What a picture shows: its panels, each averaged ``step`` x ``step`` and then drawn ``zoom`` x ``zoom``
    pixels a value (nearest neighbour: a small map's voxels stay visible), and its ``shape`` (rows, cols)."""

    panels: tuple[Panel, ...]
    step: int
    shape: tuple[int, int]
    zoom: int = 1

    def panel_shape(self, panel: Panel) -> tuple[int, int]:
        """(rows, cols) ``panel`` takes in the picture."""
        return -(-panel.rows // self.step) * self.zoom, -(-panel.cols // self.step) * self.zoom


def plan_layout(shape: Sequence[int], *, section: int | None = None, axis: str | None = None,
                index: int | None = None, projection: str | None = None, montage: bool = False,
                columns: int | None = None, every: int = 1, first: int = 0, count: int | None = None,
                size: int = 1024, bin: int | None = None, box: tuple[int, int] | None = None,
                magnify: bool = False) -> Layout:
    """The layout of the picture of a BDHW ``shape``, from the header alone.

    An image (D = 1) is the section ``section`` (default 0); a volume shows its three central slices side
    by side (z: XY, y: XZ, x: YZ; rows are z in the last two) unless ``axis`` (with ``index``, default the
    centre) or ``projection`` (an axis) names one. ``montage``: the sections of a stack (a volume's z
    slices) every ``every`` from ``first``, at most ``count`` of them (default: to the end), in a grid of
    ``columns`` (default about square), left to right, top to bottom.
    Panels are :data:`GAP` pixels apart. Each panel is averaged k x k: k = ``bin``, or the smallest k whose
    picture fits ``box`` (rows, cols), default ``size`` x ``size``. ``magnify`` (without ``bin``, which sets the
    scale): a picture smaller than that is drawn m x m pixels a value, m the largest whole number whose picture
    still fits (nearest neighbour: voxels stay visible). Each panel's label: XY, XZ or YZ for a volume's
    central slices, with the slice (``XZ y=3``) or ``mean`` for one slice or projection, the section (a
    volume's z slice) on a montage and a stack's section; none for a lone image."""
    shape = tuple(int(n) for n in shape)
    if len(shape) != 4 or min(shape) < 1:
        raise ParameterError(f"nothing to draw in an array of shape {shape}", "shape")
    batch, depth = shape[0], shape[1]
    if projection is not None and axis is not None:
        raise ParameterError("give a slice or a projection, not both", "projection")
    if montage and (axis not in (None, "z") or projection is not None):
        raise ParameterError("a montage shows z sections; it takes no slice axis or projection", "montage")
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ParameterError(f"{every!r} is not a step of sections from 1 up", "every")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise ParameterError(f"{count!r} is not a number of sections from 1 up", "count")
    if not montage and (columns is not None or every != 1):
        raise ParameterError("columns and every lay out a montage; add montage", "columns" if columns else "every")
    if not montage and (first != 0 or count is not None):
        raise ParameterError("first and count pick a montage's sections; add montage", "first" if first else "count")
    if montage:
        items = depth if depth > 1 else batch
        picked = range(_in_range(first, items, "first", "z slices" if depth > 1 else "sections"), items, every)
        picked = picked[:count] if count is not None else picked
        if len(picked) > MAX_PANELS:  # checked before anything is built per section
            raise ParameterError(f"{len(picked)} sections: a montage draws at most {MAX_PANELS}; draw every "
                                 f"{-(-len(picked) * every // MAX_PANELS)}-th or more", "every")
        if depth > 1:
            entry = _in_range(0 if section is None else section, batch, "section", "sections")
            planes = [Panel(entry, "z", z, False, *shape[2:], label=str(z)) for z in picked]
        else:
            planes = [Panel(s, "z", 0, False, *shape[2:], label=str(s)) for s in picked]
        columns = columns or math.ceil(math.sqrt(len(planes)))
        grid = [planes[i:i + columns] for i in range(0, len(planes), columns)]
    else:
        entry = _in_range(0 if section is None else section, batch, "section", "sections")
        if depth == 1 or axis is not None or projection is not None:
            along = _axis(projection or axis or "z")
            if depth == 1 and along != "z":
                raise ParameterError(f"an image has no {along} slice or projection (it is one section); use z",
                                     "projection" if projection else "axis")
            at = None if projection else _in_range(
                depth_extent(shape, along) // 2 if index is None else index, depth_extent(shape, along), "index",
                f"{along} slices")
            if depth > 1:
                label = f"{PLANES[along]} {'mean' if projection else f'{along}={at}'}"
            else:
                label = str(entry) if batch > 1 else ""
            grid = [[Panel(entry, along, at, projection is not None, *plane_extent(shape, along), label=label)]]
        else:
            if index is not None:
                raise ParameterError(f"an index needs a slice axis ({param('slice', 'z|y|x')})", "index")
            grid = [[Panel(entry, a, depth_extent(shape, a) // 2, False, *plane_extent(shape, a), label=PLANES[a])
                     for a in AXES]]
    rows_max, cols_max = box or (size, size)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ParameterError(f"{size!r} is not a size in pixels from 1 up", "size")
    if bin is not None:
        step = bin
        if isinstance(step, bool) or not isinstance(step, int) or step < 1:
            raise ParameterError(f"{step!r} is not a binning factor from 1 up", "bin")
    else:
        step = _fitting_step(grid, rows_max, cols_max)
    zoom = _fitting_zoom(grid, rows_max, cols_max) if magnify and bin is None and step == 1 else 1
    rows, cols = _extent(grid, step, zoom)
    if rows * cols > MAX_PIXELS:
        raise ParameterError(f"a picture of {rows} x {cols} pixels is more than the {MAX_PIXELS} noa draws; bin more "
                             f"({param('bin')}) or draw less", "bin")
    return _placed(grid, step, zoom)


def _extent(grid: list[list[Panel]], step: int, zoom: int = 1) -> tuple[int, int]:
    cell_rows = max(-(-p.rows // step) for row in grid for p in row) * zoom
    width = max(sum(-(-p.cols // step) * zoom for p in row) + GAP * (len(row) - 1) for row in grid)
    return cell_rows * len(grid) + GAP * (len(grid) - 1), width


def _fitting_zoom(grid: list[list[Panel]], rows_max: int, cols_max: int) -> int:
    """The largest m whose picture, every value m x m pixels, fits rows_max x cols_max (1 at least)."""
    cell_rows = max(p.rows for row in grid for p in row)
    down = (rows_max - GAP * (len(grid) - 1)) // (cell_rows * len(grid))
    across = min((cols_max - GAP * (len(row) - 1)) // sum(p.cols for p in row) for row in grid)
    return max(1, min(down, across))


def _fitting_step(grid: list[list[Panel]], rows_max: int, cols_max: int) -> int:
    """The smallest k whose picture fits rows_max x cols_max (refused when even one pixel a panel does not)."""
    rows, cols = _extent(grid, 1 << 62)
    if rows > rows_max or cols > cols_max:
        raise ParameterError(f"{len(grid) * len(grid[0])} panels do not fit in {rows_max} x {cols_max} pixels; "
                             f"draw fewer ({param('every')}, {param('columns')}) or a larger picture "
                             f"({param('size')})", "size")
    full_rows, full_cols = _extent(grid, 1)
    step = max(1, math.ceil(max(full_rows / rows_max, full_cols / cols_max)))
    while _extent(grid, step)[0] > rows_max or _extent(grid, step)[1] > cols_max:
        step += 1
    return step


def _placed(grid: list[list[Panel]], step: int, zoom: int) -> Layout:
    cell_rows = max(-(-p.rows // step) for row in grid for p in row) * zoom
    panels, top = [], 0
    for row in grid:
        left = 0
        for p in row:
            panels.append(dataclasses.replace(p, top=top, left=left))
            left += -(-p.cols // step) * zoom + GAP
        top += cell_rows + GAP
    return Layout(tuple(panels), step, _extent(grid, step, zoom), zoom)


def scale_bar_length(cols: int, pixel_size: float) -> tuple[float, int, str]:
    """A round scale bar for a panel ``cols`` pixels wide of ``pixel_size`` Å each: (length in Å, length in
    pixels, its label). The length is the largest 1, 2 or 5 x 10^n Å at most a quarter of the width,
    labelled in nm from 10 nm up ("50 Å", "20 nm")."""
    target = cols * pixel_size / 4
    power = 10.0 ** math.floor(math.log10(target))
    length = max(m * power for m in (1, 2, 5) if m * power <= target * (1 + 1e-9))
    return length, max(1, round(length / pixel_size)), length_label(length)


def length_label(angstroms: float, angstrom_sign: bool = True) -> str:
    """A length as a scale bar says it: in Å below 10 nm ("50 Å"), else in nm ("20 nm"); in nm whatever the
    length without ``angstrom_sign`` (a font that has no Å)."""
    return f"{angstroms:g} Å" if angstroms < 100 and angstrom_sign else f"{angstroms / 10:g} nm"


@functools.lru_cache(maxsize=64)
def font(size: int):
    """The font text is drawn in, ``size`` pixels: DejaVu Sans where the system has it (:data:`FONT`), else
    Pillow's bundled one (``ImageFont.load_default(size=...)``, which has no Å)."""
    from PIL import ImageFont

    try:
        return ImageFont.truetype(FONT, size)
    except OSError:
        return ImageFont.load_default(size=size)


def has_glyph(typeface, character: str) -> bool:
    """Whether ``typeface`` (a Pillow font) draws ``character`` as itself, not as the box of a missing glyph."""
    return bytes(typeface.getmask(character)) != bytes(typeface.getmask("\uffff"))


def working_bytes(pixels: int, *, spectrum: int = 0) -> int:
    """The bytes drawing a picture of ``pixels`` holds at once: its values (float32) and their copy for the limits,
    that copy in float64 and its deviations from the mean, or the float64 levels and their clipped copy, then the
    levels and colours (32 a pixel, 29 to 31 measured); per core (two at least) a band read and its float64 sums,
    or a projection's band and its means (3 x :data:`BAND_BYTES`); with a spectrum, the full-resolution plane of
    ``spectrum`` pixels and its transform (24 a pixel)."""
    return 32 * pixels + 3 * BAND_BYTES * max(2, limits.available_cores()) + 24 * spectrum


@dataclass(frozen=True)
class Drawing:
    """A picture (:func:`draw`): its ``pixels``, how many values it draws (``count``, block means) and how many of
    them are not finite (``non_finite``: NaN, drawn black, and infinities, drawn as they clip), which the contrast
    limits leave out."""

    pixels: np.ndarray
    count: int
    non_finite: int


def preview(source: str | os.PathLike | Array | np.ndarray, **options: Any) -> np.ndarray:
    """The picture of ``source``: the pixels of :func:`draw` (the same options).

    Args:
        source: a file path, a noa Array or a NumPy array (padded to BDHW as noa does).
        **options: :func:`draw`'s keyword options (section, projection, montage, contrast, cmap, size, ...).

    Returns:
        uint8 pixels: (rows, cols) for gray, (rows, cols, 3) for the other colour maps.

    Raises:
        ParameterError: an option out of range, or an array of vector or matrix elements.
        FileFormatError: a file that cannot be read.
    """
    return draw(source, **options).pixels


def draw(source, *, section: int | None = None, axis: str | None = None, index: int | None = None,
         projection: str | None = None, montage: bool = False, columns: int | None = None, every: int = 1,
         first: int = 0, count: int | None = None, spectrum: bool = False, contrast: str = "sigma:3",
         invert: bool = False, cmap: str = "gray", size: int = 1024, bin: int | None = None,
         box: tuple[int, int] | None = None, scale_bar: bool = False, pixel_size: float | None = None,
         flip_y: bool = False, labels: bool = False, magnify: bool = False, reading: dict | None = None,
         projects: Any = None) -> Drawing:
    """The picture of ``source`` (a file path, a noa Array or a NumPy array, padded to BDHW as noa does):
    uint8 (rows, cols) for gray, (rows, cols, 3) for the other colour maps.

    The panels are those of :func:`plan_layout`, each read by :func:`plane_of` (only what is drawn),
    averaged k x k; ``spectrum`` draws each panel's :func:`log_spectrum` (of the full-resolution plane)
    instead; ``magnify``: a small picture is drawn m x m pixels a value to fit ``size`` (see :func:`plan_layout`).
    Black and white are :func:`contrast_limits` of every value drawn, then :func:`to_gray` (``invert``) and
    :func:`colorize` (``cmap``); the background between panels is black. ``flip_y`` draws each panel with row 0
    at the bottom (IMOD's view). ``scale_bar``: a white bar of a round length (:func:`scale_bar_length`) and its
    label at the bottom left of the first panel, from ``pixel_size`` (Å, default the file's; refused when
    unknown). ``labels``: each panel's label (:class:`Panel`) at its top left. Text is white, outlined in black,
    :func:`text_size` pixels high. A path is read with ``reading`` and ``projects`` (:func:`open_data`)."""
    data, known = _source(source, reading, projects)
    if scale_bar:
        pixel_size = pixel_size or known
        if not pixel_size:
            raise ParameterError(f"the pixel size is unknown, so a scale bar cannot be drawn; give one "
                                 f"({param('angpix')})", "scale_bar")
        if spectrum:
            raise ParameterError("a spectrum is in frequencies: it takes no scale bar", "scale_bar")
    cmap_table = colour_table(cmap)
    layout = plan_layout(data.shape, section=section, axis=axis, index=index, projection=projection,
                         montage=montage, columns=columns, every=every, first=first, count=count, size=size, bin=bin,
                         box=box, magnify=magnify)
    values = [_panel_values(data, p, layout.step, spectrum) for p in layout.panels]
    drawn = np.concatenate([v.reshape(-1) for v in values])
    non_finite = drawn.size - int(np.count_nonzero(np.isfinite(drawn)))
    lo, hi = contrast_limits(drawn, contrast)
    del drawn  # a copy of every value: not held while the picture is made
    picture = np.zeros((*layout.shape, 3), np.uint8) if cmap != "gray" else np.zeros(layout.shape, np.uint8)
    for panel, v in zip(layout.panels, values):
        gray = to_gray(np.flipud(v) if flip_y else v, lo, hi, invert=invert)
        if layout.zoom > 1:
            gray = gray.repeat(layout.zoom, axis=0).repeat(layout.zoom, axis=1)
        picture[panel.top:panel.top + gray.shape[0], panel.left:panel.left + gray.shape[1]] = (
            gray if cmap == "gray" else cmap_table[gray])
    if scale_bar or labels:
        bar_pixel = pixel_size * layout.step / layout.zoom if scale_bar and pixel_size is not None else None
        _draw_text(picture, layout, bar_pixel, labels)
    return Drawing(picture, sum(v.size for v in values), non_finite)


def _source(source, reading: dict | None, projects: Any = None) -> tuple[np.ndarray, float | None]:
    """(BDHW NumPy data, pixel size in Å or None) of a path, an Array or anything noa.asarray takes."""
    if isinstance(source, (str, os.PathLike)):
        data, meta = open_data(source, reading, projects)
        pixel, _, _ = meta.in_angstrom()
        return data, (pixel[2] if pixel[2] > 0 else None)
    array = source if isinstance(source, Array) else asarray(np.asarray(source))
    if array.element_shape:
        raise ParameterError(f"an array of {array.dtype} elements has no picture; give scalars", "array")
    return array.to("cpu").numpy(), None


def _panel_values(data: np.ndarray, panel: Panel, step: int, spectrum: bool) -> np.ndarray:
    if spectrum:
        plane = plane_of(data, section=panel.section, axis=panel.axis, index=panel.index,
                         projection=panel.projection)
        return block_mean(log_spectrum(plane), step).astype(np.float32)
    return plane_of(data, section=panel.section, axis=panel.axis, index=panel.index, projection=panel.projection,
                    step=step)


def scale_bar_box(top: int, left: int, rows: int, cols: int, length: int) -> tuple[int, int, int, int]:
    """(y0, y1, x0, x1) of the bar of ``length`` pixels drawn on a panel of ``rows`` x ``cols`` at (``top``,
    ``left``): :func:`text_margin` pixels from the bottom-left corner, max(2, rows // 64) rows thick."""
    margin, thick = text_margin(cols), max(2, rows // 64)
    y1 = top + rows - margin
    return y1 - thick, y1, left + margin, left + margin + length


def text_size(rows: int, cols: int) -> int:
    """The height in pixels (the font's size) of the text drawn on a panel of ``rows`` x ``cols`` pixels: a
    sixteenth of its shorter side, 12 at least (readable on a small picture) and 64 at most."""
    return min(64, max(12, min(rows, cols) // 16))


def text_stroke(rows: int, cols: int) -> int:
    """The width of the black outline of the text drawn on a panel of ``rows`` x ``cols`` pixels."""
    return max(1, text_size(rows, cols) // 12)


def text_margin(cols: int) -> int:
    """Pixels between a panel's edges and what is drawn on it (the scale bar, the labels)."""
    return max(2, cols // 32)


def _draw_text(picture: np.ndarray, layout: Layout, pixel_size: float | None, labels: bool) -> None:
    """Into ``picture``, with Pillow's ImageDraw and its bundled font (``load_default(size=...)``): the scale bar
    of ``pixel_size`` Å a picture pixel on the first panel (None: no bar) and, with ``labels``, each panel's label
    at its top left; white, the text outlined in black."""
    from PIL import Image, ImageDraw

    image = Image.fromarray(picture)
    draw = ImageDraw.Draw(image)
    white = 255 if picture.ndim == 2 else (255, 255, 255)
    black = 0 if picture.ndim == 2 else (0, 0, 0)
    outline: dict[str, Any] = {"fill": white, "stroke_fill": black}
    for n, panel in enumerate(layout.panels):
        rows, cols = layout.panel_shape(panel)
        typeface, stroke = font(text_size(rows, cols)), text_stroke(rows, cols)
        margin = text_margin(cols)
        if labels and panel.label:
            draw.text((panel.left + margin, panel.top + margin), panel.label, font=typeface, anchor="lt",
                      stroke_width=stroke, **outline)
        if n == 0 and pixel_size is not None:
            length, pixels, _ = scale_bar_length(cols, pixel_size)
            y0, y1, x0, x1 = scale_bar_box(panel.top, panel.left, rows, cols, pixels)
            draw.rectangle((x0, y0, x1 - 1, y1 - 1), fill=white)
            draw.text((x0, y0 - 2), length_label(length, has_glyph(typeface, "Å")), font=typeface, anchor="ld",
                      stroke_width=stroke, **outline)
    picture[...] = np.asarray(image)


def png_picture(array) -> bytes | None:
    """``Array._repr_png_``: the preview of a notebook cell, longest side 512 pixels, as PNG; None (the text
    repr alone) for an array with no picture (empty, vector elements)."""
    try:
        return encode(preview(array, size=512), "png")
    except ParameterError:
        return None

"""Fourier shell correlation (FSC; Fourier ring correlation, FRC, of 2-d images) of two half maps: the curve,
where it falls below a threshold, and its tables (RELION's STAR block, CSV, EMDB's FSC XML).

The FSC of shell ``s`` is ``sum Re(F1 conj F2) / sqrt(sum |F1|^2 sum |F2|^2)`` over the samples of the
non-redundant (r2c) transforms that fall in ``s``; each sample of the half transform counts once, as in
RELION's ``getFSC``. Two shell rules:

- ``relion`` (RELION 3.1.3's ``getFSC``, src/fftw.cpp): shell ``round(|k|)``, ``|k|`` in Fourier pixels
  of each axis (logical index ``k`` if ``k < W // 2 + 1`` else ``k - n`` on the depth and height axes),
  shells ``0 .. W // 2`` (W the width); samples further out are left out. For square images and cubic
  volumes this is the usual rounded radius; RELION counts a rectangular box's every axis in its own
  Fourier pixels, which is no frequency, and noa follows it there too.
- ``linear`` (noa C++'s isotropic FSC): frequencies normalised per axis (``k / n`` cycles per pixel), so
  rectangular boxes are measured in true frequencies; ``r = |f| * m`` with ``m = min(sizes)``; each
  sample within Nyquist (``|f| <= 0.5``) adds ``1 - frac(r)`` of itself to shell ``floor(r)`` and
  ``frac(r)`` to the next (the last shell, ``m // 2``, takes both at Nyquist); shells ``0 .. m // 2``.

A shell whose sums are zero (a half map without power there) has no correlation: NaN, and the FSC is
undefined from there on: thresholds are looked for in the shells before it (constant or empty maps have
none). Half maps and masks holding NaN or infinite values are refused.

Example::

    from noa_core.fourier import resolution
    curve = resolution.fsc(half1, half2, pixel_size=1.06)      # NumPy or noa arrays, 2-d or 3-d
    curve.values, curve.angstrom                                # FSC and the resolution of each shell
    curve.crossing(0.143).interpolated_angstrom                 # where it first falls below 0.143
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from noa_core import kernels  # a face: the shell sums' kernels (numba) load only for large maps
from noa_core.array import Array
from noa_core.compute import compute_path
from noa_core.errors import ParameterError, ShapeError, param
from noa_core.fourier import fft
from noa_core.images.intensity import check_finite

RULES = ("relion", "linear")
THRESHOLDS = (0.143, 0.5)  # the gold-standard criterion (Rosenthal & Henderson 2003) and the older 0.5
RELION_NO_RESOLUTION = 999.0  # the Å RELION writes for shell 0
TABLES = {"star": (".star", "text/plain"), "csv": (".csv", "text/csv"), "xml": (".xml", "application/xml")}
STAR_COLUMNS = ("rlnSpectralIndex", "rlnResolution", "rlnAngstromResolution", "rlnFourierShellCorrelation")
CSV_COLUMNS = ("shell", "resolution_per_angstrom", "resolution_angstrom", "fsc")
XML_AXES = ("Resolution (A-1)", "Correlation Coefficient")  # EMDB's FSC XML: xaxis and yaxis
# |f|^2 at Nyquist, with a margin that keeps samples exactly on it (0.3^2 + 0.4^2 rounds above 0.25)
NYQUIST_SQUARED = 0.25 + 1e-12
CHUNK_SAMPLES = 1 << 14  # samples of the half transforms summed at a time (whole rows): NumPy's buffers stay in cache
SUMS_WORK_PER_BYTE = 0.4  # what a byte of one half transform weighs against compute_path's threshold (the sums)
WAVE_PER_THREAD = 4  # chunks per thread summed in parallel before their partial sums are merged (kernels)

__all__ = ["RULES", "THRESHOLDS", "TABLES", "Crossing", "Curve", "fsc", "shell_sums", "table_text"]


@dataclass(frozen=True)
class Crossing:
    """Where a curve first falls below ``threshold``, searching from shell 1 (shell 0, the mean, says
    nothing about resolution).

    Attributes:
        threshold: the FSC value looked for.
        falls_below: whether some shell >= 1 is below it (False: the curve stays above up to the last shell).
        shell: RELION's answer (relion_postprocess's FINAL RESOLUTION loop): the last shell before the first
            one below the threshold; the last shell when none is below; None when shell 1 is already below.
        interpolated: the fractional shell where the straight line between that shell and the next (the
            first below) meets the threshold: ``s + (FSC(s) - t) / (FSC(s) - FSC(s + 1))``; None where the
            curve does not fall below, or already at shell 1.
        undefined_from: the first shell >= 1 where the FSC is undefined (NaN: a half map has no power there),
            or None. The search stops before it: ``shell`` is then at most the shell before it, and None (with
            ``falls_below`` False) where that is shell 0: no resolution, as for constant or empty maps.
    """

    threshold: float
    falls_below: bool
    shell: int | None
    interpolated: float | None
    undefined_from: int | None = None


@dataclass(frozen=True)
class Curve:
    """An FSC curve: ``values[s]`` for shells ``s = 0 .. len - 1``.

    Attributes:
        values: the FSC of each shell (float64; NaN where a half map has no power in the shell).
        rule: the shell rule, ``relion`` or ``linear``.
        size: the box size, in pixels, that shell ``s`` divides: the width (``relion``) or the smallest
            size (``linear``); shell ``s`` is ``s / (size * pixel_size)`` per Å.
        pixel_size: Å per pixel, or None when unknown (resolutions are then in shells only).
    """

    values: np.ndarray
    rule: str
    size: int
    pixel_size: float | None

    @property
    def shells(self) -> np.ndarray:
        return np.arange(self.values.size)

    @property
    def per_angstrom(self) -> np.ndarray | None:
        """Each shell's spatial frequency in 1/Å as RELION tabulates it (shell 0: 1/999), or None."""
        angstrom = self.angstrom
        return None if angstrom is None else 1.0 / angstrom

    @property
    def angstrom(self) -> np.ndarray | None:
        """Each shell's resolution ``size * pixel_size / s`` in Å (shell 0: RELION's 999), or None."""
        if self.pixel_size is None:
            return None
        shells = self.shells.astype(np.float64)
        out = np.full(shells.size, RELION_NO_RESOLUTION)
        np.divide(self.size * self.pixel_size, shells, out=out, where=shells > 0)
        return out

    def in_angstrom(self, shell: float | None) -> float | None:
        """The resolution of a (fractional) shell in Å; None for None, shell 0 or an unknown pixel size."""
        if shell is None or shell <= 0 or self.pixel_size is None:
            return None
        return self.size * self.pixel_size / shell

    @property
    def undefined_from(self) -> int | None:
        """The first shell >= 1 whose FSC is undefined (NaN), or None."""
        undefined = np.flatnonzero(np.isnan(self.values[1:]))
        return int(undefined[0]) + 1 if undefined.size else None

    def crossing(self, threshold: float) -> Crossing:
        """Where the curve first falls below ``threshold`` (see :class:`Crossing`)."""
        undefined_from = self.undefined_from
        values = self.values[:undefined_from]
        below = np.flatnonzero(values[1:] < threshold) + 1
        if below.size == 0:
            return Crossing(threshold, False, int(values.size - 1) if values.size > 1 else None, None, undefined_from)
        first = int(below[0])
        if first == 1:
            return Crossing(threshold, True, None, None, undefined_from)
        above, after = values[first - 1], values[first]
        return Crossing(threshold, True, first - 1, (first - 1) + float((above - threshold) / (above - after)),
                        undefined_from)


def fsc(half1: Array | np.ndarray, half2: Array | np.ndarray, *, mask: Array | np.ndarray | None = None,
        shells: str = "relion", pixel_size: float | None = None,
        names: Sequence[str] = ("half1", "half2", "mask")) -> Curve:
    """The FSC (3-d) or FRC (2-d) of two half maps, NumPy or noa arrays of the same shape: ``(D, H, W)`` or
    ``(H, W)``, or BDHW with one batch (``(1, D, H, W)``, ``(1, 1, H, W)``), of finite values.

    ``mask`` (same shape) multiplies both halves first; ``shells`` is the rule (:data:`RULES`, see the module);
    ``pixel_size`` (Å) gives the curve its resolutions; ``names``: what errors call the half maps and the mask
    (their files).

    Args:
        half1: the first half map (real, finite values; on any device).
        half2: the second half map, of the first's shape.
        mask: weights of the half maps' shape, multiplying both halves first.
        shells: the shell rule, 'relion' or 'linear'.
        pixel_size: the pixel size (Å) that gives the curve its resolutions.
        names: what messages call the half maps and the mask.

    Returns:
        The curve: the correlation of each shell.

    Raises:
        ParameterError: an unknown shell rule.
        ShapeError: maps that are not one 2-d image or 3-d volume, are complex, or differ in shape.
        ValueRangeError: NaN or infinite values.
    """
    if shells not in RULES:
        raise ParameterError(f"{shells!r} is not one of {', '.join(RULES)}", "shells")
    one, two = _map(half1, names[0]), _map(half2, names[1])
    if one.shape != two.shape:
        raise ShapeError(f"the half maps differ in shape: {one.shape} and {two.shape}")
    if mask is not None:
        weights = _map(mask, names[2])
        if weights.shape != one.shape:
            raise ShapeError(f"the mask's shape {weights.shape} is not the half maps' {one.shape}")
        one, two = _masked(one, weights), _masked(two, weights)
    return Curve(correlation(*shell_sums(one, two, shells)), shells, box_size(one.shape, shells), pixel_size)


def box_size(sizes: Sequence[int], rule: str) -> int:
    """The size shells are counted against: the width (``relion``), the smallest size (``linear``)."""
    return int(sizes[-1]) if rule == "relion" else int(min(sizes))


def shell_count(sizes: Sequence[int], rule: str) -> int:
    """Shells ``0 .. box_size // 2``."""
    return box_size(sizes, rule) // 2 + 1


def shell_sums(half1: np.ndarray, half2: np.ndarray, rule: str = "relion") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(sum Re(F1 conj F2), sum |F1|^2, sum |F2|^2)`` per shell (float64) of two real 2-d or 3-d arrays of
    one shape, from their r2c transforms (:mod:`noa_core.fourier.fft`, float32 or float64 as the data).

    NumPy sums, or one pass of the numba kernels of :mod:`noa_core.kernels.shells`: the path
    :func:`noa_core.compute.compute_path.for_size` gives for :data:`SUMS_WORK_PER_BYTE` x the bytes of one half
    transform (a pinned path, ``NOA_COMPUTE``, or numba loaded already win). Both add the products (in float64)
    in the same order: the same bits."""
    sizes = half1.shape
    axes = tuple(range(half1.ndim))
    # Rows (every leading axis flattened) of the half transforms: float32 maps give complex64, used as they are.
    spectra = [fft.r2c(half, axes).reshape(-1, sizes[-1] // 2 + 1) for half in (half1, half2)]
    rows, width = spectra[0].shape
    rows_per_chunk = max(1, CHUNK_SAMPLES // width)
    sums = np.zeros((3, shell_count(sizes, rule)))
    shells = _relion_shells(sizes) if rule == "relion" else _linear_shells(sizes)
    # Chosen here, not by the inputs' bytes: the sums are one pass over the half transforms, cheaper per byte than
    # the work compute_path's threshold was measured on. In fresh processes on 2 cores, 256^3 maps (64 MiB
    # transforms): NumPy's sums took 0.22 s CPU, the kernels' 0.03 s after 0.75 s of importing numba and loading
    # them (whole commands 1.5x faster on NumPy; at 384^3, 1.2x). One transform's bytes weighed at
    # SUMS_WORK_PER_BYTE put the switch near 240 MiB transforms (maps of about 400^3), where the two meet.
    with compute_path.for_size(int(spectra[0].nbytes * SUMS_WORK_PER_BYTE),
                               f"the FSC's shell sums ({SUMS_WORK_PER_BYTE} x the bytes of one half transform)"):
        numpy = compute_path.numpy_path()
    if numpy:
        _numpy_sums(spectra, shells, rule, rows_per_chunk, sums)
        return sums[0], sums[1], sums[2]
    import numba  # the kernels' path only

    kernel = kernels.shells.relion_sums if rule == "relion" else kernels.shells.linear_sums
    parallel = rows * width >= kernels.runtime.SERIAL_THRESHOLD
    # numba's thread count for this thread: a service worker's share of the cores
    wave = WAVE_PER_THREAD * (numba.get_num_threads() if parallel else 1)
    kernel(*spectra, *shells, rows_per_chunk, wave, sums, parallel)
    return sums[0], sums[1], sums[2]


def correlation(numerator: np.ndarray, power1: np.ndarray, power2: np.ndarray) -> np.ndarray:
    """``numerator / sqrt(power1 * power2)``, NaN where a power is zero."""
    denominator = np.sqrt(power1 * power2)
    return np.divide(numerator, denominator, out=np.full(numerator.shape, np.nan), where=denominator > 0)


def _relion_shells(sizes: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """RELION's shells of the half transform's rows: ``(row_r2, column_r2, table)``, the squared logical
    index of each row and of each column (integers), and the shell of each squared radius."""
    half = sizes[-1] // 2 + 1
    leading = [_relion_indices(n, half) ** 2 for n in sizes[:-1]]
    row_r2 = leading[0] if len(leading) == 1 else (leading[0][:, None] + leading[1][None, :]).reshape(-1)
    column_r2 = np.arange(half, dtype=np.int64) ** 2
    # round(sqrt(r2)) of the integer r2, once per value: RELION's ROUND of a positive number, floor(x + 0.5)
    table = np.floor(np.sqrt(np.arange(int(row_r2.max() + column_r2[-1]) + 1, dtype=np.float64)) + 0.5)
    return row_r2.astype(np.int64), column_r2, table.astype(np.int64)


def _linear_shells(sizes: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, float]:
    """The linear rule's frequencies of the half transform's rows: ``(first, second, column, scale,
    nyquist)``, ``|f|^2 = first[row] + (second[row] + column[j])`` (squared cycles per pixel; a 2-d image's
    ``first`` is 0), the radius' scale (the smallest size) and the largest ``|f|^2`` counted."""
    squares = [np.fft.fftfreq(n) ** 2 for n in sizes[:-1]]
    if len(squares) == 1:
        first, second = np.zeros_like(squares[0]), squares[0]
    else:
        first, second = np.repeat(squares[0], sizes[1]), np.tile(squares[1], sizes[0])
    return first, second, np.fft.rfftfreq(sizes[-1]) ** 2, float(min(sizes)), NYQUIST_SQUARED


def _numpy_sums(spectra: list[np.ndarray], shells: tuple, rule: str, rows_per_chunk: int, sums: np.ndarray) -> None:
    """Add the per-shell sums of the rows ``spectra`` to ``sums`` with NumPy, chunk by chunk (rows
    ``start .. stop``): per chunk and row of ``sums``, a ``bincount`` of each product (the linear rule:
    that of the lower shells, then that of the upper ones). Buffers of one chunk are reused: they stay in
    the cache, and no chunk allocates (each allocation would map fresh pages)."""
    rows, width = spectra[0].shape
    samples = rows_per_chunk * width
    parts = np.empty((2, samples), np.complex128)  # both chunks in float64: exact products of float32 parts
    products = np.empty((4, samples))  # Re(F1 conj F2), |F1|^2, |F2|^2, and a scratch row
    index = np.empty(samples, np.int64)
    count = sums.shape[1]
    for start in range(0, rows, rows_per_chunk):
        stop = min(rows, start + rows_per_chunk)
        n = (stop - start) * width
        one, two = parts[0, :n], parts[1, :n]
        np.copyto(one.reshape(-1, width), spectra[0][start:stop])
        np.copyto(two.reshape(-1, width), spectra[1][start:stop])
        cross, power1, power2, scratch = (row[:n] for row in products)
        # re * re + im * im, in the kernels' order
        for out, a, b in ((cross, one, two), (power1, one, one), (power2, two, two)):
            np.multiply(a.real, b.real, out=out)
            np.add(out, np.multiply(a.imag, b.imag, out=scratch), out=out)
        if rule == "relion":
            row_r2, column_r2, table = shells
            np.take(table, (row_r2[start:stop, None] + column_r2).reshape(-1), out=index[:n])
            for row, product in zip(sums, (cross, power1, power2), strict=True):
                row += np.bincount(index[:n], product, count)[:count]
            continue
        first, second, column, scale, nyquist = shells
        r2 = (first[start:stop, None] + (second[start:stop, None] + column)).reshape(-1)
        inside = np.flatnonzero(r2 <= nyquist)
        radius = np.sqrt(r2[inside]) * scale
        low = np.floor(radius)
        fraction = radius - low
        low = low.astype(np.intp)
        high = np.minimum(low + 1, count - 1)
        keep = 1.0 - fraction
        for row, product in zip(sums, (cross, power1, power2), strict=True):
            product = product[inside]
            row += np.bincount(low, product * keep, count)[:count]
            row += np.bincount(high, product * fraction, count)[:count]


def _relion_indices(n: int, half: int) -> np.ndarray:
    """FOR_ALL_ELEMENTS_IN_FFTW_TRANSFORM's logical index of a depth or height axis of ``n`` samples:
    ``i`` if ``i < half`` (XSIZE of the half transform) else ``i - n``."""
    index = np.arange(n)
    return np.where(index < half, index, index - n)


def _map(values: Any, what: str) -> np.ndarray:
    """A 2-d or 3-d real map as NumPy float32 (float64 stays float64)."""
    if isinstance(values, Array):
        values = values.to("cpu").numpy()
    values = np.asarray(values)
    if values.ndim == 4:
        if values.shape[0] != 1:
            raise ShapeError(f"{what}: a stack of {values.shape[0]} is not one map; give one image or volume")
        values = values[0] if values.shape[1] > 1 else values[0, 0]
    if values.ndim not in (2, 3) or min(values.shape) < 2:
        raise ShapeError(f"{what}: shape {values.shape} is not a 2-d image or a 3-d volume")
    if values.dtype.kind == "c":
        raise ShapeError(f"{what}: the FSC is of real maps; these are {values.dtype} values")
    check_finite(values, what)  # one NaN would make every shell NaN
    return values if values.dtype == np.float64 else values.astype(np.float32, copy=False)


def _masked(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return np.multiply(values, mask, dtype=np.result_type(values, np.float32))


# -- tables ------------------------------------------------------------------------------------------------


def relion_number(value: float) -> str:
    """A double as RELION's MetaDataTable writes it (src/metadata_table.cpp): ``%12.6f``, or ``%12.6e`` for
    magnitudes below 0.001 (not 0) or above 100000; one digit fewer for negative values. An undefined FSC (0 / 0)
    prints as RELION's does on x86, whose 0 / 0 is a negative NaN: ``-nan``."""
    if np.isnan(value):
        return f"{'-nan':>12}"
    digits = 5 if value < 0 else 6
    kind = "e" if (0 < abs(value) < 0.001) or abs(value) > 100000 else "f"
    return f"{value:12.{digits}{kind}}"


def table_text(curve: Curve, kind: str, title: str = "FSC") -> str:
    """The curve as a table file: ``star`` (RELION's ``data_fsc`` block, as relion_image_handler --fsc
    prints it), ``csv`` (:data:`CSV_COLUMNS`) or ``xml`` (EMDB's FSC XML: spatial frequency in 1/Å, shell 0
    at 0, and the FSC; needs the pixel size). Without a pixel size, STAR and CSV have shells and FSC only."""
    shells, values = curve.shells, curve.values
    resolved = curve.angstrom is not None
    # per shell, in 1/Å and in Å: read only when resolved (both None without a pixel size)
    per_angstrom, angstrom = cast(np.ndarray, curve.per_angstrom), cast(np.ndarray, curve.angstrom)
    if kind == "xml":
        if not resolved:
            raise ParameterError(f"EMDB's FSC XML is in 1/Å: the pixel size is unknown (give {param('angpix')})",
                                 "output")
        from xml.sax.saxutils import quoteattr

        frequency = shells / (curve.size * cast(float, curve.pixel_size))
        points = "".join(f"  <coordinate>\n    <x>{x:.6f}</x>\n    <y>{y:.6f}</y>\n  </coordinate>\n"
                         for x, y in zip(frequency, values, strict=True))
        return (f'<?xml version="1.0" encoding="UTF-8"?>\n<fsc title={quoteattr(title)} '
                f'xaxis="{XML_AXES[0]}" yaxis="{XML_AXES[1]}">\n{points}</fsc>\n')
    if kind == "csv":
        header = CSV_COLUMNS if resolved else (CSV_COLUMNS[0], CSV_COLUMNS[3])
        rows = (",".join([str(s), *((f"{per_angstrom[s]:.9g}", f"{angstrom[s]:.9g}") if resolved else ()),
                          f"{values[s]:.9g}"]) for s in shells)
        return ",".join(header) + "\n" + "".join(row + "\n" for row in rows)
    if kind != "star":
        raise ParameterError(f"{kind!r} is not one of {', '.join(TABLES)}", "output")
    columns = STAR_COLUMNS if resolved else (STAR_COLUMNS[0], STAR_COLUMNS[3])
    head = "\n# version 30001\n\ndata_fsc\n\nloop_ \n" + "".join(f"_{c} #{n} \n" for n, c in enumerate(columns, 1))
    rows = (" ".join([f"{s:12d}", *((relion_number(per_angstrom[s]), relion_number(angstrom[s])) if resolved else ()),
                      relion_number(values[s])]) + " \n" for s in shells)
    return head + "".join(rows) + " \n"


def table_kind(path: str) -> str | None:
    """The table a file name asks for by its extension (:data:`TABLES`), or None."""
    lower = str(path).lower()
    return next((kind for kind, (ext, _) in TABLES.items() if lower.endswith(ext)), None)

"""TIFF files (plain, ImageJ hyperstacks, OME, tifffile "shaped", pyramids) as BDHW arrays.

Reading maps tifffile's series axes onto BDHW: Z -> depth; I, Q, T -> batch (C too when nothing
else is batched); Y, X -> height, width. Axes of size 1 carry no data and are dropped. Channels that
cannot be the batch (RGB samples 'S', a C axis beside T or Q) are read one at a time (``channel``);
any other axis of size > 1 is refused with an error saying why, rather than guessed. A pyramid reads
level 0 unless ``level`` names another. Compressed and packed data are decoded by tifffile with
imagecodecs; tifffile's log messages become notices and its errors one line in the user's words.

Pixel sizes: XResolution/YResolution belong to the page's columns and rows as stored (the axes named X
and Y, or Y and X where sections are stored transposed), in the unit ImageJ or tifffile metadata name, else in
ResolutionUnit; ImageJ ``spacing`` is the Z step; OME ``PhysicalSize*`` with
their units win. Tags that name no length (absent, ResolutionUnit none, 72 dpi) leave it unknown (0).

Writing makes an ImageJ hyperstack (axes 'TZYX' without the size-1 ones) for uint8, uint16 and
float32 images of at least 2 x 2 pixels in C order, otherwise a tifffile shaped file whose metadata
records the axes ('TZXY' for column-major sections). An unknown pixel size writes no unit or spacing.

:data:`FORMAT` is the TIFF :class:`~noa_core.io.protocol.ImageFormat`.
"""

from __future__ import annotations

import codecs
import contextlib
import logging
import lzma
import math
import os
import re
import xml.etree.ElementTree as ElementTree
import zlib
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

import numpy as np
from numpy.lib.stride_tricks import as_strided

from noa_core.array import asarray, layout
from noa_core.array.layout import Shape4
from noa_core.errors import (
    AxisMappingError,
    CorruptFileError,
    FileFormatError,
    HeaderError,
    LimitError,
    SizeError,
    TruncatedFileError,
    WriteDTypeError,
    param,
)
from noa_core.io import mapped, remote
from noa_core.io.compression import opened_input, size_of
from noa_core.io.metadata import HeaderStatistics, Metadata, Triple, angstroms_per_unit
from noa_core.io.protocol import Created, OutputSpec, Probe, ReadRequest
from noa_core.io.read_options import TiffReadOptions
from noa_core.limits import check_input_size

if TYPE_CHECKING:
    import tifffile

    from noa_core.array import Array

EXTENSIONS = (".tif", ".tiff")  # '.ome.tif' ends in '.tif'
_MAGIC = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")  # classic and BigTIFF, either byte order

_BATCH_AXES = "IQT"
_SPATIAL = {"Z": 1, "Y": 2, "X": 3}
_CHANNEL_AXES = "CS"  # channels (C) and samples per pixel (S, RGB)
_RESOLUTION_UNITS = {2: "inch", 3: "cm", 4: "mm", 5: "µm"}  # ResolutionUnit (4 and 5: tifffile's extension)
_DISPLAY_DPI = 72.0
_NO_UNIT = ("", "pixel", "pixels", "none")
# Compressed pages cannot expand by more than this (deflate's limit is about 1032:1): a larger
# claim is a corrupt header, refused before tifffile allocates anything.
_MAX_EXPANSION = 1100
IMAGEJ_DTYPES = ("uint8", "uint16", "float32")


def _unescape(text: str) -> str:
    """ImageJ writes non-ASCII units as '\\u00B5m'."""
    return codecs.decode(text, "unicode_escape") if "\\u" in text else text


def _escape(text: str) -> str:
    return "".join(c if ord(c) < 128 else f"\\u{ord(c):04X}" for c in text)


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


def _select_channel(path: Path, data: np.ndarray, axes: str, channel: int | None) -> tuple[np.ndarray, str]:
    """The data and axes with channel ``channel`` taken out of the C or S axis (None: all channels kept,
    unless they are samples per pixel, which cannot map to BDHW)."""
    present = [i for i, a in enumerate(axes) if a in _CHANNEL_AXES and data.shape[i] > 1]
    if channel is None:
        for i in present:
            if axes[i] == "S":
                raise AxisMappingError(f"{path}: axes {axes}: {data.shape[i]} samples per pixel (RGB or interleaved "
                                       f"channels) cannot map to BDHW; {_choose_one(data.shape[i])}")
        return data, axes
    if len(present) > 1:
        raise AxisMappingError(f"{path}: axes {axes}: both C and samples S hold channels; channel= picks "
                               "from one axis of channels only")
    count = data.shape[present[0]] if present else 1
    if not 0 <= channel < count:
        raise HeaderError(f"{path}: channel: {channel} is not in 0..{count - 1}")
    if not present:
        return data, axes
    i = present[0]
    return data[(slice(None),) * i + (channel,)], axes[:i] + axes[i + 1:]


def _choose_one(count: int) -> str:
    """How to read one of ``count`` channels, in the words of every door."""
    return f"read one with {param('channel', 'N')}, N in 0..{count - 1}"


def map_axes(path: Path, data: np.ndarray, axes: str, channel: int | None = None) -> tuple[np.ndarray, str]:
    """A 4-d BDHW view of ``data`` whose dimensions are named by ``axes`` (channel ``channel`` only, when
    given), and the mapping in words."""
    data, axes = _select_channel(path, data, axes, channel)
    keep = [i for i, n in enumerate(data.shape) if n > 1]
    data = data[tuple(slice(None) if i in keep else 0 for i in range(data.ndim))]
    names = "".join(axes[i] for i in keep)
    for letter in names:
        if letter not in _SPATIAL and letter not in _BATCH_AXES + "C":
            raise AxisMappingError(f"{path}: axes {axes}: axis {letter!r} has no BDHW counterpart "
                                   "(only Z, Y, X and batch-like I, Q, T, C are mapped)")
    batch = [i for i, a in enumerate(names) if a in _BATCH_AXES]
    channel_axis = names.find("C")
    if channel_axis >= 0:
        if batch:
            count = data.shape[channel_axis]
            raise AxisMappingError(f"{path}: axes {axes}: channel axis C ({count} channels) and batch axis "
                                   f"{names[batch[0]]} are both larger than 1 and BDHW has one batch axis; "
                                   f"{_choose_one(count)}")
        batch = [channel_axis]
    if batch and batch != list(range(batch[0], batch[0] + len(batch))):
        raise AxisMappingError(f"{path}: axes {axes}: batch-like axes {''.join(names[i] for i in batch)} "
                               "are not adjacent, so they cannot merge into one batch axis")
    order = batch + [names.index(a) for a in "ZYX" if a in names]
    data = data.transpose(order)
    if len(batch) > 1:  # adjacent batch axes merge into one; refused if that would need a copy
        try:
            data = data.reshape((-1,) + data.shape[len(batch):], copy=False)
        except ValueError:
            raise AxisMappingError(f"{path}: axes {axes}: batch-like axes cannot merge without a copy") from None
    present = ("B" if batch else "") + "".join(a for a in "ZYX" if a in names)
    full = [i for i, a in enumerate("BZYX") if a not in present]
    data = np.expand_dims(data, tuple(full)) if full else data
    words = ", ".join(f"{bdhw}={src}" for bdhw, src in zip(
        "BDHW", ("".join(names[i] for i in batch) or "-",) + tuple(a if a in names else "-" for a in "ZYX")))
    return data, f"{axes} -> {words}"


# -- pixel sizes: per axis letter (Z, Y, X), each with its unit, then in one unit ------------------

Sizes = dict[str, tuple[float, str]]


def _ome_sizes(tif: tifffile.TiffFile, series: int) -> Sizes:
    """OME ``PhysicalSize{X,Y,Z}`` of image ``series`` with their units (OME's default unit is µm)."""
    root = ElementTree.fromstring(cast(str, tif.ome_metadata))  # an OME file's
    images = [e for e in root.iter() if e.tag.rsplit("}", 1)[-1] == "Image"]
    pixels = next((e for e in images[series] if e.tag.rsplit("}", 1)[-1] == "Pixels"), None) \
        if series < len(images) else None
    if pixels is None:
        return {}
    sizes = {a: (float(pixels.get(f"PhysicalSize{a}", 0)), pixels.get(f"PhysicalSize{a}Unit", "µm")) for a in "ZYX"}
    return {a: size for a, size in sizes.items() if size[0] > 0}


def _extra_metadata(tif: tifffile.TiffFile) -> dict:
    """The ImageJ or tifffile "shaped" metadata (spacing, unit, ...), or an empty dict."""
    if tif.is_imagej:
        return tif.imagej_metadata or {}
    if tif.is_shaped and tif.shaped_metadata:
        return tif.shaped_metadata[0]
    return {}


def _metadata_unit(extra: dict) -> str | None:
    """The length unit ImageJ or tifffile metadata name, None when they name none ('pixel' is none)."""
    unit = extra.get("unit")
    if not isinstance(unit, str) or unit.strip().lower() in _NO_UNIT:
        return None
    return _unescape(unit).strip()


def _page_axes(axes: str) -> tuple[str, str]:
    """The axis letters of a page's columns and rows as stored (samples per pixel aside): 'X', 'Y' for a
    plain page, 'Y', 'X' for the transposed sections of a column-major (shaped 'ZXY') file."""
    return ("Y", "X") if axes.rstrip("S").endswith("XY") else ("X", "Y")


def _resolution_sizes(path: Path, page, columns_rows: tuple[str, str], unit: str | None, notices: list[str]) -> Sizes:
    """The pixel sizes XResolution and YResolution (pixels per unit) give to the page's columns and rows
    as stored (``columns_rows``: the TIFF standard gives XResolution to ImageWidth), in ``unit`` (from
    ImageJ or tifffile metadata) or else in ResolutionUnit; none, with a notice, when they name no
    length (tags absent, ResolutionUnit none, or 72 dpi: many writers' default, a screen's resolution)."""
    per_unit = {letter: value.value[0] / value.value[1]
                for tag, letter in zip(("XResolution", "YResolution"), columns_rows)
                if (value := page.tags.get(tag)) is not None and value.value[0] > 0 and value.value[1] > 0}
    unknown = None
    if not per_unit:
        unknown = "the file has no XResolution/YResolution tags"
    elif unit is None:
        unit_tag = page.tags.get("ResolutionUnit")
        code = int(unit_tag.value) if unit_tag is not None else 2  # TIFF's default unit is the inch
        unit = _RESOLUTION_UNITS.get(code)
        if unit is None:
            unknown = f"XResolution/YResolution have no length unit (ResolutionUnit {'none' if code == 1 else code})"
        elif code == 2 and set(per_unit.values()) == {_DISPLAY_DPI}:
            unknown = "XResolution/YResolution say 72 dpi, many writers' default, not a pixel size"
    if unknown is not None:
        notices.append(f"{path}: pixel size unknown: {unknown}")
        return {}
    assert unit is not None  # given, or found above (else unknown says why not)
    return {letter: (1.0 / value, unit) for letter, value in per_unit.items()}


def _in_one_unit(path: Path, sizes: Sizes, notices: list[str]) -> tuple[Triple, str | None]:
    """Pixel size per Z, Y, X in the unit of the first axis that has one (X first); an axis whose unit
    cannot be converted to it stays unknown, with a notice."""
    if not sizes:
        return (0.0, 0.0, 0.0), None
    unit = next(sizes[a][1] for a in "XYZ" if a in sizes)
    scale = angstroms_per_unit(unit)
    converted = {}
    for letter, (value, own_unit) in sizes.items():
        own_scale = angstroms_per_unit(own_unit)
        if own_unit == unit:
            converted[letter] = value
        elif scale and own_scale:
            converted[letter] = value * own_scale / scale
        else:
            notices.append(f"{path}: pixel size of {letter} unknown: its unit {own_unit!r} is not comparable "
                           f"with {unit!r}")
    return tuple(converted.get(a, 0.0) for a in "ZYX"), unit


def _pixel_size(path: Path, tif: tifffile.TiffFile, index: int, level, notices: list[str]):
    """Pixel size per D, H, W and its unit. XResolution and YResolution belong to the page's columns and
    rows as stored (X and Y, or Y and X in a column-major file); ImageJ or tifffile ``spacing`` is the Z step; OME
    ``PhysicalSize*`` win where
    present. A pyramid level's sizes are level 0's scaled by the level's shape."""
    series = tif.series[index]
    extra = _extra_metadata(tif)
    unit = _metadata_unit(extra)
    sizes = _ome_sizes(tif, index) if tif.is_ome else {}
    if not {"X", "Y"} <= sizes.keys():
        sizes = {**_resolution_sizes(path, series.keyframe, _page_axes(series.axes), unit, notices), **sizes}
    spacing_unit = unit or next((u for _, u in sizes.values()), None)
    if "Z" not in sizes and float(extra.get("spacing", 0)) > 0 and spacing_unit is not None:
        sizes["Z"] = (float(extra["spacing"]), spacing_unit)
    sizes = {a: (v * _level_scale(series, level, a), u) for a, (v, u) in sizes.items()}
    return _in_one_unit(path, sizes, notices)


def _origin(extra: dict, pixel: tuple[float, float, float], unit: str | None) -> tuple[float, float, float]:
    """The origin per D, H, W in ``unit`` (the pixel sizes'): noa's ``origin`` key (Z,Y,X in the metadata's
    unit), else ImageJ's ``zorigin``, ``yorigin``, ``xorigin`` (in pixels, where the pixel size is known)."""
    given = extra.get("origin")
    if given is not None:
        try:
            values = [float(v) for v in (given.split(",") if isinstance(given, str) else given)]
        except (TypeError, ValueError):
            values = []
        if len(values) == 3 and all(math.isfinite(v) for v in values):
            own, to = angstroms_per_unit(_metadata_unit(extra) or unit or "Å"), angstroms_per_unit(unit or "Å")
            return tuple(v * own / to if own and to else v for v in values)  # type: ignore[return-value]
    origin = []
    for letter, size in zip("zyx", pixel):
        value = extra.get(f"{letter}origin")
        origin.append(float(value) * size if isinstance(value, (int, float)) and math.isfinite(value) else 0.0)
    return tuple(origin)  # type: ignore[return-value]


def _level_scale(series, level, letter: str) -> float:
    """How many level-0 pixels one pixel of pyramid ``level`` spans along axis ``letter``."""
    i = series.axes.find(letter)
    return series.shape[i] / level.shape[i] if i >= 0 else 1.0


def _declared_bytes(path: Path, series, file_size: int) -> None:
    """Refuse a series whose size is more than the file can hold, before tifffile allocates it. Sizes
    count stored bits: 1-bit and 12-bit samples are packed, so they take less than their NumPy type."""
    dtype = np.dtype(series.dtype)
    nbytes = -(-int(np.prod(series.shape, dtype=object)) * _stored_bits(series) // 8)
    uncompressed = all(getattr(p, "compression", 1) == 1 for p in series.pages[:1] if p is not None)
    limit = file_size if uncompressed else file_size * _MAX_EXPANSION
    if nbytes > limit:
        error = TruncatedFileError if uncompressed else SizeError
        raise error(f"{path}: ImageWidth/ImageLength/series shape: {series.shape} {dtype.name} is {nbytes} bytes, "
                    f"more than the {file_size}-byte file can hold")


def _check_ome_sizes(path: Path, tif: tifffile.TiffFile, file_size: int) -> None:
    """Refuse OME sizes that the file cannot hold before tifffile sizes its series by them (tifffile lists
    every plane an OME image claims, so ``SizeX="2000000000"`` alone takes gigabytes)."""
    try:
        root = ElementTree.fromstring(cast(str, tif.ome_metadata))  # an OME file's
    except ElementTree.ParseError as exc:
        raise CorruptFileError(f"{path}: OME metadata: not well-formed XML ({exc})") from None
    for number, pixels in enumerate(e for e in root.iter() if e.tag.rsplit("}", 1)[-1] == "Pixels"):
        sizes = {}
        for axis in "XYZCT":
            text = pixels.get(f"Size{axis}", "1")
            if not text.isdigit() or int(text) < 1:
                raise HeaderError(f"{path}: OME metadata: image {number} Size{axis}={text!r} is not a positive integer")
            sizes[axis] = int(text)
        if math.prod(sizes.values()) > file_size * _MAX_EXPANSION:
            claimed = " x ".join(f"Size{a}={n}" for a, n in sizes.items())
            raise SizeError(f"{path}: OME metadata: image {number} claims {claimed} pixels, more than the "
                            f"{file_size}-byte file can hold")


def _check_segments(path: Path, file: BinaryIO, series, file_size: int) -> None:
    """Refuse strips or tiles that end past the file, or that decode to more than a strip or tile of the
    page holds, before tifffile reads them: it would first allocate whatever they claim or expand to."""
    for number, page in enumerate(series.pages):
        if page is None:
            continue
        decoder = _BOUNDED_DECODERS.get(int(page.compression))
        limit = math.prod(page.chunks) * page.dtype.itemsize if page.dtype is not None else 0
        for offset, count in zip(page.dataoffsets, page.databytecounts):
            if offset + count > file_size:
                raise TruncatedFileError(f"{path}: StripOffsets/StripByteCounts (page {number}): a segment of {count} "
                                         f"bytes at offset {offset} ends past the {file_size}-byte file")
            if decoder is not None and _expands_past(decoder, _read_at(file, count, offset), limit):
                raise SizeError(f"{path}: StripByteCounts (page {number}): the {count}-byte segment at offset "
                                f"{offset} decodes to more than the {limit} bytes a segment of the page holds")


def _read_at(file: BinaryIO, count: int, offset: int) -> bytes:
    """``count`` bytes at ``offset`` (fewer at the end); a remote file has no descriptor to ``pread``."""
    if isinstance(file, remote.RemoteFile):
        file.seek(offset)
        return file.read(count)
    return os.pread(file.fileno(), count, offset)


def _expands_past(make_decoder, data: bytes, limit: int) -> bool:
    """Whether ``data`` decodes to more than ``limit`` bytes (decoding at most one byte more; a damaged
    segment is left for tifffile to report)."""
    try:
        return len(make_decoder().decompress(data, limit + 1)) > limit
    except (zlib.error, lzma.LZMAError):
        return False


# TIFF compression code -> a streaming decoder whose output can be bounded (deflate, LZMA)
_BOUNDED_DECODERS = {8: zlib.decompressobj, 32946: zlib.decompressobj, 34925: lzma.LZMADecompressor}


def _stored_bits(series) -> int:
    """Bits per stored sample (1 for bilevel, 12 for packed 12-bit, else the NumPy type's)."""
    return int(series.keyframe.bitspersample)


def _load(path: Path, tif: tifffile.TiffFile, file: BinaryIO, series, file_size: int,
          request: ReadRequest[TiffReadOptions]) -> np.ndarray:
    """The series data in its own axes order; memory-mapped read-only when it is stored plainly (remote: fetched
    as the tiles ask, or whole to a temporary file)."""
    dtype = np.dtype(series.dtype).newbyteorder(tif.byteorder)
    nbytes = int(np.prod(series.shape, dtype=object)) * dtype.itemsize
    offset = series.dataoffset
    unpacked = _stored_bits(series) == dtype.itemsize * 8
    if request.mmap and offset is not None and unpacked and dtype.isnative and offset + nbytes <= file_size:
        flat = mapped.map_file(path, offset, dtype, nbytes // dtype.itemsize, request.tiles, file)
        return flat.reshape(series.shape)
    _check_segments(path, file, series, file_size)
    data = series.asarray()
    return data if data.dtype.isnative else data.astype(data.dtype.newbyteorder("="))


def _layout_only(tif: tifffile.TiffFile, file: BinaryIO, series, file_size: int) -> np.ndarray:
    """A stand-in for the series data with the shape and C strides a read gives, over a single element:
    only its shape and strides are ever looked at, never its values."""
    dtype = np.dtype(series.dtype)
    strides: list[int] = []
    step = dtype.itemsize
    for n in reversed(series.shape):
        strides.insert(0, step)
        step *= n
    return as_strided(np.zeros(1, dtype), series.shape, strides, writeable=False)


Take = Callable[["tifffile.TiffFile", BinaryIO, Any, int], np.ndarray]


def _parsed(path: Path, request: ReadRequest[TiffReadOptions], take: Take) -> tuple[np.ndarray, Metadata]:
    """Open the series, level and channel of ``path`` that ``request`` asks for and hand the series to ``take``
    (the data, or a layout-only stand-in): the BDHW view of what ``take`` returns, and the metadata."""
    import tifffile  # here, not at the top: an MRC-only command need not load it (50 ms)

    notices: list[str] = []
    try:
        with _library_messages(path, notices), opened_input(path, request.opened) as file, \
                tifffile.TiffFile(file, name=path.name) as tif:
            file_size = size_of(file)
            if tif.is_ome:
                _check_ome_sizes(path, tif, file_size)
            index, series = _choose_series(path, tif, request.options.series, notices)
            level = _choose_level(path, series, request.options.level, notices)
            _declared_bytes(path, level, file_size)
            bdhw, words = map_axes(path, take(tif, file, level, file_size), level.axes, request.options.channel)
            pixel, unit = _pixel_size(path, tif, index, level, notices)
            origin = _origin(_extra_metadata(tif), pixel, unit)
    except (FileFormatError, LimitError):
        raise
    except Exception as exc:  # tifffile raises many types on damaged files; each becomes one error
        raise CorruptFileError(f"{path}: TIFF structure: {_in_words(exc)}") from None
    shape = layout.as_shape4(bdhw.shape)
    order = layout.order_of(shape, layout.as_strides4(tuple(s // bdhw.itemsize for s in bdhw.strides)))
    if order == "F":
        notices.append(f"{path}: stored column-major (axes {level.axes}): readers that ignore the axes show "
                       "the transpose")
    metadata = Metadata(format=FORMAT.name, shape=shape, dtype=np.dtype(level.dtype).name, pixel_size=pixel,
                        origin=origin, unit=unit, order=order, axes=words, path=str(path), series=index,
                        notices=notices)
    return bdhw, metadata


def _choose_series(path: Path, tif: tifffile.TiffFile, series: int | None, notices: list[str]):
    """``(index, series)`` asked for (the first by default, with a notice when there are more)."""
    count = len(tif.series)
    if count == 0:
        raise CorruptFileError(f"{path}: series: the TIFF holds no image")
    index = 0 if series is None else int(series)
    if not 0 <= index < count:
        raise HeaderError(f"{path}: series: {series} is not in 0..{count - 1}")
    chosen = tif.series[index]
    if series is None and count > 1:
        notices.append(f"{path}: {count} series; read series 0 ({chosen.axes} {chosen.shape}); "
                       f"give {param('series', 'N')} (0..{count - 1}) to read another")
    return index, chosen


def _choose_level(path: Path, series, level: int | None, notices: list[str]):
    """The pyramid level asked for (level 0, the full resolution, by default, with a notice when there are more)."""
    count = len(series.levels)
    index = 0 if level is None else int(level)
    if not 0 <= index < count:
        raise HeaderError(f"{path}: level: {level} is not in 0..{count - 1} (pyramid levels of the series)")
    if level is None and count > 1:
        notices.append(f"{path}: {count} pyramid levels; read level 0 ({series.shape}); "
                       f"give {param('level', 'N')} (0..{count - 1}) to read another")
    return series.levels[index]


class _ToNotices(logging.Filter):
    """On tifffile's logger: while a read collects them, its messages become that read's notices instead of
    lines on stderr (per thread or task: the service reads files side by side). tifffile logs while it
    parses, in the reading thread; its decoding threads raise, and their errors reach the read."""

    def filter(self, record: logging.LogRecord) -> bool:
        collected = _COLLECTING.get()
        if collected is None:
            return True
        path, notices = collected
        notices.append(f"{path}: {_library_words(record.getMessage())}")
        return False


_COLLECTING: ContextVar[tuple[Path, list[str]] | None] = ContextVar("tiff_notices", default=None)
logging.getLogger("tifffile").addFilter(_ToNotices())


@contextlib.contextmanager
def _library_messages(path: Path, notices: list[str]):
    """tifffile's log messages about ``path`` go to ``notices`` while the block runs."""
    token = _COLLECTING.set((path, notices))
    try:
        yield
    finally:
        _COLLECTING.reset(token)


# tifffile's words -> the user's: '<COMPRESSION.LZW: 5> requires the 'imagecodecs' package' -> 'LZW
# compression needs imagecodecs (pip install imagecodecs)'.
_REWORDINGS = (
    (re.compile(r"<(COMPRESSION|PREDICTOR)\.(\w+): \d+> requires the '(\w+)' package"),
     lambda m: f"{m[2]} {m[1].lower()} needs {m[3]} (pip install {m[3]})"),
    (re.compile(r"No module named '(\w+)'"), lambda m: f"this file needs {m[1]} (pip install {m[1]})"),
    (re.compile(r"<(COMPRESSION|PREDICTOR)\.(\w+): \d+> not (supported|implemented)"),
     lambda m: f"{m[2]} {m[1].lower()} is not supported"),
    (re.compile(r"(\d+) is not a known (COMPRESSION|PREDICTOR)"),
     lambda m: f"{m[2].lower()} code {m[1]} is not a TIFF {m[2].lower()} noa knows"),
    (re.compile(r"<tifffile\.TiffPage (\d+) @\d+>"), lambda m: f"page {m[1]}:"),
    (re.compile(r"<tifffile\.\w+ @\d+> ?"), lambda m: ""),
    (re.compile(r"<(\w+)\.(\w+): (\d+)>"), lambda m: f"{m[1].lower()} {m[2]} ({m[3]})"),
)


def _library_words(text: str) -> str:
    """One line of a library's message in the user's words: no exception or enum class names."""
    line = text.strip().splitlines()[0] if text.strip() else "unreadable"
    for pattern, words in _REWORDINGS:
        line = pattern.sub(words, line)
    return line


def _in_words(exc: BaseException) -> str:
    """What an exception from tifffile or a codec says about the file, in the user's words."""
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return _library_words(text or "the file structure cannot be parsed")


def _read(path: Path, request: ReadRequest[TiffReadOptions]):
    """Read one series of a TIFF file: ``(Array, Metadata)``; an image over this context's voxel limit is refused
    from the TIFF structure, before its data are mapped or decoded."""

    def within_limit(tif: tifffile.TiffFile, file: BinaryIO, series, file_size: int) -> np.ndarray:
        image, _ = map_axes(path, _layout_only(tif, file, series, file_size), series.axes, request.options.channel)
        check_input_size(layout.as_shape4(image.shape), str(path))
        return _load(path, tif, file, series, file_size, request)

    bdhw, metadata = _parsed(path, request, within_limit)
    return asarray(bdhw), metadata


def _probe(path: Path, request: ReadRequest[TiffReadOptions]) -> Probe:
    """What :func:`_read` gives, from the TIFF structure alone."""
    view, metadata = _parsed(path, request, _layout_only)
    strides = layout.as_strides4(tuple(s // view.itemsize for s in view.strides))
    return Probe(metadata.shape, strides, np.dtype(view.dtype), metadata)


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


def file_axes(shape: Shape4, order: str) -> tuple[tuple[int, ...], str]:
    """Stored shape and axes letters: size-1 batch and depth omitted; F stores X before Y."""
    b, d, h, w = shape
    dims = [(b, "T"), (d, "Z")] + ([(w, "X"), (h, "Y")] if order == "F" else [(h, "Y"), (w, "X")])
    kept = [(n, a) for i, (n, a) in enumerate(dims) if i >= 2 or n > 1]
    return tuple(n for n, _ in kept), "".join(a for _, a in kept)


def check_dtype(dtype: np.dtype, path: Path) -> None:
    if dtype.kind not in "iufc" or dtype.subdtype is not None:
        raise WriteDTypeError(f"{path}: SampleFormat: dtype {dtype} cannot be stored in TIFF; pass dtype= a "
                              "numeric type (uint8, uint16, float32, ...)")


def create_file(path: Path, shape: Shape4, dtype: np.dtype, order: str, metadata: Metadata | None) -> int:
    """Write the TIFF structure of an (empty) output; return the byte offset of its contiguous data."""
    import tifffile

    stored, axes = file_axes(shape, order)
    # tifffile cannot read back ImageJ metadata of 1-pixel-wide or -high images: shaped files then.
    imagej = dtype.name in IMAGEJ_DTYPES and order == "C" and min(shape[2:]) > 1
    info: dict = {"axes": axes}
    written = tifffile.imwrite(path, shape=stored, dtype=dtype, imagej=imagej, returnoffset=True,
                               photometric="minisblack", **_calibration(metadata, info, imagej, order))
    offset, _ = cast(tuple[int, int], written)  # returnoffset: (offset, size)
    return offset


def _calibration(metadata: Metadata | None, info: dict, imagej: bool, order: str) -> dict[str, Any]:
    """tifffile's arguments recording the pixel size: ``spacing`` (Z) and ``unit`` in the metadata ``info``,
    XResolution for the page's columns and YResolution for its rows as stored (the TIFF standard; Fiji and
    every reader that ignores the shaped axes see square pixels the right way round): X and Y, or Y and X
    for the transposed sections of an F-ordered array. A pixel size nobody gave
    (0) writes nothing, so it reads back unknown: tifffile's default XResolution/YResolution 1 with
    ResolutionUnit none name no length, and no unit is written without a size."""
    depth, height, width = metadata.pixel_size if metadata is not None else (0.0, 0.0, 0.0)
    if depth > 0:
        info["spacing"] = depth
    kwargs: dict[str, Any] = {"metadata": info}
    if width > 0 and height > 0:
        # ResolutionUnit none: the unit is the metadata's (tifffile's default tag would say inch)
        columns, rows = (height, width) if order == "F" else (width, height)
        kwargs.update(resolution=(1.0 / columns, 1.0 / rows), resolutionunit="NONE")
    origin = metadata.origin if metadata is not None else (0.0, 0.0, 0.0)
    if any(origin):  # noa's key (read back by noa, in the unit), and ImageJ's own in pixels where it can say them
        info["origin"] = ",".join(repr(float(v)) for v in origin) if imagej else [float(v) for v in origin]
        if imagej:
            info.update({f"{letter}origin": value / size for letter, value, size
                         in zip("zyx", origin, (depth, height, width)) if size > 0 and value})
    if metadata is not None and metadata.unit and (depth > 0 or "resolution" in kwargs or any(origin)):
        info["unit"] = _escape(metadata.unit) if imagej else metadata.unit
    return kwargs


class TiffFormat:
    """TIFF and BigTIFF files: the TIFF :class:`~noa_core.io.protocol.ImageFormat`."""

    name = "tiff"
    title = "TIFF"
    extensions = EXTENSIONS
    output_extensions = EXTENSIONS
    media_type = "image/tiff"
    compressed_input = False  # tifffile needs random access: the pages are found by offset
    header_statistics = False  # TIFF has no header statistics
    store = False
    checks_size = True
    indexed = False
    read_options = TiffReadOptions
    lacking: Mapping[str, str] = {"as_stack/as_volume": "TIFF axes name their meaning"}

    def detect(self, head: bytes, path: Path) -> bool:
        return head[:4] in _MAGIC

    def claim_by_extension(self, head: bytes, path: Path) -> bool:
        raise CorruptFileError(f"{path}: magic bytes: {head[:4]!r} is not a TIFF signature")

    def read(self, path: Path, request: ReadRequest[TiffReadOptions]) -> tuple[Array, Metadata]:
        return _read(path, request)

    def probe(self, path: Path, request: ReadRequest[TiffReadOptions]) -> Probe:
        return _probe(path, request)

    def check_writable(self, dtype: np.dtype, shape: Shape4, path: Path) -> None:
        check_dtype(dtype, path)
        if math.prod(shape) == 0:
            raise FileFormatError(f"{path}: shape: {shape} is empty; nothing to write")

    def create(self, temp: Path, spec: OutputSpec) -> Created:
        notices = []
        if spec.order == "F":
            notices.append(f"{spec.path}: stored column-major (shaped axes {file_axes(spec.shape, 'F')[1]}): "
                           "readers that ignore the axes show the transpose")
        return Created(create_file(temp, spec.shape, spec.dtype, spec.order, spec.metadata), notices)

    def finish(self, temp: Path, spec: OutputSpec, statistics: HeaderStatistics) -> None:
        pass  # the structure written by create is complete


FORMAT = TiffFormat()

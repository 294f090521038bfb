"""TIFF files (plain, ImageJ hyperstacks, OME, tifffile "shaped") as BDHW arrays.

Reading maps tifffile's series axes onto BDHW: Z -> depth; I, Q, T -> batch (C too when nothing
else is batched); Y, X -> height, width. Axes of size 1 carry no data and are dropped. Any other
axis of size > 1 (RGB samples 'S', a channel axis beside a time axis, ...) is refused with an
error saying why, rather than guessed.

Writing makes an ImageJ hyperstack (axes 'TZYX' without the size-1 ones) for uint8, uint16 and
float32 images of at least 2 x 2 pixels in C order, otherwise a tifffile shaped file whose metadata records the axes ('TZXY' for
column-major sections).

:data:`FORMAT` is the TIFF :class:`~noa_core.io.protocol.ImageFormat`.
"""

from __future__ import annotations

import codecs
import lzma
import math
import os
import xml.etree.ElementTree as ElementTree
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np
import tifffile
from numpy.lib.stride_tricks import as_strided

from noa_core import layout
from noa_core.errors import (
    AxisMappingError,
    CorruptFileError,
    FileFormatError,
    HeaderError,
    SizeError,
    TruncatedFileError,
    WriteDTypeError,
)
from noa_core.io import mapped
from noa_core.io.compression import open_input
from noa_core.io.metadata import Metadata, Statistics
from noa_core.io.protocol import Created, OutputSpec, Probe, ReadRequest
from noa_core.layout import Shape4

if TYPE_CHECKING:
    from noa_core.array import Array

EXTENSIONS = (".tif", ".tiff")  # '.ome.tif' ends in '.tif'
_MAGIC = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")  # classic and BigTIFF, either byte order

_BATCH_AXES = "IQT"
_SPATIAL = {"Z": 1, "Y": 2, "X": 3}
_RESOLUTION_UNITS = {2: "inch", 3: "cm", 4: "mm", 5: "µm"}
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


def map_axes(path: Path, data: np.ndarray, axes: str) -> tuple[np.ndarray, str]:
    """A 4-d BDHW view of ``data`` whose dimensions are named by ``axes``, and the mapping in words."""
    keep = [i for i, n in enumerate(data.shape) if n > 1]
    data = data[tuple(slice(None) if i in keep else 0 for i in range(data.ndim))]
    names = "".join(axes[i] for i in keep)
    for letter in names:
        if letter == "S":
            raise AxisMappingError(f"{path}: axes {axes}: samples per pixel (RGB or interleaved channels) "
                                   "cannot map to BDHW; split the channels first")
        if letter not in _SPATIAL and letter not in _BATCH_AXES + "C":
            raise AxisMappingError(f"{path}: axes {axes}: axis {letter!r} has no BDHW counterpart "
                                   "(only Z, Y, X and batch-like I, Q, T, C are mapped)")
    batch = [i for i, a in enumerate(names) if a in _BATCH_AXES]
    channel = names.find("C")
    if channel >= 0:
        if batch:
            raise AxisMappingError(f"{path}: axes {axes}: channel axis C and batch axis "
                                   f"{names[batch[0]]} are both larger than 1; BDHW has one batch axis")
        batch = [channel]
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


def _ome_pixel_size(tif: tifffile.TiffFile, series: int) -> tuple[dict[str, float], str | None]:
    root = ElementTree.fromstring(tif.ome_metadata)
    images = [e for e in root.iter() if e.tag.endswith("}Image") or e.tag == "Image"]
    pixels = next((e for e in images[series] if e.tag.endswith("Pixels")), None) if series < len(images) else None
    if pixels is None:
        return {}, None
    sizes = {a: float(pixels.get(f"PhysicalSize{a}")) for a in "XYZ" if pixels.get(f"PhysicalSize{a}")}
    return sizes, pixels.get("PhysicalSizeXUnit", "µm")


def _pixel_size(tif: tifffile.TiffFile, series: int, axes: str) -> tuple[tuple[float, float, float], str | None]:
    """Pixel size per D, H, W and its unit, from OME, ImageJ, shaped metadata or resolution tags."""
    if tif.is_ome:
        sizes, unit = _ome_pixel_size(tif, series)
        return (sizes.get("Z", 0.0), sizes.get("Y", 0.0), sizes.get("X", 0.0)), unit
    page = tif.series[series].keyframe
    sizes: dict[str, float] = {}
    # The resolution tags describe the page's columns and rows, whichever axes those are.
    for tag, letter in (("XResolution", axes[-1]), ("YResolution", axes[-2] if len(axes) > 1 else "")):
        value = page.tags.get(tag)
        if value is not None and value.value[0] > 0:
            sizes[letter] = value.value[1] / value.value[0]
    extra: dict = {}
    if tif.is_imagej:
        extra = tif.imagej_metadata or {}
    elif tif.is_shaped and tif.shaped_metadata:
        extra = tif.shaped_metadata[0]
    if "spacing" in extra:
        sizes["Z"] = float(extra["spacing"])
    unit = extra.get("unit")
    if unit is None:
        unit_tag = page.tags.get("ResolutionUnit")
        unit = _RESOLUTION_UNITS.get(int(unit_tag.value)) if unit_tag is not None else None
    return (sizes.get("Z", 0.0), sizes.get("Y", 0.0), sizes.get("X", 0.0)), _unescape(unit) if unit else None


def _declared_bytes(path: Path, series, file_size: int) -> None:
    """Refuse a series whose size is more than the file can hold, before tifffile allocates it."""
    dtype = np.dtype(series.dtype)
    nbytes = int(np.prod(series.shape, dtype=object)) * dtype.itemsize
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
        root = ElementTree.fromstring(tif.ome_metadata)
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
            if decoder is not None and _expands_past(decoder, os.pread(file.fileno(), count, offset), limit):
                raise SizeError(f"{path}: StripByteCounts (page {number}): the {count}-byte segment at offset "
                                f"{offset} decodes to more than the {limit} bytes a segment of the page holds")


def _expands_past(make_decoder, data: bytes, limit: int) -> bool:
    """Whether ``data`` decodes to more than ``limit`` bytes (decoding at most one byte more; a damaged
    segment is left for tifffile to report)."""
    try:
        return len(make_decoder().decompress(data, limit + 1)) > limit
    except (zlib.error, lzma.LZMAError):
        return False


# TIFF compression code -> a streaming decoder whose output can be bounded (deflate, LZMA)
_BOUNDED_DECODERS = {8: zlib.decompressobj, 32946: zlib.decompressobj, 34925: lzma.LZMADecompressor}


def _load(path: Path, tif: tifffile.TiffFile, file: BinaryIO, series, file_size: int, mmap: bool) -> np.ndarray:
    """The series data in its own axes order; memory-mapped read-only when it is stored plainly."""
    dtype = np.dtype(series.dtype).newbyteorder(tif.byteorder)
    nbytes = int(np.prod(series.shape, dtype=object)) * dtype.itemsize
    offset = series.dataoffset
    if mmap and offset is not None and dtype.isnative and offset + nbytes <= file_size:
        flat = mapped.map_input(path, offset, dtype, nbytes // dtype.itemsize)
        return flat.reshape(series.shape)
    _check_segments(path, file, series, file_size)
    data = series.asarray()
    return data if data.dtype.isnative else data.astype(data.dtype.newbyteorder("="))


def _layout_only(tif: tifffile.TiffFile, file: BinaryIO, series, file_size: int) -> np.ndarray:
    """A stand-in for the series data with the shape and C strides a read gives, over a single element:
    only its shape and strides are ever looked at, never its values."""
    dtype = np.dtype(series.dtype)
    strides, step = [], dtype.itemsize
    for n in reversed(series.shape):
        strides.insert(0, step)
        step *= n
    return as_strided(np.zeros(1, dtype), series.shape, strides, writeable=False)


Take = Callable[[tifffile.TiffFile, BinaryIO, Any, int], np.ndarray]


def _parsed(path: Path, series: int | None, take: Take) -> tuple[np.ndarray, Metadata]:
    """Open the chosen series of ``path`` and hand it to ``take`` (the data, or a layout-only stand-in):
    the BDHW view of what ``take`` returns, and the metadata."""
    try:
        with open_input(path) as file, tifffile.TiffFile(file, name=path.name) as tif:
            file_size = os.fstat(file.fileno()).st_size
            if tif.is_ome:
                _check_ome_sizes(path, tif, file_size)
            index, chosen, notices = _choose_series(path, tif, series)
            _declared_bytes(path, chosen, file_size)
            bdhw, words = map_axes(path, take(tif, file, chosen, file_size), chosen.axes)
            pixel, unit = _pixel_size(tif, index, chosen.axes)
    except FileFormatError:
        raise
    except Exception as exc:  # tifffile raises many types on damaged files; each becomes one error
        raise CorruptFileError(f"{path}: TIFF structure: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    shape = layout.as_shape4(bdhw.shape)
    order = layout.order_of(shape, layout.as_strides4(tuple(s // bdhw.itemsize for s in bdhw.strides)))
    if order == "F":
        notices.append(f"{path}: stored column-major (axes {chosen.axes}): readers that ignore the axes show "
                       "the transpose")
    metadata = Metadata(format=FORMAT.name, shape=shape, dtype=np.dtype(chosen.dtype).name, pixel_size=pixel,
                        unit=unit, order=order, axes=words, path=str(path), series=index, notices=notices)
    return bdhw, metadata


def _choose_series(path: Path, tif: tifffile.TiffFile, series: int | None):
    """``(index, series, notices)`` of the series asked for (the first by default, with a notice when there are more)."""
    count = len(tif.series)
    if count == 0:
        raise CorruptFileError(f"{path}: series: the TIFF holds no image")
    index = 0 if series is None else int(series)
    if not 0 <= index < count:
        raise HeaderError(f"{path}: series: {series} is not in 0..{count - 1}")
    chosen = tif.series[index]
    notices = []
    if series is None and count > 1:
        notices.append(f"{path}: {count} series; read series 0 ({chosen.axes} {chosen.shape}); "
                       f"pass series=N (0..{count - 1}) to read another")
    return index, chosen, notices


def _read(path: Path, request: ReadRequest):
    """Read one series of a TIFF file: ``(Array, Metadata)``."""
    from noa_core.array import asarray

    bdhw, metadata = _parsed(path, request.series, lambda tif, file, series, size: _load(
        path, tif, file, series, size, request.mmap))
    return asarray(bdhw), metadata


def _probe(path: Path, request: ReadRequest) -> Probe:
    """What :func:`_read` gives, from the TIFF structure alone."""
    view, metadata = _parsed(path, request.series, _layout_only)
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
    stored, axes = file_axes(shape, order)
    # tifffile cannot read back ImageJ metadata of 1-pixel-wide or -high images: shaped files then.
    imagej = dtype.name in IMAGEJ_DTYPES and order == "C" and min(shape[2:]) > 1
    pixel = metadata.pixel_size if metadata is not None else (0.0, 0.0, 0.0)
    unit = metadata.unit if metadata is not None else None
    info: dict = {"axes": axes}
    if pixel[0] > 0:
        info["spacing"] = pixel[0]
    if unit:
        info["unit"] = _escape(unit) if imagej else unit
    kwargs = {}
    column, row = (pixel[1], pixel[2]) if order == "F" else (pixel[2], pixel[1])
    if column > 0 and row > 0:
        kwargs["resolution"] = (1.0 / column, 1.0 / row)
    offset, _ = tifffile.imwrite(path, shape=stored, dtype=dtype, imagej=imagej, metadata=info,
                                 returnoffset=True, photometric="minisblack", **kwargs)
    return offset


def _check_request(path: Path, request: ReadRequest) -> None:
    if request.as_stack or request.as_volume:
        raise FileFormatError(f"{path}: as_stack/as_volume: TIFF axes name their meaning; these options are for MRC")


class TiffFormat:
    """TIFF and BigTIFF files: the TIFF :class:`~noa_core.io.protocol.ImageFormat`."""

    name = "tiff"
    title = "TIFF"
    extensions = EXTENSIONS
    output_extensions = EXTENSIONS
    media_type = "image/tiff"
    compressed_input = False  # tifffile needs random access: the pages are found by offset
    header_statistics = False  # TIFF has no header statistics

    def detect(self, head: bytes, path: Path) -> bool:
        return head[:4] in _MAGIC

    def claim_by_extension(self, head: bytes, path: Path) -> bool:
        raise CorruptFileError(f"{path}: magic bytes: {head[:4]!r} is not a TIFF signature")

    def read(self, path: Path, request: ReadRequest) -> tuple[Array, Metadata]:
        _check_request(path, request)
        return _read(path, request)

    def probe(self, path: Path, request: ReadRequest) -> Probe:
        _check_request(path, request)
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

    def finish(self, temp: Path, spec: OutputSpec, statistics: Statistics) -> None:
        pass  # the structure written by create is complete


FORMAT = TiffFormat()

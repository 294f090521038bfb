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
import math
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import tifffile

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
from noa_core.io.metadata import Metadata, Statistics
from noa_core.io.protocol import Created, OutputSpec, ReadRequest
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


def _load(path: Path, tif: tifffile.TiffFile, series, mmap: bool) -> np.ndarray:
    """The series data in its own axes order; memory-mapped read-only when it is stored plainly."""
    dtype = np.dtype(series.dtype).newbyteorder(tif.byteorder)
    nbytes = int(np.prod(series.shape, dtype=object)) * dtype.itemsize
    file_size = path.stat().st_size
    uncompressed = all(getattr(p, "compression", 1) == 1 for p in series.pages[:1] if p is not None)
    limit = file_size if uncompressed else file_size * _MAX_EXPANSION
    if nbytes > limit:
        error = TruncatedFileError if uncompressed else SizeError
        raise error(f"{path}: ImageWidth/ImageLength/series shape: {series.shape} {dtype.name} is {nbytes} bytes, "
                    f"more than the {file_size}-byte file can hold")
    offset = series.dataoffset
    if mmap and offset is not None and dtype.isnative and offset + nbytes <= file_size:
        flat = mapped.map_input(path, offset, dtype, nbytes // dtype.itemsize)
        return flat.reshape(series.shape)
    _check_segments(path, series, file_size)
    data = series.asarray()
    return data if data.dtype.isnative else data.astype(data.dtype.newbyteorder("="))


def _check_segments(path: Path, series, file_size: int) -> None:
    """Refuse strips or tiles that end past the file before tifffile reads them: a read of the
    recorded byte count would first allocate that many bytes, whatever the file holds."""
    for number, page in enumerate(series.pages):
        if page is None:
            continue
        for offset, count in zip(page.dataoffsets, page.databytecounts):
            if offset + count > file_size:
                raise TruncatedFileError(f"{path}: StripOffsets/StripByteCounts (page {number}): a segment of {count} "
                                         f"bytes at offset {offset} ends past the {file_size}-byte file")


def _read(path: Path, series: int | None, mmap: bool):
    """Read one series of a TIFF file: ``(Array, Metadata)``."""
    from noa_core.array import asarray

    try:
        with tifffile.TiffFile(path) as tif:
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
            data = _load(path, tif, chosen, mmap)
            bdhw, words = map_axes(path, data, chosen.axes)
            pixel, unit = _pixel_size(tif, index, chosen.axes)
            source_dtype = np.dtype(chosen.dtype).name
    except FileFormatError:
        raise
    except Exception as exc:  # tifffile raises many types on damaged files; each becomes one error
        raise CorruptFileError(f"{path}: TIFF structure: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    array = asarray(bdhw)
    if array.order == "F":
        notices.append(f"{path}: stored column-major (axes {chosen.axes}): readers that ignore the axes show "
                       "the transpose")
    metadata = Metadata(format=FORMAT.name, shape=array.shape, dtype=source_dtype, pixel_size=pixel, unit=unit,
                        order=array.order, axes=words, path=str(path), series=index, notices=notices)
    return array, metadata


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
        if request.as_stack or request.as_volume:
            raise FileFormatError(f"{path}: as_stack/as_volume: TIFF axes name their meaning; these options are for MRC")
        return _read(path, request.series, request.mmap)

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

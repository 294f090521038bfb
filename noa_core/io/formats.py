"""Which format a file is in: magic bytes first, the extension second; and the input path checks."""

from __future__ import annotations

import bz2
import gzip
import os
import stat
from pathlib import Path
from typing import BinaryIO

from noa_core.errors import (
    CorruptFileError,
    EmptyFileError,
    FileFormatError,
    MissingFileError,
    NotAFileError,
    UnknownFormatError,
)

MRC_EXTENSIONS = (".mrc", ".mrcs", ".map", ".st", ".ali", ".rec")
TIFF_EXTENSIONS = (".tif", ".tiff")  # '.ome.tif' ends in '.tif'
COMPRESSION_EXTENSIONS = {".gz": "gzip", ".bz2": "bzip2"}
_TIFF_MAGIC = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")
_MRC_MAP_ID = (208, b"MAP ")  # offset and value of the MRC2014 'map' field


def check_input(path: str | os.PathLike) -> Path:
    """The path of a readable, non-empty regular file, or a specific error."""
    p = Path(path)
    try:
        info = p.stat()
    except FileNotFoundError:
        raise MissingFileError(f"{p}: path: no such file") from None
    except OSError as exc:
        raise FileFormatError(f"{p}: path: cannot be accessed ({exc.strerror})") from None
    if stat.S_ISDIR(info.st_mode):
        raise NotAFileError(f"{p}: path: is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise NotAFileError(f"{p}: path: is not a regular file")
    if info.st_size == 0:
        raise EmptyFileError(f"{p}: size: the file is empty (0 bytes)")
    return p


def compression_of(head: bytes) -> str | None:
    """'gzip', 'bzip2' or None, from the first bytes."""
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith(b"BZh"):
        return "bzip2"
    return None


def open_stream(path: Path, compression: str | None) -> BinaryIO:
    """A binary stream of the (decompressed) file content."""
    if compression == "gzip":
        return gzip.open(path, "rb")
    if compression == "bzip2":
        return bz2.open(path, "rb")
    return open(path, "rb")


def detect(path: Path) -> tuple[str, str | None]:
    """``(format, compression)`` of an input: format 'mrc' or 'tiff', compression 'gzip'/'bzip2'/None."""
    with open(path, "rb") as f:
        head = f.read(1024)
    compression = compression_of(head)
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in COMPRESSION_EXTENSIONS:
        suffixes = suffixes[:-1]
    ext = suffixes[-1] if suffixes else ""
    if compression is not None:
        try:
            with open_stream(path, compression) as stream:
                head = stream.read(1024)
        except (OSError, EOFError, ValueError) as exc:
            raise CorruptFileError(f"{path}: {compression} stream: cannot be decompressed ({exc})") from None
        if not head:
            raise EmptyFileError(f"{path}: size: the decompressed content is empty")
    if head[:4] in _TIFF_MAGIC:
        if compression is not None:
            raise UnknownFormatError(f"{path}: compression: {compression}-compressed TIFF is not supported; "
                                     "decompress it first")
        return "tiff", None
    offset, value = _MRC_MAP_ID
    if head[offset:offset + 4] == value or ext in MRC_EXTENSIONS:
        return "mrc", compression
    if ext in TIFF_EXTENSIONS:
        raise CorruptFileError(f"{path}: magic bytes: {head[:4]!r} is not a TIFF signature")
    raise UnknownFormatError(
        f"{path}: magic bytes: neither MRC nor TIFF (extension {ext or 'none'!r}; "
        f"known: {' '.join(MRC_EXTENSIONS + TIFF_EXTENSIONS)}, optionally .gz/.bz2 for MRC)")


def output_format(path: Path) -> str:
    """'mrc' or 'tiff' for an output path, from its extension."""
    ext = path.suffix.lower()
    if ext in MRC_EXTENSIONS:
        return "mrc"
    if ext in TIFF_EXTENSIONS:
        return "tiff"
    raise UnknownFormatError(f"{path}: extension: {ext or 'none'!r} is not one noa writes "
                             f"({' '.join(MRC_EXTENSIONS + TIFF_EXTENSIONS)})")


def strip_image_suffix(name: str) -> str:
    """``name`` without its image extension and compression suffix ('a.mrc.gz' -> 'a', 'b.ome.tif' -> 'b.ome')."""
    stem = name
    for suffixes in (COMPRESSION_EXTENSIONS, MRC_EXTENSIONS + TIFF_EXTENSIONS):
        ext = Path(stem).suffix
        if ext.lower() in suffixes:
            stem = stem[:-len(ext)]
    return stem

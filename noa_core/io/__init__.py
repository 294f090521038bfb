"""Read and write MRC, TIFF and OME-Zarr files as 4-d BDHW arrays.

Entry points:

- :func:`read`: ``(Array, Metadata)`` from a file; the format comes from the
  magic bytes, then the extension. Large uncompressed files are memory-mapped read-only, so
  opening a 50 GB file only reads its header.
- :func:`probe`: shape, strides, element type and metadata from the header alone (no data read).
- :func:`write`: an Array to a file, atomically, returning notices for the user.
- :func:`create` and :func:`copy_into`: outputs filled block by block, for files larger than memory.

Each format is one module implementing :class:`~noa_core.io.protocol.ImageFormat` (:mod:`.mrc`,
:mod:`.tiff`), listed in :data:`noa_core.io.formats.FORMATS`.

Every failure caused by a file raises a :class:`noa_core.errors.FileFormatError` subclass whose
one-line message names the file and the header field.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from noa_core.array import Array, asarray
from noa_core.errors import FileFormatError
from noa_core.io import formats
from noa_core.io.metadata import Metadata, HeaderStatistics
from noa_core.io.protocol import EER_READ_OPTIONS, Probe, ReadRequest
from noa_core.io.stream import Writer, copy_into, create, fill

__all__ = ["read", "probe", "Probe", "write", "create", "copy_into", "Metadata", "Statistics", "Writer"]


def read(path: str | os.PathLike, *, as_stack: bool | None = None, as_volume: bool | None = None,
         series: int | None = None, channel: int | None = None, level: int | None = None,
         mmap: bool = True, tiles: bool = False, **eer: Any) -> tuple[Array, Metadata]:
    """Read an MRC (.mrc .mrcs .map .st .ali .rec, optionally .gz/.bz2) or TIFF file.

    Args:
        path: the file.
        as_stack: MRC only: read the sections as a stack of images ``(nz, 1, ny, nx)`` whatever ispg says.
        as_volume: MRC only: read the sections as one volume ``(1, nz, ny, nx)``.
        series: TIFF only: which series to read (default 0, with a notice when there are several).
        channel: TIFF and OME-Zarr only: which channel to read (C axis or RGB samples); files whose channels cannot
            map to the batch axis are refused without it.
        level: TIFF and OME-Zarr only: which pyramid level to read (default 0, the full resolution).
        mmap: map uncompressed data read-only instead of loading it (the Array is then not writable).
        tiles: the array will be read only tile by tile by :func:`noa_core.io.mapped.read_view` (a plan's
            sources), so a format may make its data as the tiles ask (EER decodes fractions on demand).
        eer: EER only: ``eer_group``, ``eer_group_last``, ``eer_upsampling``, ``gain``, ``gain_flip_y``,
            ``gain_rotate`` (:class:`~noa_core.io.protocol.ReadRequest`).

    Returns:
        The BDHW array (a permuted view when the file's axes are not Z, Y, X) and its metadata.
    """
    request = ReadRequest(as_stack=as_stack, as_volume=as_volume, series=series, channel=channel, level=level,
                          mmap=mmap, tiles=tiles, **eer)
    return _format_and_request(path, request, "read")


def probe(path: str | os.PathLike, *, as_stack: bool | None = None, as_volume: bool | None = None,
          series: int | None = None, channel: int | None = None, level: int | None = None, **eer: Any) -> Probe:
    """What :func:`read` would give, from the header alone: BDHW shape, strides, dtype and metadata.

    No data are read or decompressed (a compressed MRC: its first kilobyte and extended header), yet
    the header's sizes are checked against what the file can hold. Arguments as for :func:`read`.
    """
    request = ReadRequest(as_stack=as_stack, as_volume=as_volume, series=series, channel=channel, level=level, **eer)
    return _format_and_request(path, request, "probe")


# Read options only some formats take: a format lists those it takes in ``read_options``.
_FORMAT_READ_OPTIONS = {"channel": "channels", "level": "pyramid levels",
                        **dict.fromkeys(EER_READ_OPTIONS, "EER frames")}


def _format_and_request(path, request: ReadRequest, method: str):
    """Detect the format of ``path`` and call its ``read`` or ``probe``."""
    p = formats.check_input(path)
    fmt, compression = formats.detect(p)
    for name, what in _FORMAT_READ_OPTIONS.items():
        if getattr(request, name) is not None and name not in getattr(fmt, "read_options", ()):
            takers = " and ".join(f.title for f in formats.ALL_FORMATS if name in getattr(f, "read_options", ()))
            raise FileFormatError(f"{p}: {name}: {fmt.title} files have no {what}; {name}= is for {takers}")
    return getattr(fmt, method)(p, dataclasses.replace(request, compression=compression))


def write(path: str | os.PathLike, array, metadata: Metadata | None = None, *, overwrite: bool = False,
          dtype=None, order: str = "C", label: str | None = None) -> list[str]:
    """Write ``array`` to ``path`` (format from the extension) atomically; return notices.

    Args:
        array: an Array or anything :func:`noa_core.asarray` accepts.
        metadata: pixel size, origin, labels, ... to carry (e.g. from :func:`read`, or derived with
            ``metadata.permute(perm)``); header statistics are always recomputed.
        overwrite: replace an existing file (otherwise OutputExistsError).
        dtype: store as this type. MRC needs one of float32, int16, uint16, float16, int8, uint8,
            complex64; other input types must name one here (values must fit integer types).
        order: 'C', or 'F' to store each section column-major (recorded in the file).
        label: text of the MRC label noa appends (default: what was written).
    """
    source = asarray(array)
    with create(path, source.shape, dtype or source.dtype, metadata, order=order, overwrite=overwrite,
                label=label) as out:
        copy_into(source, out)
    return out.notices

"""The registry of file formats, choosing one (magic bytes first, the extension second), and reading through it
(:func:`read`, :func:`probe`).

Adding a format is one module implementing :class:`~noa_core.io.protocol.ImageFormat` (its read options declared
in :mod:`noa_core.io.read_options`) plus one line in :data:`FORMATS` (formats of one file, read and written),
:data:`MOVIES` (read only) or :data:`STORES` (formats whose files are directories, e.g. OME-Zarr: they cannot be
sent or received as one file over HTTP, so the service's upload mode, which lists :data:`FORMATS`, does not offer
them), and its tests subclassing the conformance suite (``tests/io/conformance.py``). Also here: the checks every
input path gets before any format sees it, and the refusal of read options a format does not take.
"""

from __future__ import annotations

import io
import os
import stat
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from noa_core import limits
from noa_core.errors import EmptyFileError, FileFormatError, NotAFileError, UnknownFormatError
from noa_core.io import compression, mrc, read_options, remote
from noa_core.io.protocol import ImageFormat, Probe, ReadRequest

if TYPE_CHECKING:
    from noa_core.array import Array
    from noa_core.io.metadata import Metadata


class _Registry(Sequence[ImageFormat]):
    """Formats in order, each module imported when the format is first reached: TIFF and OME-Zarr cost
    30 ms to import, which a call on an MRC file (its signature and extension tried first) never needs."""

    def __init__(self, *entries: ImageFormat | str) -> None:
        self._entries = list(entries)  # a format, or the name of the module whose FORMAT it is

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return _Registry(*(self[i] for i in range(*index.indices(len(self)))))
        entry = self._entries[index]
        if isinstance(entry, str):
            import importlib

            entry = self._entries[index] = importlib.import_module(entry).FORMAT
        return entry

    def __contains__(self, fmt: object) -> bool:
        # A format whose module was never imported cannot be the one asked about: asking imports nothing (a
        # particle file's module loads numba, which an MRC upload's refusal must not pay for).
        for entry in self._entries:
            if isinstance(entry, str):
                entry = getattr(sys.modules.get(entry), "FORMAT", entry)
            if entry is fmt:
                return True
        return False

    def __add__(self, other: Sequence[ImageFormat]) -> _Registry:
        return _Registry(*self._entries, *(other._entries if isinstance(other, _Registry) else other))


# Signatures are tried in this order; messages list formats and extensions in it too.
FORMATS = _Registry(mrc.FORMAT, "noa_core.io.tiff")
# Formats read, never written (EER movies: TIFF files of their own): outputs, the service's output formats and
# its uploads list FORMATS only.
MOVIES = _Registry("noa_core.io.eer")
# Formats whose inputs and outputs are directories (a store of chunk files).
STORES = _Registry("noa_core.io.omezarr")
# The extensions of DATASETS' formats (a test keeps them equal), known without importing them: the small files'
# path must not load what a particle file needs.
DATASET_EXTENSIONS = (".star", ".cs")
# Data sets: files that name the images of other files (particle files: RELION STAR, cryoSPARC .cs). Read and
# written through every door that names files on the server; never uploaded alone, so the service's upload mode
# (which lists FORMATS) does not offer them.
DATASETS = _Registry("noa_core.io.particles")
ALL_FORMATS = FORMATS + MOVIES + STORES + DATASETS
HEAD_BYTES = 1024  # what detection reads: every signature lies in the first kilobyte


def by_name(name: str) -> ImageFormat:
    """The registered format called ``name`` (e.g. 'mrc'), or UnknownFormatError."""
    for fmt in ALL_FORMATS:
        if fmt.name == name:
            return fmt
    raise UnknownFormatError(f"format: {name!r} is not one noa knows ({', '.join(f.name for f in ALL_FORMATS)})")


def readable() -> _Registry:
    """Formats of one input file, in the order signatures are tried: :data:`FORMATS` with :data:`MOVIES` after
    MRC, before TIFF, which would claim their files (modules still imported only when reached)."""
    return _Registry(*FORMATS._entries[:1], *MOVIES._entries, *FORMATS._entries[1:], *DATASETS._entries)


def input_bytes(paths: Sequence[str | os.PathLike]) -> int | None:
    """The bytes of data the input files hold, from their sizes, for the choice of the NumPy path for small work
    (:func:`noa_core.compute.compute_path.for_size`); None (not small) when one is a folder, a store, a file naming
    data in other files (a particle file) or cannot be read."""
    total = 0
    for path in paths:
        if Path(path).suffix.lower() in DATASET_EXTENSIONS or remote.is_remote(path):
            return None
        try:
            info = os.stat(path)
        except OSError:
            return None
        if not stat.S_ISREG(info.st_mode):
            return None
        total += info.st_size
    return total


def check_input(path: str | os.PathLike) -> Path:
    """The path of a readable, non-empty regular file, or a specific error (checked on the opened file,
    which a FIFO cannot block: see :func:`noa_core.io.compression.open_input`). A URL (``s3://``, ``https://``)
    gives a :class:`~noa_core.io.remote.RemotePath`, read by byte ranges."""
    p = remote.as_path(path)
    if _is_folder(p):
        if any(fmt.detect(b"", p) for fmt in STORES):
            return p
        stores = ", ".join(f"{fmt.title} ({'/'.join(fmt.extensions)})" for fmt in STORES)
        raise NotAFileError(f"{p}: is a directory, neither a file nor a store noa reads ({stores}: "
                            "no zarr.json, .zgroup or .zattrs in it)")
    with compression.open_input(p):
        return p


def _is_folder(path: Path) -> bool:
    """Whether an input names a folder (a store's): a directory here, a prefix of objects on remote storage."""
    url = remote.remote_path(path)
    return path.is_dir() if url is None else remote.is_folder(url)


def _image_extension(path: Path) -> str:
    """The lower-case extension naming the format, behind any compression suffix ('a.mrc.gz' -> '.mrc')."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in compression.EXTENSIONS:
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def _check_compression(fmt: ImageFormat, kind: str | None, path: Path) -> None:
    if kind is not None and not fmt.compressed_input:
        raise UnknownFormatError(f"{path}: compression: {kind}-compressed {fmt.title} is not supported; "
                                 "decompress it first")


def _none_of(titles: list[str]) -> str:
    """'neither MRC nor TIFF', or 'none of A, B, C' for more formats."""
    if len(titles) == 1:
        return f"not {titles[0]}"
    if len(titles) == 2:
        return f"neither {titles[0]} nor {titles[1]}"
    return f"none of {', '.join(titles)}"


def detect(path: Path) -> tuple[ImageFormat, str | None]:
    """``(format, compression)`` of an input, compression 'gzip'/'bzip2'/None.

    A format whose signature the (decompressed) first bytes carry wins; failing that, one whose
    extension the path has may claim it (MRC files before MRC2014 have no signature).
    """
    with _detected(path) as (fmt, kind, _):
        return fmt, kind


@contextmanager
def _detected(path: Path) -> Iterator[tuple[ImageFormat, str | None, io.BufferedReader | None]]:
    """:func:`detect`'s answer and the input it opened, open until the context ends (None for a store's folder):
    a read hands it to the format (:attr:`~noa_core.io.protocol.ReadRequest.opened`)."""
    url = remote.remote_path(path)
    if _is_folder(path):
        store = next((fmt for fmt in STORES if fmt.detect(b"", path)), None)
        if store is not None:
            yield store, None, None
            return
        check_input(path)  # says why this directory is not one
    with compression.open_input(path) as f:
        head = f.read(HEAD_BYTES)
        kind = compression.compression_of(head)
        if kind is not None and url is not None:  # decompressed from its start on every read: fetched whole
            raise UnknownFormatError(f"{path}: compression: {kind}-compressed files are not read from remote "
                                     "storage (they would be fetched whole); decompress it there, or copy it here")
        if kind is not None:
            f.seek(0)
            head = compression.Decompressed(path, kind, f).read(HEAD_BYTES)
            if not head:
                raise EmptyFileError(f"{path}: size: the decompressed content is empty")
        yield _format_of_head(path, head, kind), kind, f


def _format_of_head(path: Path, head: bytes, kind: str | None) -> ImageFormat:
    """The format whose signature ``head`` (the content's first bytes) carries, or which claims ``path`` by its
    extension; UnknownFormatError saying what the file is not."""
    ext = _image_extension(path)
    for fmt in readable():
        if fmt.detect(head, path):
            _check_compression(fmt, kind, path)
            return fmt
    for fmt in readable():
        if ext in fmt.extensions and fmt.claim_by_extension(head, path):
            _check_compression(fmt, kind, path)
            return fmt
    if head.startswith(b"PK\x03\x04"):
        raise UnknownFormatError(f"{path}: magic bytes: a zip archive; an OME-Zarr store is read as its directory "
                                 "(over HTTP: POST /v1/paths/NAME with a store on the server, not an upload)")
    for fmt in STORES:
        if path.name.lower().endswith(fmt.extensions):
            fmt.claim_by_extension(head, path)  # raises: says that a store is a directory
    known = " ".join(e for fmt in FORMATS for e in fmt.extensions)
    compressed = " and ".join(fmt.title for fmt in FORMATS if fmt.compressed_input)
    optional = f", optionally {'/'.join(compression.EXTENSIONS)} for {compressed}" if compressed else ""
    raise UnknownFormatError(f"{path}: magic bytes: {_none_of([fmt.title for fmt in FORMATS])} "
                             f"(extension {ext or 'none'!r}; known: {known}{optional})")


def output_format(path: Path) -> ImageFormat:
    """The format an output path asks for, from its extension ('x.ome.zarr' names a store)."""
    ext = path.suffix.lower()
    for fmt in FORMATS:
        if ext in fmt.output_extensions:
            return fmt
    for fmt in STORES:
        if path.name.lower().endswith(fmt.output_extensions):
            return fmt
    for fmt in DATASETS:
        if ext in fmt.output_extensions:
            return fmt
    stores = " ".join(e for fmt in STORES for e in fmt.output_extensions)
    raise UnknownFormatError(f"{path}: extension: {ext or 'none'!r} is not one noa writes "
                             f"({' '.join(e for fmt in FORMATS for e in fmt.output_extensions)}), "
                             f"nor a store ({stores})")


def media_type(path: Path) -> str:
    """The media type of a file by its extension (a file of no format noa writes: plain bytes)."""
    try:
        return output_format(path).media_type
    except UnknownFormatError:
        return "application/octet-stream"


def names_store(path: str | os.PathLike) -> bool:
    """Whether an output path asks for a store (a directory: 'x.ome.zarr'); the formats of one file are
    asked first, so an MRC output imports no store format."""
    suffix = Path(path).suffix.lower()
    if any(suffix in fmt.output_extensions for fmt in FORMATS):
        return False
    return Path(path).name.lower().endswith(tuple(e for fmt in STORES for e in fmt.output_extensions))


MDOC_SUFFIX = ".mdoc"


def strip_image_suffix(name: str) -> str:
    """``name`` without its image extension and compression suffix ('a.mrc.gz' -> 'a', 'b.ome.tif' -> 'b.ome'), and
    without the ``.mdoc`` of SerialEM's metadata, named after its image ('TS_01.mrc.mdoc' -> 'TS_01')."""
    if name.lower().endswith(MDOC_SUFFIX) and len(name) > len(MDOC_SUFFIX):
        name = name[:-len(MDOC_SUFFIX)]
    lowered = name.lower()
    for fmt in STORES:
        for ext in fmt.extensions:
            if lowered.endswith(ext):
                return name[:-len(ext)]
    image_extensions = tuple(e for fmt in readable() for e in fmt.extensions)
    stem = name
    for suffixes in (tuple(compression.EXTENSIONS), image_extensions):
        ext = Path(stem).suffix
        if ext.lower() in suffixes:
            stem = stem[:-len(ext)]
    return stem


# -- reading through the formats --------------------------------------------------------------------


def read(path: str | os.PathLike, *, mmap: bool = True, tiles: bool = False, projects: Any = None,
         **options: Any) -> tuple[Array, Metadata]:
    """Read a file of any registered format (found by :func:`detect`) as a BDHW array.

    Args:
        path: the file, or a store's directory.
        mmap: map uncompressed data read-only instead of loading it (the Array is then not writable).
        tiles: the array will be read only tile by tile by :func:`noa_core.io.mapped.read_view` (a plan's
            sources), so a format may make its data as the tiles ask (EER decodes fractions on demand).
        projects: how the paths a file names (a particle file's stacks) are opened
            (:data:`noa_core.io.particles.Projects`; None: as paths of this machine, relative to ``project_dir``).
        options: the read options of the file's format, by name: the fields of its dataclass in
            :mod:`noa_core.io.read_options` (MRC's stack or volume, TIFF's series, channel and level, OME-Zarr's
            channel and level, EER's grouping, upsampling and gain). None (or the option's default) asks for
            nothing; an option given that the file's format does not take is a FileFormatError naming it, a name
            no format takes a TypeError.

    Returns:
        The BDHW array (a permuted view when the file's axes are not Z, Y, X) and its metadata.

    Raises:
        LimitError: an image over the voxel limit of this context (:func:`noa_core.limits.voxel_limit`: a
            service's), refused from its header, before any data are read.
    """
    with _request(path, options, mmap=mmap, tiles=tiles, projects=projects) as (fmt, p, request):
        if limits.limited() and not fmt.checks_size:
            limits.check_input_size(fmt.probe(p, request).shape, str(p))
        return fmt.read(p, request)


def probe(path: str | os.PathLike, *, projects: Any = None, **options: Any) -> Probe:
    """What :func:`read` would give, from the header alone: BDHW shape, strides, dtype and metadata.

    No data are read or decompressed (a compressed MRC: its first kilobyte and extended header), yet
    the header's sizes are checked against what the file can hold. Read options as for :func:`read`.

    Args:
        path: the file, or a store's directory.
        projects: how the paths a file names (a particle file's stacks) are opened, as for :func:`read`.
        **options: the read options of the file's format, by name, as for :func:`read`.

    Returns:
        The probe: shape, strides, element type and metadata of what :func:`read` would give.

    Raises:
        MissingFileError: no such file.
        UnknownFormatError: a file of no format noa reads.
        FileFormatError: a header that is malformed or promises more than the file holds, or an option the
            file's format does not take.
        TypeError: an option no format takes.
    """
    with _request(path, options, projects=projects) as (fmt, p, request):
        return fmt.probe(p, request)


@contextmanager
def _request(path: str | os.PathLike, options: Mapping[str, Any],
             **how: Any) -> Iterator[tuple[ImageFormat, Path, ReadRequest]]:
    """The format of the input ``path``, the path checked, and the request its read takes (the options given, as
    the format's read options; the input as detection opened it, open until the context ends)."""
    asked = read_options.given(options)  # names no format declares are refused before the file is looked at
    p = remote.as_path(path)
    with _detected(p) as (fmt, kind, opened):  # opened as check_input opens it, with its refusals
        yield fmt, p, ReadRequest(requested(fmt, p, asked), compression=kind, opened=opened, **how)


def requested(fmt: ImageFormat, path: Path, asked: Mapping[str, Any]) -> Any:
    """``fmt``'s read options holding the options ``asked`` (given: :func:`noa_core.io.read_options.given`); an
    option it does not take is refused, naming the file and the option, with the formats that take it."""
    own = read_options.names(fmt.read_options)
    for name, f in read_options.fields().items():
        if name in asked and name not in own:
            label = f.metadata["label"] or name
            lacking = fmt.lacking.get(label, f"{fmt.title} files have no {f.metadata['what']}")
            takers = " and ".join(other.title for other in ALL_FORMATS
                                  if name in read_options.names(other.read_options))
            for_them = f"these options are for {takers}" if label != name else f"{name}= is for {takers}"
            raise FileFormatError(f"{path}: {label}: {lacking}; {for_them}")
    return fmt.read_options(**asked)

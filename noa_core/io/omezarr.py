"""OME-Zarr stores (OME-NGFF 0.4 on zarr v2, 0.5 on zarr v3): the OME-Zarr :class:`~noa_core.io.protocol.ImageFormat`.

A store is a directory, not a file, so this format differs from MRC and TIFF in two places:

- Reading: a level of the multiscale image is decoded chunk by chunk (zarr does the decoding) into an
  unlinked temporary file, which is then mapped, as :func:`noa_core.io.mrc._spill` does for compressed
  MRC: memory stays bounded and every operation reads the input as it reads any mapped file.
  Every file of the store is opened beneath the store's folder with no symbolic link followed and
  without blocking, and must be a regular file (a chunk that is a folder, a FIFO or a device is
  refused, never read as missing); chunks much larger than the array, chunk files larger than their
  chunk can need, and chunks whose compressed stream would decode to more than the chunk holds are
  refused before anything is decoded.
- Writing: the store is created (group, metadata, an empty array) in a temporary directory beside the
  destination when the output opens, once the destination's file system has room for every chunk
  uncompressed and the chunks number at most :data:`MAX_CHUNKS`; the tiles an operation computes are
  written straight into it as chunks (:class:`StoreTiles`), the planner aligning tiles to the chunk
  grid, so Dask tasks each write their own chunks (their own shards: an NGFF 0.5 store with 'shards' keeps the
  chunks of a shard in one file, written whole); :class:`~noa_core.io.atomic.TemporaryOutput` then
  renames the directory into place. A reader never sees a partial store. A pyramid (write options
  'levels' or 'pyramid', and 'downsample') is written from the same tiles: each is halved level after
  level (:func:`halve`) and written into every level's array, the tiles aligned so that each covers
  whole chunks of every level (:func:`store_layout`): one read of the input, memory bounded by the tiles.
  The multiscale image's metadata (the group's attributes) wait under :data:`WRITING` until every chunk is
  written (:func:`complete_store`): a store on object storage (``s3://``), written straight into the bucket where
  nothing can be renamed, is never taken for a complete image before it is one, and is removed on failure.

Axes map to BDHW as TIFF axes do (:func:`noa_core.io.tiff.map_axes`): time is the batch, z/y/x are
D/H/W, a channel axis is the batch when nothing else is (otherwise ``channel=`` picks one). Pixel
sizes come from the ``scale`` of the level's ``coordinateTransformations`` (times the multiscale's
own), in the axes' units; an axis without a unit has an unknown pixel size. noa writes the stored axes
``t`` (a batch larger than 1), ``z`` (a depth larger than 1), ``y``, ``x``, with the pixel size in
ångström (unit "angstrom") and the origin as a translation; unknown sizes get scale 1 and no unit.

zarr is imported inside the functions: commands that never touch a store do not pay for it.
"""

from __future__ import annotations

import bz2
import contextlib
import dataclasses
import errno
import functools
import itertools
import lzma
import math
import os
import stat
import tempfile
import weakref
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np

from noa_core import kernels  # a lazy face: numba loads with a pyramid's first mean
from noa_core.array import asarray, layout
from noa_core.array.layout import Shape4
from noa_core.errors import (
    CorruptFileError,
    FileFormatError,
    HeaderError,
    LayoutError,
    NoSpaceError,
    ParameterError,
    SizeError,
    TruncatedFileError,
    WriteDTypeError,
    param,
)
from noa_core.io import atomic, beneath, mapped, remote, tiff
from noa_core.io.metadata import ANGSTROM, HeaderStatistics, Metadata, angstroms_per_unit
from noa_core.io.protocol import Created, OutputSpec, Probe, ReadRequest
from noa_core.io.read_options import OmeZarrReadOptions
from noa_core.limits import MAX_OUTPUT_BYTES, check_input_size

if TYPE_CHECKING:
    from noa_core.array import Array

EXTENSIONS = (".ome.zarr", ".zarr")  # the usual one first; both are directories
# Files that make a directory a zarr node: zarr v3, then v2 group, attributes, array.
_NODE_FILES = ("zarr.json", ".zgroup", ".zattrs", ".zarray")
NGFF_VERSIONS: dict[str, Literal[2, 3]] = {"0.4": 2, "0.5": 3}  # the NGFF versions noa writes, with their zarr format
DEFAULT_NGFF = "0.4"  # zarr v2: what most viewers (napari, Fiji's MoBIE/n5-viewer, neuroglancer) read
CHUNK_BYTES = 16 << 20  # the largest chunk noa writes by default
SHARD_CHUNK_BYTES = 1 << 20  # the largest chunk noa writes by default inside a shard (what a viewer fetches)
# The most a tile of whole shards of every level may hold, as a default chunk: each writer thread holds one, halved
# and encoded (measured: 128 x 512^2 float32 to 4 levels in shards of 16 MiB peaked at 380 MiB, 92 MiB above the
# unsharded store); larger shards are refused.
MAX_SHARD_BYTES = CHUNK_BYTES
DOWNSAMPLING = ("mean", "nearest")  # how a pyramid's level is made from the one above; the first is the default
PYRAMID_SIZE = 256  # the pyramid write option halves until a level's height and width are both at most this
BLOCK_BYTES = 64 << 20  # what one conversion step (decode or encode) holds in memory
_UNIT_NAMES = {"Å": "angstrom"}  # noa's units -> NGFF's (UDUNITS-2 names)
MAX_CHUNKS = 1_000_000  # the most chunk files noa writes into one store (each costs an inode and a block)
METADATA_BYTES = 16 << 20  # the largest metadata document (zarr.json, .zarray, .zattrs ...) read
# A stored chunk (or shard) may decode to this many bytes however little of the array it covers; beyond
# that, to at most twice the part of the array it covers (padding past the array's edge).
SPARE_CHUNK_BYTES = CHUNK_BYTES
SETTLE_SECONDS = 5  # how long a failed read waits for zarr's other tasks (each is bounded: no FIFO, no bomb)
_METADATA_NAMES = ("zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata")


def is_store(path: Path) -> bool:
    """Whether ``path`` is a directory holding a zarr group or array (v2 or v3), or a remote folder (a prefix of
    objects) holding one."""
    url = remote.remote_path(path)
    if url is not None:
        return remote.is_folder(url) and any(remote.holds(url, name) for name in _NODE_FILES)
    return path.is_dir() and any((path / name).is_file() for name in _NODE_FILES)


def has_store_extension(path: Path) -> bool:
    return path.name.lower().endswith(EXTENSIONS)


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


def _in_words(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]


# -- the store's files, opened beneath its folder -----------------------------------------------


def _open_beneath(root_fd: int, key: str) -> int:
    """The file ``key`` (a store key: names joined by '/') opened for reading beneath the folder ``root_fd``
    with no symbolic link followed (:func:`noa_core.io.beneath.open_beneath`: ELOOP naming the link where
    one is met) and O_NONBLOCK (a FIFO cannot hang the open)."""
    *folders, name = key.split("/")
    if any(part in ("", ".", "..") for part in (*folders, name)):
        raise CorruptFileError(f"{key}: not a key inside the store")
    try:
        return beneath.open_beneath(root_fd, key, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, exc.filename if exc.errno == errno.ELOOP else key) from None


@functools.cache
def _beneath_store_class() -> type[Any]:
    """zarr's LocalStore, read-only, reading its files with :func:`_open_beneath` (built on first use:
    zarr is imported by the first store read only)."""
    import asyncio  # zarr's stores are asynchronous; asyncio is loaded only for a store

    from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
    from zarr.core.buffer import default_buffer_prototype
    from zarr.storage import LocalStore

    class BeneathStore(LocalStore):
        """The store's folder is opened once; every file is opened beneath it (no symbolic link, no
        FIFO, no folder taken for a file) and read only when its size is one the array can need."""

        def __init__(self, root: Path | str, *, read_only: bool = True) -> None:
            super().__init__(root, read_only=True)
            self.fd = beneath.open_path(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            weakref.finalize(self, os.close, self.fd)
            self.chunk_bytes = METADATA_BYTES  # the largest chunk file, set once the array is known
            self.refused: str | None = None  # why the first file refused was, which zarr may report otherwise

        def with_read_only(self, read_only: bool = False):
            return self  # noa only reads through it

        def read(self, key: str, byte_range) -> bytearray | None:
            """The bytes of ``key`` (all, or ``byte_range``), None when it is missing (zarr's fill value)."""
            try:
                return self._read(key, byte_range)
            except FileFormatError as exc:
                self.refused = self.refused or str(exc)
                raise

        def _read(self, key: str, byte_range) -> bytearray | None:
            try:
                fd = _open_beneath(self.fd, key)
            except (FileNotFoundError, NotADirectoryError):
                return None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise CorruptFileError(f"{exc.filename}: is a symbolic link; noa follows no link inside a "
                                           "store") from None
                raise CorruptFileError(f"{key}: cannot be opened ({exc.strerror})") from None
            try:
                info = os.fstat(fd)
                if stat.S_ISDIR(info.st_mode):
                    raise CorruptFileError(f"{key}: is a directory, not a file")
                if not stat.S_ISREG(info.st_mode):
                    raise CorruptFileError(f"{key}: is not a regular file (a FIFO, socket or device)")
                start, stop = self._span(byte_range, info.st_size)
                metadata = key.rsplit("/", 1)[-1] in _METADATA_NAMES
                limit = METADATA_BYTES if metadata else self.chunk_bytes
                if stop - start > limit:
                    what = "a metadata document" if metadata else "a chunk of this array"
                    raise CorruptFileError(f"{key}: {stop - start} bytes, more than {what} can take ({limit})")
                data = bytearray(stop - start)
                view, done = memoryview(data), 0
                while done < len(data):
                    count = os.preadv(fd, [view[done:]], start + done)
                    if count == 0:
                        raise TruncatedFileError(f"{key}: the file shrank while it was read")
                    done += count
                return data
            finally:
                os.close(fd)

        @staticmethod
        def _span(byte_range, size: int) -> tuple[int, int]:
            if byte_range is None:
                return 0, size
            if isinstance(byte_range, RangeByteRequest):
                return min(byte_range.start, size), min(max(byte_range.end, byte_range.start), size)
            if isinstance(byte_range, OffsetByteRequest):
                return min(byte_range.offset, size), size
            if isinstance(byte_range, SuffixByteRequest):
                return max(0, size - byte_range.suffix), size
            raise TypeError(f"unexpected byte range {byte_range!r}")

        def get_sync(self, key: str, *, prototype=None, byte_range=None):
            data = self.read(key, byte_range)
            return None if data is None else (prototype or default_buffer_prototype()).buffer.from_bytes(data)

        async def get(self, key: str, prototype=None, byte_range=None):
            data = await asyncio.to_thread(self.read, key, byte_range)
            return None if data is None else (prototype or default_buffer_prototype()).buffer.from_bytes(data)

        async def get_partial_values(self, prototype, key_ranges):
            return await asyncio.gather(*(self.get(key, prototype, byte_range) for key, byte_range in key_ranges))

        async def exists(self, key: str) -> bool:
            return await self.get(key) is not None

    return BeneathStore


# -- decoding a chunk into no more than it holds ----------------------------------------------------

LZMA_MEMORY = 128 << 20  # the most an xz or lzma chunk may make its decoder allocate (preset 9 takes 65 MiB)
_NUMCODEC_ATTRIBUTES = ("_blosc_codec", "_zstd_codec", "_gzip_codec", "_codec")  # zarr v3 codecs -> numcodecs


def _with_overhead(nbytes: int) -> int:
    """The most bytes a chunk of ``nbytes`` takes at any step of its encoding: compressors grow
    incompressible data by a fraction of a percent, checksums and headers by a few bytes."""
    return nbytes + nbytes // 64 + (64 << 10)


_ZSTD_UNDECLARED = -1  # a zstd frame written by a streaming encoder, which declares no decoded size


def _zstd_content_size(raw: memoryview) -> int | None:
    """The decoded size a zstd frame declares (its Frame_Content_Size); None when ``raw`` is no zstd frame,
    :data:`_ZSTD_UNDECLARED` when the frame does not say."""
    if len(raw) < 5 or bytes(raw[:4]) != b"\x28\xb5\x2f\xfd":
        return None
    descriptor = raw[4]
    single = (descriptor >> 5) & 1
    width = (single, 2, 4, 8)[descriptor >> 6]
    if width == 0:
        return _ZSTD_UNDECLARED
    start = 5 + (0 if single else 1) + (0, 1, 2, 4)[descriptor & 3]
    if len(raw) < start + width:
        return None
    return int.from_bytes(raw[start:start + width], "little") + (256 if width == 2 else 0)


def _inflate(codec, raw: memoryview, limit: int) -> bytes:
    """What a zlib, gzip, bzip2 or lzma ``codec`` decodes ``raw`` to, refused past ``limit`` bytes
    without ever holding more (numcodecs decodes these whole, however far they expand)."""
    kind = codec.codec_id
    if kind in ("zlib", "gzip"):
        def new():
            return zlib.decompressobj(15 if kind == "zlib" else 31)
    elif kind == "bz2":
        new = bz2.BZ2Decompressor
    else:
        def new():  # the dictionary an xz header asks for is allocated: bounded by what preset 9 needs
            raw_format = codec.format == lzma.FORMAT_RAW
            return lzma.LZMADecompressor(codec.format, memlimit=None if raw_format else LZMA_MEMORY,
                                         filters=codec.filters if raw_format else None)
    out, rest = bytearray(), bytes(raw)
    while rest:  # gzip, bzip2 and xz data may be several streams one after the other
        decoder = new()
        out += decoder.decompress(rest, limit + 1 - len(out))
        if len(out) > limit:
            raise CorruptFileError(f"{kind} data decode to more than the {limit} bytes a chunk can hold")
        if not decoder.eof:
            raise CorruptFileError(f"{kind} data end early")
        rest = decoder.unused_data if kind != "zlib" else b""
    return bytes(out)


def _precheck(codec, data, limit: int) -> bytes | None:
    """Refuse a compressed chunk whose header declares more than ``limit`` decoded bytes (blosc, lz4,
    zstd: numcodecs allocates what the header says), or decode it within the limit (zlib, gzip, bz2,
    lzma); None where ``codec`` may then decode it."""
    from numcodecs.compat import ensure_contiguous_ndarray

    raw = memoryview(ensure_contiguous_ndarray(data)).cast("B")
    kind = getattr(codec, "codec_id", None)
    if kind in ("zlib", "gzip", "bz2", "lzma"):
        return _inflate(codec, raw, limit)
    declared = None
    if kind == "blosc" and len(raw) >= 16:
        declared = int.from_bytes(raw[4:8], "little")
    elif kind == "lz4" and len(raw) >= 4:
        declared = int.from_bytes(raw[:4], "little")
    elif kind == "zstd":
        declared = _zstd_content_size(raw)
        if declared == _ZSTD_UNDECLARED:  # decoded here into at most ``limit`` bytes (imagecodecs: a fixed buffer)
            import imagecodecs

            try:
                return bytes(imagecodecs.zstd_decode(bytes(raw), out=limit))
            except imagecodecs.ZstdError as exc:
                raise CorruptFileError(f"zstd data decode to more than the {limit} bytes a chunk can hold, or are "
                                       f"damaged ({exc})") from None
    if declared is not None and declared > limit:
        raise CorruptFileError(f"{kind} data declare {declared} decoded bytes; a chunk holds at most "
                               f"{limit}")
    return None


def _checked(decoded, limit: int, kind: str):
    """``decoded`` (what a codec gave), refused when larger than ``limit``: codecs noa cannot bound
    beforehand are at least never passed on larger than a chunk."""
    nbytes = decoded.nbytes if hasattr(decoded, "nbytes") else len(decoded)
    if nbytes > limit:
        raise CorruptFileError(f"{kind} data decode to {nbytes} bytes; a chunk holds at most {limit}")
    return decoded


class _BoundedCodec:
    """The numcodecs compressor of a zarr v2 array, decoding no chunk to more than ``limit`` bytes."""

    def __init__(self, codec, limit: int) -> None:
        self.codec, self.limit, self.codec_id = codec, limit, codec.codec_id

    def decode(self, buf, out=None):
        decoded = _precheck(self.codec, buf, self.limit)
        return decoded if decoded is not None else _checked(self.codec.decode(buf, out), self.limit, self.codec_id)

    def encode(self, buf):
        return self.codec.encode(buf)

    def get_config(self) -> dict:
        return self.codec.get_config()


@functools.cache
def _bounded_bytes_class() -> type:
    """A zarr v3 bytes-to-bytes codec decoding no chunk to more than the chunk holds (built on first use)."""
    import asyncio  # zarr's stores are asynchronous; asyncio is loaded only for a store
    from dataclasses import dataclass

    from zarr.abc.codec import BytesBytesCodec

    @dataclass(frozen=True)
    class BoundedBytes(BytesBytesCodec):
        inner: BytesBytesCodec
        is_fixed_size = False

        async def _decode_single(self, chunk_bytes, chunk_spec):
            limit = _with_overhead(math.prod(chunk_spec.shape) * chunk_spec.dtype.to_native_dtype().itemsize)
            codec = next((getattr(self.inner, a) for a in _NUMCODEC_ATTRIBUTES if hasattr(self.inner, a)), None)
            if codec is not None:
                decoded = await asyncio.to_thread(_precheck, codec, chunk_bytes.as_numpy_array(), limit)
                if decoded is not None:
                    return chunk_spec.prototype.buffer.from_bytes(decoded)
            result = await self.inner._decode_single(chunk_bytes, chunk_spec)
            _checked(result.as_numpy_array(), limit, type(self.inner).__name__)
            return result

        async def _encode_single(self, chunk_bytes, chunk_spec):
            return await self.inner._encode_single(chunk_bytes, chunk_spec)

        def compute_encoded_size(self, input_byte_length: int, chunk_spec) -> int:
            return self.inner.compute_encoded_size(input_byte_length, chunk_spec)

    return BoundedBytes


def _bounded(codec):
    """``codec`` of a zarr v3 array with every bytes-to-bytes step bounded, in shards too."""
    from zarr.abc.codec import BytesBytesCodec
    from zarr.codecs import ShardingCodec

    if isinstance(codec, ShardingCodec):
        return ShardingCodec(chunk_shape=codec.chunk_shape, codecs=[_bounded(c) for c in codec.codecs],
                             index_codecs=codec.index_codecs, index_location=codec.index_location)
    return _bounded_bytes_class()(codec) if isinstance(codec, BytesBytesCodec) else codec


def _guard(path: Path, level: int, array) -> None:
    """Check ``array``'s chunks before any is read: a chunk (or shard) far larger than the part of the
    array it covers is refused, a chunk file larger than its chunk can need is refused when read, and
    decoding a chunk stops where it would give more than the chunk holds. So no memory or time goes in
    proportion to what the metadata or a chunk's header claim."""
    from zarr.codecs._v2 import V2Codec
    from zarr.registry import get_pipeline_class

    metadata = array.metadata
    shape, itemsize = tuple(array.shape), np.dtype(array.dtype).itemsize
    shards = getattr(array, "shards", None)
    for name, grid in (("chunks", array.chunks), ("shards", shards)):
        if grid is None:
            continue
        nbytes = math.prod(grid) * itemsize
        covered = math.prod(min(g, n) for g, n in zip(grid, shape)) * itemsize
        if nbytes > max(SPARE_CHUNK_BYTES, 2 * covered):
            raise HeaderError(f"{path}: {name}: level {level} has {name} of {tuple(grid)} ({nbytes} bytes each) for "
                              f"an array of shape {shape}; {name} this much larger than the array are refused")
    # A zarr v2 filter may store a wider type than the array's (astype): up to 8 bytes per element.
    filtered = metadata.zarr_format == 2 and bool(metadata.filters)
    stored = math.prod(shards or array.chunks) * (8 if filtered else itemsize)
    index = 16 * (math.prod(shards) // math.prod(array.chunks)) + 4 if shards else 0  # a shard's chunk offsets
    store = array.store
    if isinstance(store, _beneath_store_class()):
        store.chunk_bytes = _with_overhead(stored) + index
    if metadata.zarr_format == 2:
        limit = _with_overhead(math.prod(array.chunks) * (8 if filtered else itemsize))
        compressor = None if metadata.compressor is None else _BoundedCodec(metadata.compressor, limit)
        codecs = [V2Codec(filters=metadata.filters, compressor=compressor)]  # type: ignore[arg-type]  # a codec by duck typing
    else:
        codecs = [_bounded(codec) for codec in metadata.codecs]
    # zarr builds the pipeline from the metadata when it opens the array; this one replaces it
    object.__setattr__(array.async_array, "codec_pipeline", get_pipeline_class().from_codecs(codecs))


def _settle() -> None:
    """Let the other tasks of a zarr read that failed finish (within a few seconds): zarr stops at the
    first error and leaves them pending, and asyncio reports each one still pending when the process exits."""
    import asyncio  # zarr's stores are asynchronous; asyncio is loaded only for a store

    from zarr.core.sync import sync

    async def rest() -> None:
        others = asyncio.all_tasks() - {asyncio.current_task()}
        if others:
            await asyncio.wait(others, timeout=SETTLE_SECONDS)

    sync(rest())


def _why(store, exc: BaseException) -> str:
    """Why a zarr call failed, in words: the store's refusal of a file first (zarr reports some as
    missing arrays), else what zarr said. A failure of the remote storage under it is raised as the store said
    it (:func:`noa_core.io.remote.zarr_store`): the server's, not the data's."""
    failure = getattr(store, "failure", None)
    if failure is not None:
        raise failure from None
    return getattr(store, "refused", None) or _in_words(exc)


def _writable_store(path: Path) -> Any:
    """What zarr opens the store being written at ``path`` as: its folder, or its URL on object storage."""
    url = remote.remote_path(path)
    return str(path) if url is None else remote.zarr_store(url, read_only=False)


@contextlib.contextmanager
def _writing(path: Path) -> Iterator[None]:
    """Failures of the object storage a store is written to as one line naming it (none for a local store)."""
    url = remote.remote_path(path)
    if url is None:
        yield
        return
    try:
        with remote.errors(url, "written to"):
            yield
    except BaseException:
        _settle()  # the call's other chunks land before a failed store's objects are removed
        raise


def _open_node(path: Path):
    import zarr  # here: the first store read pays for it, no other command does

    url = remote.remote_path(path)
    # a remote store's chunks are fetched as they are decoded; a local one's files are opened beneath its folder
    store = _beneath_store_class()(path) if url is None else remote.zarr_store(url, read_only=True)
    try:
        return zarr.open(store=store, mode="r")
    except Exception as exc:  # zarr raises many types on damaged metadata; each becomes one line
        _settle()
        raise CorruptFileError(f"{path}: zarr metadata: {_why(store, exc)}") from None


class _Level:
    """The array of the chosen level, with what the metadata say of its axes."""

    def __init__(self, array, letters: str, sizes: dict[str, tuple[float, str]], origin: dict[str, float],
                 units: dict[str, str], labels: list[str], version: str) -> None:
        self.array = array
        self.letters = letters
        self.sizes = sizes
        self.origin = origin
        self.units = units
        self.labels = labels
        self.version = version


def _axis_letters(path: Path, axes: Sequence[Any]) -> str:
    """One letter per axis, as tifffile names them: T(ime), C(hannel), Z, Y, X; '?' for other kinds."""
    names: list[str] = []
    kinds: list[str | None] = []
    for axis in axes:
        if isinstance(axis, str):
            names.append(axis.lower())
            kinds.append(None)
        elif isinstance(axis, dict) and isinstance(axis.get("name"), str):
            names.append(axis["name"].lower())
            kinds.append(axis.get("type"))
        else:
            raise HeaderError(f"{path}: multiscales axes: {axis!r} is not an axis (a name, or an object with a name)")
    spatial = [i for i, (n, k) in enumerate(zip(names, kinds)) if k == "space" or (k is None and n in "zyx")]
    letters = []
    for i, (name, kind) in enumerate(zip(names, kinds)):
        if i in spatial:
            letters.append(name.upper() if name in ("z", "y", "x") else "ZYX"[3 - len(spatial) + spatial.index(i)])
        elif kind == "time" or (kind is None and name == "t"):
            letters.append("T")
        elif kind == "channel" or (kind is None and name == "c"):
            letters.append("C")
        else:
            letters.append("?")
    text = "".join(letters)
    if any(text.count(a) > 1 for a in "TCZYX"):
        raise HeaderError(f"{path}: multiscales axes: {names} name an axis twice")
    return text


def _transforms(path: Path, entries: Any, ndim: int) -> tuple[np.ndarray, np.ndarray]:
    """The scale and translation that a list of coordinateTransformations amounts to."""
    scale, translation = np.ones(ndim), np.zeros(ndim)
    for entry in entries or []:
        kind = entry.get("type") if isinstance(entry, dict) else None
        if kind == "identity":
            continue
        values = entry.get(kind) if kind in ("scale", "translation") else None
        if values is None:
            if isinstance(entry, dict) and "path" in entry:
                raise HeaderError(f"{path}: coordinateTransformations: transforms stored in files are not read")
            raise HeaderError(f"{path}: coordinateTransformations: {entry!r} is not a scale or translation")
        try:
            vector = np.asarray(values, float)
        except (TypeError, ValueError):
            raise HeaderError(f"{path}: coordinateTransformations: {kind} {values!r} is not numbers") from None
        if vector.shape != (ndim,):
            raise HeaderError(f"{path}: coordinateTransformations: {kind} has {vector.size} values for {ndim} axes")
        if kind == "scale":
            scale, translation = scale * vector, translation * vector
        else:
            translation = translation + vector
    return scale, translation


def _level(path: Path, options: OmeZarrReadOptions, notices: list[str]) -> _Level:
    """Open the multiscale image of the store at ``path`` and its level ``options.level`` (default 0)."""
    import zarr

    node = _open_node(path)
    if isinstance(node, zarr.Array):  # a bare array: no axes named, no pixel size
        if options.level:
            raise HeaderError(f"{path}: level: a bare zarr array has one level (0)")
        letters = {2: "YX", 3: "ZYX", 4: "TZYX"}.get(node.ndim)
        if letters is None:
            raise HeaderError(f"{path}: shape: a bare zarr array of {node.ndim} dimensions {node.shape}; "
                              "noa reads 2 (YX), 3 (ZYX) or 4 (TZYX)")
        notices.append(f"{path}: a zarr array without OME metadata: axes taken as {letters}, pixel size unknown")
        _guard(path, 0, node)
        return _Level(node, letters, {}, {}, {}, [], "none")
    attrs = node.attrs.asdict()
    ome = attrs["ome"] if isinstance(attrs.get("ome"), dict) else attrs
    multiscales = ome.get("multiscales")
    if not isinstance(multiscales, list) or not multiscales or not isinstance(multiscales[0], dict):
        what = "an HCS plate; open one of its images (plate/row/column/field)" if "plate" in ome or "well" in ome \
            else "a zarr group without OME multiscales metadata"
        raise HeaderError(f"{path}: multiscales: {what}")
    image = multiscales[0]
    if len(multiscales) > 1:
        notices.append(f"{path}: {len(multiscales)} multiscale images; reading the first")
    version = str(ome.get("version") or image.get("version") or "unknown")
    datasets = image.get("datasets")
    if not isinstance(datasets, list) or not datasets:
        raise HeaderError(f"{path}: multiscales datasets: none listed")
    level = options.level or 0
    if not 0 <= level < len(datasets):
        raise HeaderError(f"{path}: level: {level} is not in 0..{len(datasets) - 1}")
    dataset = datasets[level]
    where = dataset.get("path") if isinstance(dataset, dict) else None
    if not isinstance(where, str) or ".." in where.split("/") or where.startswith("/"):
        raise HeaderError(f"{path}: multiscales datasets: level {level} path {where!r} is not inside the store")
    try:
        array = node[where]
    except Exception as exc:
        _settle()
        raise CorruptFileError(f"{path}: level {level}: array {where!r} cannot be opened ({_why(node.store, exc)})") \
            from None
    if not isinstance(array, zarr.Array):
        raise HeaderError(f"{path}: level {level}: {where!r} is a group, not an array")
    _guard(path, level, array)
    axes = image.get("axes") or ["t", "c", "z", "y", "x"][5 - array.ndim:]  # NGFF 0.1-0.2 had no axes: TCZYX
    if len(axes) != array.ndim:
        raise HeaderError(f"{path}: multiscales axes: {len(axes)} axes for the {array.ndim} dimensions of level "
                          f"{level} {array.shape}")
    letters = _axis_letters(path, axes)
    scale, translation = _transforms(path, dataset.get("coordinateTransformations"), array.ndim)
    outer_scale, outer_translation = _transforms(path, image.get("coordinateTransformations"), array.ndim)
    scale, translation = scale * outer_scale, translation * outer_scale + outer_translation
    units = {letters[i]: a["unit"] for i, a in enumerate(axes)
             if isinstance(a, dict) and isinstance(a.get("unit"), str) and letters[i] in "ZYX"}
    sizes: dict[str, tuple[float, str]] = {}
    for i, letter in enumerate(letters):
        if letter not in "ZYX":
            continue
        if letter in units and scale[i] > 0:
            sizes[letter] = (float(scale[i]), units[letter])
        elif scale[i] != 1:
            notices.append(f"{path}: pixel size of {letter} unknown: scale {scale[i]:g} has no unit")
    origin = {letters[i]: float(translation[i]) for i in range(array.ndim) if letters[i] in units}
    noa_attrs = attrs.get("noa") if isinstance(attrs.get("noa"), dict) else {}
    labels = [str(x) for x in noa_attrs.get("labels", []) if isinstance(x, str)]
    return _Level(array, letters, sizes, origin, units, labels, version)


def _select_channel(path: Path, level: _Level, channel: int | None) -> tuple[tuple, tuple[int, ...], str]:
    """The selection of the level's array that a read takes (all, or one channel), its shape and letters."""
    shape = tuple(int(n) for n in level.array.shape)
    letters = level.letters
    if channel is None:
        return (slice(None),) * len(shape), shape, letters
    i = letters.find("C")
    count = shape[i] if i >= 0 else 1
    if not 0 <= channel < count:
        raise HeaderError(f"{path}: channel: {channel} is not in 0..{count - 1}")
    if i < 0:
        return (slice(None),) * len(shape), shape, letters
    selection = (slice(None),) * i + (channel,) + (slice(None),) * (len(shape) - i - 1)
    return selection, shape[:i] + shape[i + 1:], letters[:i] + letters[i + 1:]


def _blocks(shape: Sequence[int], chunks: Sequence[int], itemsize: int, budget: int) -> Iterator[tuple[slice, ...]]:
    """Chunk-aligned blocks covering ``shape``, each about ``budget`` bytes at most (one chunk at least):
    whole chunks along the last axes first, so that each block is as contiguous as it can be."""
    block = [max(1, min(c, n)) for c, n in zip(chunks, shape)]
    for i in reversed(range(len(shape))):
        factor = max(1, budget // (math.prod(block) * itemsize))
        block[i] = min(shape[i], block[i] * factor)
        if block[i] < shape[i]:
            break
    starts = [range(0, n, b) for n, b in zip(shape, block)]
    for corner in itertools.product(*starts):
        yield tuple(slice(s, min(s + b, n)) for s, b, n in zip(corner, block, shape))


def _dtype_of(path: Path, array) -> np.dtype:
    dtype = np.dtype(array.dtype)
    if dtype.kind not in "iufcb" or dtype.subdtype is not None:
        raise HeaderError(f"{path}: dtype: {dtype} is not a numeric type noa reads")
    return dtype.newbyteorder("=") if dtype.kind != "b" else dtype


def _decode_into(path: Path, level: _Level, selection: tuple, blocks: Sequence[tuple[slice, ...]],
                 put: Callable[[tuple[slice, ...], np.ndarray], None]) -> None:
    """Decode ``blocks`` of the selected data (zarr decodes each block's chunks) and ``put(block, data)``.

    Each block is decoded into the same reused buffer: fresh memory for every block would cost a page
    fault per 4 KiB, as much as the decoding itself."""
    from zarr.core.buffer.cpu import NDBuffer

    stored = np.dtype(level.array.dtype)
    with mapped.scratch_buffers():
        for block in blocks:
            it = iter(block)
            full = tuple(next(it) if isinstance(s, slice) else s for s in selection)
            extents = [b.stop - b.start for b in block]
            data = mapped.scratch(math.prod(extents) * stored.itemsize, 0).view(stored).reshape(extents)
            try:
                level.array.get_basic_selection(full, out=NDBuffer.from_numpy_array(data))
            except Exception as exc:
                _settle()
                raise CorruptFileError(f"{path}: chunk data: {_why(level.array.store, exc)}") from None
            put(block, data)


def _box_writer(fd: int, shape: Sequence[int], dtype: np.dtype,
                path: Path) -> Callable[[tuple[slice, ...], np.ndarray], None]:
    """``put(block, data)`` writing a decoded block, as ``dtype`` (native byte order), into its box of a
    C-ordered file of ``shape`` with ``pwrite``, one call per contiguous run: written through a mapping,
    every 4 KiB page of the file would fault first, which cost more than the decoding."""
    strides = _c_strides(shape)

    def put(block: tuple[slice, ...], data: np.ndarray) -> None:
        extents = [b.stop - b.start for b in block]
        whole = len(shape)  # the axes from ``whole`` on are whole in the block: runs span them
        while whole > 0 and extents[whole - 1] == shape[whole - 1]:
            whole -= 1
        outer = max(whole - 1, 0)  # a run spans axis ``outer`` (part of it) and those after it
        flat = np.ascontiguousarray(data, dtype).reshape(-1).view(np.uint8).data
        run = math.prod(extents[outer:]) * dtype.itemsize
        for n, index in enumerate(np.ndindex(*extents[:outer])):
            first = sum((b.start + i) * st for b, i, st in zip(block, index, strides)) \
                + block[outer].start * strides[outer]
            mapped.pwrite_all(fd, flat[n * run:(n + 1) * run], first * dtype.itemsize, path)

    return put


def _decode(path: Path, level: _Level, selection: tuple, shape: tuple[int, ...], dtype: np.dtype,
            to_file: bool) -> np.ndarray:
    """The selected data, decoded block by block: into an unlinked temporary file mapped read-only
    (``mmap``), else into memory."""
    nbytes = math.prod(shape) * dtype.itemsize
    # The room is checked before the blocks are listed: their list grows with the store's shape.
    folder = mapped.spill_folder(path, nbytes, "shape", "decoding") if to_file else None
    blocks = list(_blocks(shape, _selected_chunks(level, selection), dtype.itemsize, BLOCK_BYTES))
    if not to_file:
        data = np.empty(shape, dtype)
        _decode_into(path, level, selection, blocks, data.__setitem__)
        return data
    assert folder is not None  # spill_folder gives one for a file
    # Unlinked from the start (O_TMPFILE where the file system has it, else removed as soon as made): a
    # process killed while decoding leaves nothing behind.
    with tempfile.TemporaryFile(prefix="noa-", suffix=".zarr-decoded", dir=folder) as temp:
        allocate(path, temp.fileno(), nbytes, folder)
        _decode_into(path, level, selection, blocks, _box_writer(temp.fileno(), shape, dtype, path))
        return mapped.map_input(path, 0, dtype, math.prod(shape), private=True, fd=temp.fileno()).reshape(shape)


def _selected_chunks(level: _Level, selection: tuple) -> list[int]:
    return [level.array.chunks[i] for i, s in enumerate(selection) if isinstance(s, slice)]


# -- decoding by several processes (the Dask driver) ---------------------------------------------

DecodedKey = tuple[Path, int, "int | None"]
# Stores whose selected data other processes decoded into a shared file (:func:`decode_blocks`), by
# (store path, level, channel): reading one of them maps that file instead of decoding.
_DECODED: dict[DecodedKey, Path] = {}


def decoded_key(path: Path, options: OmeZarrReadOptions) -> DecodedKey:
    return Path(path).resolve(), options.level or 0, options.channel


@contextlib.contextmanager
def decoded_inputs(files: dict[DecodedKey, Path]) -> Iterator[None]:
    """Within the block, reading a store named in ``files`` maps its decoded data from the file given
    (a plain shared mapping, which tasks on other machines can map as well) instead of decoding it."""
    _DECODED.update(files)
    try:
        yield
    finally:
        for key in files:
            _DECODED.pop(key, None)


def decoding(path: Path, options: OmeZarrReadOptions,
             budget: int = BLOCK_BYTES) -> tuple[int, list[tuple[slice, ...]]]:
    """What decoding the data ``options`` select of the store at ``path`` takes: the bytes of the decoded data
    (C order, as :func:`decode_blocks` writes them) and the chunk-aligned blocks, each about ``budget``."""
    level, dtype, selection, shape, _ = _selected(path, options, [])
    blocks = list(_blocks(shape, _selected_chunks(level, selection), dtype.itemsize, budget))
    return math.prod(shape) * dtype.itemsize, blocks


def decode_blocks(path: Path, options: OmeZarrReadOptions, raw: Path, blocks: Sequence[tuple[slice, ...]]) -> None:
    """Decode ``blocks`` (from :func:`decoding`) of the store at ``path`` into their place in ``raw`` (a file
    of the decoded size), and make them durable: one task of a decoding shared by several processes."""
    level, dtype, selection, shape, _ = _selected(path, options, [])
    with os.fdopen(beneath.open_path(raw, os.O_RDWR | os.O_CLOEXEC), "r+b") as file:
        _decode_into(path, level, selection, blocks, _box_writer(file.fileno(), shape, dtype, path))
        os.fdatasync(file.fileno())


def allocate(path: Path, fd: int, nbytes: int, folder: str) -> None:
    """Give the temporary file ``fd`` (in ``folder``) the blocks of the ``nbytes`` decoded from the store at ``path``
    now: a disk that fills while the mapping is written would be a SIGBUS (killing the process)."""
    atomic.reserve(fd, nbytes, f"{path}: shape: decoding the {nbytes} bytes of data: no space left in {folder}")


def _metadata(path: Path, level: _Level, shape: Shape4, dtype: np.dtype, words: str,
              notices: list[str]) -> Metadata:
    pixel, unit = tiff._in_one_unit(path, level.sizes, notices)
    origin = [0.0, 0.0, 0.0]
    to = angstroms_per_unit(unit)
    for i, letter in enumerate("ZYX"):
        own = angstroms_per_unit(level.units.get(letter))
        value = level.origin.get(letter, 0.0)
        if value and to and own:
            origin[i] = value * own / to
        elif value and level.units.get(letter) == unit:
            origin[i] = value
    if unit is not None and unit.lower() == "angstrom":
        unit = ANGSTROM
    return Metadata(format=FORMAT.name, shape=shape, dtype=dtype.name, pixel_size=pixel, unit=unit,
                    origin=tuple(origin), labels=list(level.labels), order="C",
                    axes=f"{words} (NGFF {level.version})", path=str(path), notices=notices)


def _selected(path: Path, options: OmeZarrReadOptions,
              notices: list[str]) -> tuple[_Level, np.dtype, tuple, tuple[int, ...], str]:
    """The level, element type, selection (all, or one channel), shape and axis letters a read takes."""
    level = _level(path, options, notices)
    dtype = _dtype_of(path, level.array)
    selection, shape, letters = _select_channel(path, level, options.channel)
    # Before anything (even a stand-in array) is made in the shape's proportion: no real store holds more.
    if math.prod(shape) * dtype.itemsize > MAX_OUTPUT_BYTES:
        raise SizeError(f"{path}: shape: level {options.level or 0} of shape {tuple(level.array.shape)} "
                        f"({dtype}) is {math.prod(shape) * dtype.itemsize:.4g} bytes, more than the "
                        f"{MAX_OUTPUT_BYTES >> 40} TiB noa reads")
    return level, dtype, selection, shape, letters


def _parsed(path: Path, request: ReadRequest[OmeZarrReadOptions], data: bool):
    notices: list[str] = []
    level, dtype, selection, shape, letters = _selected(path, request.options, notices)
    if math.prod(shape) == 0:
        raise HeaderError(f"{path}: shape: level {request.options.level or 0} {tuple(level.array.shape)} is empty")
    # a stand-in over one element: only its shape and strides are looked at
    values = np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape,
                                             tuple(s * dtype.itemsize for s in _c_strides(shape)), writeable=False)
    if data:  # refused over this context's voxel limit from the metadata, before any chunk is decoded
        check_input_size(layout.as_shape4(tiff.map_axes(path, values, letters, None)[0].shape), str(path))
        decoded = _DECODED.get(decoded_key(path, request.options))
        if decoded is not None:  # decoded by other processes into a shared file
            values = mapped.map_input(decoded, 0, dtype, math.prod(shape)).reshape(shape)
        else:
            values = _decode(path, level, selection, shape, dtype, to_file=request.mmap)
    bdhw, words = tiff.map_axes(path, values, letters, None)
    metadata = _metadata(path, level, layout.as_shape4(bdhw.shape), dtype, words, notices)
    return bdhw, metadata


def _c_strides(shape: Sequence[int]) -> list[int]:
    """Element strides of a C-contiguous array of ``shape``."""
    strides: list[int] = []
    step = 1
    for n in reversed(shape):
        strides.insert(0, step)
        step *= n
    return strides


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


def stored_axes(shape: Shape4) -> tuple[tuple[int, ...], str]:
    """Stored shape and axis names: a batch of 1 and a depth of 1 are left out, y and x always kept."""
    b, d, h, w = shape
    kept = [(n, a) for n, a in ((b, "t"), (d, "z")) if n > 1] + [(h, "y"), (w, "x")]
    return tuple(n for n, _ in kept), "".join(a for _, a in kept)


def default_chunks(stored: Sequence[int], itemsize: int, budget: int = CHUNK_BYTES) -> tuple[int, ...]:
    """Whole sections (y, x) per chunk, several along the next axis out while they fit in ``budget``; a
    section larger than ``budget`` is cut into bands of rows (and a row into pieces)."""
    chunks = [1] * len(stored)
    h, w = stored[-2:]
    row = w * itemsize
    if row > budget:
        chunks[-1] = max(1, budget // itemsize)
    else:
        chunks[-1] = w
        chunks[-2] = min(h, max(1, budget // row))
    if len(stored) > 2 and chunks[-2] == h:
        chunks[-3] = min(stored[-3], max(1, budget // (h * row)))
    return tuple(chunks)


def pyramid_chunks(stored: Sequence[int], halved: Sequence[bool], itemsize: int, step: int) -> tuple[int, ...]:
    """The default chunks of a pyramid's level 0 that halves the stored axes ``halved`` ``step`` times over
    (``step`` = 2^(levels - 1)): :func:`default_chunks` within :data:`CHUNK_BYTES` with ``step`` sections of a
    volume per chunk, each chunk cut by the halved axes in multiples of ``step`` (or whole), so a tile of whole
    chunks maps to whole blocks of every level."""
    depth = min(stored[-3], step) if len(stored) > 2 and halved[-3] else 1
    chunks = list(default_chunks(stored, itemsize, max(itemsize, CHUNK_BYTES // depth)))
    for i, (n, c) in enumerate(zip(stored, chunks)):
        if halved[i] and c < n:
            chunks[i] = min(n, max(step, c // step * step))
    return tuple(chunks)


def halved_axes(shape: Shape4) -> tuple[int, ...]:
    """The BDHW axes a pyramid halves: H and W, and D of one volume; never the batch, and never the sections of
    a stack or tilt series (B > 1), which every level keeps."""
    return (1, 2, 3) if shape[0] == 1 and shape[1] > 1 else (2, 3)


def halved_shape(shape: Sequence[int], halved: Sequence[int]) -> tuple[int, ...]:
    """The shape one level down: ``ceil(n / 2)`` along the ``halved`` axes (OME-Zarr's convention)."""
    return tuple(-(-n // 2) if i in halved else n for i, n in enumerate(shape))


def _level_count(spec: OutputSpec) -> int:
    """How many levels the output holds (write options 'levels' or 'pyramid'; 1 when neither), checked against
    its shape: no level past the one where every halved axis is down to one pixel."""
    levels, pyramid = spec.write_options.get("levels"), bool(spec.write_options.get("pyramid"))
    if levels is not None and pyramid:
        raise ParameterError(f"{spec.path}: give {levels} levels or the pyramid down to {PYRAMID_SIZE} pixels, not "
                             "both", "levels")
    if pyramid:
        largest = max(spec.shape[2:])
        return 1 + (-(-largest // PYRAMID_SIZE) - 1).bit_length()
    if levels is None:
        return 1
    most = (max(spec.shape[i] for i in halved_axes(spec.shape)) - 1).bit_length() + 1
    if not 1 <= int(levels) <= most:
        raise ParameterError(f"{spec.path}: {levels} levels of the shape {tuple(spec.shape)}: halving it leaves one "
                             f"pixel after {most} levels; choose 1 to {most}", "levels")
    return int(levels)


@dataclasses.dataclass(frozen=True)
class StoreLayout:
    """What an OME-Zarr output holds: its NGFF version, stored axis names, each level's stored shape, chunks and
    shards (None: unsharded), the downsampling between levels, and ``grid``: the BDHW grid tiles align to, so
    that each tile covers whole chunks (whole shards, when sharded) of every level (level 0's, grown along the
    halved axes to multiples of 2^(levels - 1))."""

    version: str
    names: str
    shapes: list[tuple[int, ...]]
    chunks: list[tuple[int, ...]]
    shards: list[tuple[int, ...]] | None
    halved: tuple[bool, ...]  # per stored axis
    downsample: str
    grid: Shape4


def _given_sizes(spec: OutputSpec, name: str, stored: tuple[int, ...], names: str) -> tuple[int, ...] | None:
    """The sizes per stored axis the write option ``name`` ('chunks', 'shards') gives, checked; None if not given."""
    sizes = spec.write_options.get(name)
    if sizes is None:
        return None
    try:
        values = tuple(int(c) for c in (sizes.split(",") if isinstance(sizes, str) else sizes))
    except (TypeError, ValueError):
        raise FileFormatError(f"{spec.path}: {name}: {sizes!r} is not a list of integers") from None
    if len(values) != len(stored) or any(c < 1 for c in values):
        raise FileFormatError(f"{spec.path}: {name}: {values} must be {len(stored)} positive sizes, one per "
                              f"stored axis {tuple(names)} of shape {stored}")
    return values


def _sharded(spec: OutputSpec, version: str, chunks: tuple[int, ...] | None, shards: tuple[int, ...],
             stored: tuple[int, ...], names: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Level 0's chunks and shards for the given ``shards`` and ``chunks`` (None: whole rows of the shard within
    :data:`SHARD_CHUNK_BYTES`, each size a divisor of the shard's), checked: zarr v3 only, and every shard whole
    chunks. A shard is at most the whole chunks that fit in its axis: never larger than the array it covers."""
    if NGFF_VERSIONS[version] == 2:
        raise ParameterError(f"{spec.path}: NGFF {version} (zarr v2) has no shards; write {param('ngff', '0.5')} "
                             "(zarr v3) to store chunks in shards", "shards")
    if chunks is None:
        wanted = default_chunks([min(s, n) for s, n in zip(shards, stored)], spec.dtype.itemsize, SHARD_CHUNK_BYTES)
        chunks = tuple(w if s >= n else next(d for d in range(w, 0, -1) if s % d == 0)
                       for w, s, n in zip(wanted, shards, stored))
    else:
        for name, s, c in zip(names, shards, chunks):
            if s % c:
                raise ParameterError(f"{spec.path}: {shards} are not whole chunks of {chunks}: {s} along {name} is not "
                                     f"a multiple of {c}", "shards")
    first = tuple(min(c, n) for c, n in zip(chunks, stored))
    return first, tuple(min(s, n // c * c) for s, n, c in zip(shards, stored, first))


def store_layout(spec: OutputSpec) -> StoreLayout:
    """The layout of the output ``spec`` from its write options ('ngff', 'chunks', 'shards', 'levels', 'pyramid',
    'downsample'), checked."""
    version = str(spec.write_options.get("ngff") or DEFAULT_NGFF)
    if version not in NGFF_VERSIONS:
        raise FileFormatError(f"{spec.path}: ngff: {version!r} is not one noa writes ({', '.join(NGFF_VERSIONS)})")
    downsample = str(spec.write_options.get("downsample") or DOWNSAMPLING[0])
    if downsample not in DOWNSAMPLING:
        raise ParameterError(f"{spec.path}: {downsample!r} is not one of {', '.join(DOWNSAMPLING)}", "downsample")
    count = _level_count(spec)
    step = 1 << (count - 1)
    stored, names = stored_axes(spec.shape)
    kept = [i for i, n in enumerate(spec.shape) if i >= 2 or n > 1]  # the BDHW axis of each stored one
    halved = tuple(count > 1 and i in halved_axes(spec.shape) for i in kept)
    chunks, shards = _given_sizes(spec, "chunks", stored, names), _given_sizes(spec, "shards", stored, names)
    if shards is not None:
        first, outer = _sharded(spec, version, chunks, shards, stored, names)
    else:
        first = outer = tuple(min(c, n) for c, n in zip(chunks, stored)) if chunks is not None else \
            pyramid_chunks(stored, halved, spec.dtype.itemsize, step) if count > 1 else \
            default_chunks(stored, spec.dtype.itemsize)
    grid = tuple(min(n, math.lcm(o, step) if h else o) for n, o, h in zip(stored, outer, halved))
    if shards is not None and math.prod(grid) * spec.dtype.itemsize > MAX_SHARD_BYTES:
        raise ParameterError(f"{spec.path}: shards of {outer}: a tile of whole shards of every level, {grid}, would "
                             f"hold {math.prod(grid) * spec.dtype.itemsize} bytes, more than the {MAX_SHARD_BYTES} a "
                             "tile may; choose smaller shards", "shards")

    def share(sizes: tuple[int, ...], k: int) -> list[int]:
        """Level ``k``'s part of level 0's ``sizes``: a divisor of the grid's share of the level, so that each tile
        writes whole chunks (and shards) of every level."""
        return [s if not h or g >= n else math.gcd(s, g >> k) for s, n, g, h in zip(sizes, stored, grid, halved)]

    shapes, levels, level_shards = [stored], [first], [outer]
    for k in range(1, count):
        shape = halved_shape(shapes[-1], [i for i, h in enumerate(halved) if h])
        levels.append(tuple(min(m, c) for m, c in zip(shape, share(first, k))))
        # a shard is whole chunks, at most those that fit in the level's axis (as level 0's)
        level_shards.append(tuple(min(s, m // c * c) for m, s, c in zip(shape, share(outer, k), levels[-1])))
        shapes.append(shape)
    return StoreLayout(version, names, shapes, levels, level_shards if shards is not None else None, halved,
                       downsample, bdhw_chunks(grid, spec.shape))


def _axes_and_transforms(metadata: Metadata | None, names: str, notices: list[str],
                         path: Path) -> tuple[list[dict], list[float], list[float]]:
    """The NGFF axes, and level 0's scale and translation, for ``metadata``."""
    if metadata is not None:
        pixel, origin, notice = metadata.in_angstrom()
        if notice:
            notices.append(f"{path}: {notice}")
    else:
        pixel, origin = (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)
    by_name = {"z": 0, "y": 1, "x": 2}
    axes, scale, translation = [], [], []
    for name in names:
        if name == "t":
            axes.append({"name": "t", "type": "time"})
            scale.append(1.0)
            translation.append(0.0)
            continue
        size = float(pixel[by_name[name]])
        axis = {"name": name, "type": "space"}
        if size > 0:
            axis["unit"] = _UNIT_NAMES[ANGSTROM]
        axes.append(axis)
        scale.append(size if size > 0 else 1.0)
        translation.append(float(origin[by_name[name]]) if size > 0 else 0.0)
    return axes, scale, translation


def level_transforms(scale: Sequence[float], translation: Sequence[float], halved: Sequence[bool],
                     level: int) -> list[dict]:
    """The coordinateTransformations of ``level`` from level 0's ``scale`` and ``translation``: the pixel
    2^level times larger along the halved axes, and its centre moved by half the pixels it covers less one,
    ``(2^level - 1) / 2`` level-0 pixels (a translation only where one is not zero)."""
    factors = [float(1 << level) if h else 1.0 for h in halved]
    moved = [t + (f - 1) / 2 * s for s, t, f in zip(scale, translation, factors)]
    transforms: list[dict] = [{"type": "scale", "scale": [s * f for s, f in zip(scale, factors)]}]
    if any(moved):
        transforms.append({"type": "translation", "translation": moved})
    return transforms


def stored_key(key: Sequence[slice], shape: Shape4) -> tuple[slice, ...]:
    """The selection of the stored array (:func:`stored_axes`) that BDHW ``key`` is."""
    return tuple(k for i, (k, n) in enumerate(zip(key, shape)) if i >= 2 or n > 1)


def bdhw_chunks(chunks: Sequence[int], shape: Shape4) -> Shape4:
    """The stored ``chunks`` as a BDHW shape (1 along an axis that is not stored)."""
    it = iter(chunks)
    return layout.as_shape4(tuple(next(it) if i >= 2 or n > 1 else 1 for i, n in enumerate(shape)))


def check_room(store: Path, spec: OutputSpec, levels: StoreLayout) -> None:
    """Refuse a store of more than :data:`MAX_CHUNKS` chunk (or shard) files, or one the file system of ``store``
    has not the room for with every chunk of every level stored uncompressed (what the data need at most: blosc
    adds 16 bytes to a chunk it cannot compress, a shard 16 bytes per chunk and 4 to its index, and each file
    takes whole blocks), before anything is written. Object storage has no such limit to look up."""
    room = None if remote.is_remote(store) else os.statvfs(store)
    block = (room.f_frsize or 4096) if room is not None else 4096
    count = need = 0
    outers = levels.shards or levels.chunks  # what each file holds
    for stored, chunks, outer in zip(levels.shapes, levels.chunks, outers):
        files = math.prod(-(-n // o) for n, o in zip(stored, outer))
        inner = math.prod(outer) // math.prod(chunks)
        count += files
        nbytes = inner * (math.prod(chunks) * spec.dtype.itemsize + 16) + (16 * inner + 4 if levels.shards else 0)
        need += files * -(-nbytes // block) * block
    need += 64 << 10
    stored, outer = levels.shapes[0], outers[0]
    kind = "shards" if levels.shards else "chunks"
    free = need if room is None else room.f_bavail * room.f_frsize
    if need > free:
        pyramid = len(levels.shapes) > 1
        what = f"{len(levels.shapes)} levels of {tuple(stored)}" if pyramid else f"{tuple(stored)}"
        raise NoSpaceError(f"{spec.path}: shape: the store of {what} {spec.dtype} may need {need} bytes "
                           f"({count} {kind} of {tuple(outer)}{' or less' if pyramid else ''}, uncompressed), and "
                           f"its file system has {free} bytes free")
    if count > MAX_CHUNKS:
        raise ParameterError(f"{spec.path}: {kind} of {tuple(outer)} cut the stored shape {tuple(stored)} into "
                             f"{count} {kind[:-1]} files, more than the {MAX_CHUNKS} noa writes; choose larger {kind}",
                             kind)


# The group attribute the image's own attributes wait under while its chunks are written (:func:`complete_store`)
WRITING = "noa_writing"


def create_store(store: Path, spec: OutputSpec) -> tuple[Shape4, list[str]]:
    """Create the OME-Zarr image of ``spec`` in the empty directory ``store`` (or under a URL of object storage):
    group, an array per level with no chunk written yet, and the image's attributes under :data:`WRITING`
    (:func:`check_room` first). Returns the grid tiles align to (BDHW: :attr:`StoreLayout.grid`) and notices."""
    with _writing(store):
        return _create_store(store, spec)


def _create_store(store: Path, spec: OutputSpec) -> tuple[Shape4, list[str]]:
    import numcodecs
    import zarr

    notices: list[str] = []
    levels = store_layout(spec)
    check_room(store, spec, levels)
    zarr_format = NGFF_VERSIONS[levels.version]
    # lz4 with byte shuffle: fast enough to keep up with the disk; image data barely shrink with more work
    if zarr_format == 2:
        compressors = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
    else:
        from zarr.codecs import BloscCodec

        compressors = BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")
    group = zarr.open_group(store=_writable_store(store), mode="w-", zarr_format=zarr_format)
    for level, (stored, chunks) in enumerate(zip(levels.shapes, levels.chunks)):
        group.create_array(str(level), shape=stored, chunks=chunks, dtype=spec.dtype, compressors=compressors,
                           shards=levels.shards[level] if levels.shards else None, fill_value=0,
                           dimension_names=tuple(levels.names) if zarr_format == 3 else None)
    axes, scale, translation = _axes_and_transforms(spec.metadata, levels.names, notices, spec.path)
    image: dict[str, Any] = {"name": spec.path.name, "axes": axes, "datasets": [
        {"path": str(level), "coordinateTransformations": level_transforms(scale, translation, levels.halved, level)}
        for level in range(len(levels.shapes))]}
    if len(levels.shapes) > 1:
        image["type"] = levels.downsample  # NGFF: the downsampling's name (what StoreTiles reads back)
    labels = list(spec.metadata.labels) if spec.metadata is not None else []
    if spec.label:
        labels.append(spec.label)
    attributes: dict[str, Any] = {}
    if zarr_format == 2:
        attributes["multiscales"] = [{"version": levels.version, **image}]
    else:
        attributes["ome"] = {"version": levels.version, "multiscales": [image]}
    if labels:
        attributes["noa"] = {"labels": labels}
    group.attrs.update({WRITING: attributes})
    return levels.grid, notices


def complete_store(store: Path) -> None:
    """The image's attributes, waiting under :data:`WRITING` while the chunks were written, made the group's: the
    last thing written, after which the store is an OME-Zarr image."""
    import zarr

    with _writing(store):
        group = zarr.open_group(store=_writable_store(store), mode="r+")
        group.attrs.put(cast(dict[str, Any], group.attrs[WRITING]))


def halve(block: np.ndarray, halved: Sequence[int], downsample: str) -> np.ndarray:
    """``block`` (BDHW) one level down along the ``halved`` axes: each 2x2(x2) box's mean, or its first
    (top-left) value with ``downsample`` 'nearest'. An odd size's last box is the mean of the values it has
    (one or two along that axis, not padded). The mean is that of ``noa bin`` (the same kernel): summed in
    float64, integers rounded half to even."""
    if downsample == "nearest":
        return np.ascontiguousarray(block[tuple(slice(None, None, 2) if i in halved else slice(None)
                                                for i in range(4))])
    out = np.empty(halved_shape(block.shape, halved), block.dtype)
    # bin's rule for float16: summed from float32 copies, the mean stored through float32
    source = block.astype(np.float32) if block.dtype == np.float16 else block
    target = np.empty(out.shape, np.float32) if block.dtype == np.float16 else out
    # whole 2x2(x2) boxes, then the partial boxes of odd sizes (factor 1 along those axes)
    pieces = [[(slice(0, n // 2), slice(0, n // 2 * 2), 2)] + ([(slice(n // 2, n // 2 + 1), slice(n - 1, n), 1)]
                                                                if n % 2 else [])
              if i in halved else [(slice(None), slice(None), 1)] for i, n in enumerate(block.shape)]
    for piece in itertools.product(*pieces):
        into, taken, factors = zip(*piece)
        if all(s.start != s.stop for s in into if s != slice(None)):
            kernels.runtime.launch(kernels.binning.bin_kernel, True, source[taken], target[into], *factors[1:],
                                   np.empty(0, np.float64))
    if target is not out:
        np.copyto(out, target, casting="unsafe")
    return out


def _multiscale(attrs: Mapping[str, Any]) -> dict:
    """The first multiscale image of a group's attributes, in NGFF 0.4 (top level) or 0.5 ('ome')."""
    ome = attrs["ome"] if isinstance(attrs.get("ome"), dict) else attrs
    return ome["multiscales"][0]


class StoreTiles:
    """Output tiles written as chunks of the store a :class:`~noa_core.io.stream.Region` names: the
    tile target of an OME-Zarr output (:class:`~noa_core.io.stream.TileFile`'s twin for stores).

    A tile that covers whole chunks (the planner aligns tiles to the store's grid) is encoded and written
    without reading anything back, so processes writing different tiles never touch the same chunk
    file. A tile that cuts chunks (:meth:`~noa_core.io.stream.Writer.write_block`) is merged into them
    by zarr, which is right within one process only. In a pyramid, each tile is halved (:func:`halve`)
    level after level and written into each: every level from the one read of the input that made the tile.
    """

    def __init__(self, region) -> None:
        import zarr

        self.region = region
        # Tiles are written from one thread per core: encoding is most of a chunk's cost, and whole-chunk
        # tiles are independent (pwrite into a file is cheap enough for one thread).
        self.writers = max(1, min(4, mapped.io_threads()))
        # a local store's chunks are written through its folder, opened once (beneath the data root on a service's
        # worker) and checked to be the Writer's: not into a folder put at its path since
        self._folder: int | None = None
        path = region.path
        if remote.remote_path(path) is None:
            path, self._folder = beneath.folder_path(path)
        try:
            if self._folder is not None:
                region.check_opened(self._folder)
            with _writing(region.path):
                group = zarr.open_group(store=_writable_store(path), mode="r+")
                image = _multiscale(cast(dict[str, Any], group.attrs[WRITING]))
            # the levels' arrays (None once closed), each chunk written as it comes: zarr would first compare every
            # value of a chunk with the fill value, byte by byte (a fifth of a pyramid's time), to leave out a chunk
            # of zeros, which compresses to a few bytes anyway
            self.levels: list[Any] | None = [
                cast(zarr.Array, group[d["path"]]).with_config({"write_empty_chunks": True})
                for d in image["datasets"]]
        except BaseException:
            self.close()
            raise
        self.downsample = str(image.get("type") or DOWNSAMPLING[0])
        self.halved = halved_axes(region.shape)
        self.step = 1 << (len(image["datasets"]) - 1)

    def buffer(self, key: Sequence[slice], slot: int) -> np.ndarray:
        """A C-ordered BDHW buffer for tile ``key``, reused from tile to tile (``slot``)."""
        extents = [k.stop - k.start for k in key]
        return mapped.scratch(math.prod(extents) * self.region.dtype.itemsize, slot).view(self.region.dtype) \
            .reshape(extents)

    def write(self, key: Sequence[slice], buffer: np.ndarray) -> None:
        assert self.levels is not None, "written after close"
        if self.step > 1 and not all(key[i].start % self.step == 0 and (key[i].stop % self.step == 0 or
                                                                        key[i].stop == self.region.shape[i])
                                     for i in self.halved):
            raise LayoutError(f"{self.region.shown}: the tile {tuple((k.start, k.stop) for k in key)} cuts the "
                              f"pyramid's blocks of {self.step} pixels along {layout.AXIS_NAMES[self.halved[0]]}; "
                              f"write whole blocks (runs of {self.step} sections of a volume)")
        self._store(self.levels[0], key, buffer)
        for array in self.levels[1:]:
            key = tuple(slice(k.start // 2, -(-k.stop // 2)) if i in self.halved else k for i, k in enumerate(key))
            buffer = halve(buffer, self.halved, self.downsample)
            self._store(array, key, buffer)

    def _store(self, array, key: Sequence[slice], buffer: np.ndarray) -> None:
        selection = stored_key(key, self.region.shape)
        try:
            with _writing(self.region.path):
                array[selection] = buffer.reshape([s.stop - s.start for s in selection])
        except OSError as exc:
            atomic.raise_if_full(exc, self.region.shown, "no space left on device for its chunks")
            raise

    def sync(self) -> None:
        """Nothing to do: zarr closes each chunk file it writes, and the commit syncs the whole store."""

    def close(self) -> None:
        self.levels = None
        if self._folder is not None:
            os.close(self._folder)
            self._folder = None


class OmeZarrFormat:
    """OME-Zarr stores (directories): the OME-Zarr :class:`~noa_core.io.protocol.ImageFormat`.

    ``store`` is True: :func:`noa_core.io.formats.detect` looks for it in directories, and the Writer
    calls :meth:`create_store` with a temporary directory instead of :meth:`create`, then writes tiles
    through :meth:`tiles`.
    """

    name = "omezarr"
    title = "OME-Zarr"
    extensions = EXTENSIONS
    output_extensions = EXTENSIONS
    media_type = "application/vnd.ome.zarr"  # never sent: a store is a directory (see formats.STORES)
    compressed_input = False
    header_statistics = False  # NGFF has no header statistics
    store = True
    checks_size = True
    indexed = False
    read_options = OmeZarrReadOptions
    lacking: Mapping[str, str] = {"as_stack/as_volume": "OME-Zarr axes name their meaning",
                                  "series": "OME-Zarr stores have no series"}

    def detect(self, head: bytes, path: Path) -> bool:
        return is_store(path)

    def claim_by_extension(self, head: bytes, path: Path) -> bool:
        raise FileFormatError(f"{path}: an OME-Zarr store is a directory, and this is a file")

    def read(self, path: Path, request: ReadRequest[OmeZarrReadOptions]) -> tuple[Array, Metadata]:
        bdhw, metadata = _parsed(path, request, data=True)
        return asarray(bdhw), metadata

    def probe(self, path: Path, request: ReadRequest[OmeZarrReadOptions]) -> Probe:
        view, metadata = _parsed(path, request, data=False)
        strides = layout.as_strides4(tuple(s // view.itemsize for s in view.strides))
        return Probe(metadata.shape, strides, np.dtype(view.dtype), metadata)

    def check_writable(self, dtype: np.dtype, shape: Shape4, path: Path) -> None:
        if dtype.kind not in "iuf" or dtype.subdtype is not None:
            raise WriteDTypeError(f"{path}: dtype: {dtype} cannot be stored in OME-Zarr by noa; pass dtype= a "
                                  "real numeric type (uint8, uint16, float32, ...)")
        if math.prod(shape) == 0:
            raise FileFormatError(f"{path}: shape: {shape} is empty; nothing to write")

    def create(self, temp: Path, spec: OutputSpec) -> Created:
        raise FileFormatError(f"{spec.path}: an OME-Zarr output is a directory; it is made by create_store")

    def finish(self, temp: Path, spec: OutputSpec, statistics: HeaderStatistics) -> None:
        raise FileFormatError(f"{spec.path}: an OME-Zarr output is a directory; it is made by create_store")

    def create_store(self, store: Path, spec: OutputSpec) -> tuple[Shape4, list[str]]:
        chunks, notices = create_store(store, spec)
        if spec.order == "F":
            notices.append(f"{spec.path}: order: OME-Zarr chunks are stored row-major; order F does not apply")
        return chunks, notices

    def complete_store(self, store: Path) -> None:
        complete_store(store)

    def tiles(self, region) -> StoreTiles:
        return StoreTiles(region)


FORMAT = OmeZarrFormat()

"""Streaming outputs: fill a temporary file tile by tile (tiles planned by :mod:`noa_core.compute.tiles`), then
commit it atomically.

Peak memory does not grow with the file: :func:`fill` walks the output in tiles whose buffers (one
for the output, one per source read) stay under a budget. Each tile's sources are read with
``pread``, the tile is computed into a reused buffer laid out as the file is, and a writer thread
writes it with ``pwrite`` while the next one is read and computed; its writeback to the disk starts
at once, so the commit's fsync has little left to wait for. Header statistics are accumulated tile
by tile (Chan's parallel mean/variance), so the data are read once. Nothing is memory-mapped on
this path: page faults on a mapped output cost more than the copy itself.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import math
import mmap as mmap_module
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np

from noa_core.array import Array, asarray, layout
from noa_core.array.layout import Shape4
from noa_core.compute import compute_path
from noa_core.compute.moments import RunningStatistics
from noa_core.compute.tiles import (
    TILE_BYTES,
    Compute,
    Key,
    TileReads,
    TileTarget,
    checked_copy,
    plan_tile,
    plan_tiles,
    same_tile,
    storing,
    tiles,
)
from noa_core.errors import (
    FileFormatError,
    LayoutError,
    OutputExistsError,
    PathRefusedError,
    ShapeError,
    TruncatedFileError,
    param,
)
from noa_core.io import atomic, beneath, formats, libc, mapped, remote
from noa_core.io.metadata import Metadata
from noa_core.io.protocol import IndexedFormat, OutputSpec, StoreFormat
from noa_core.limits import check_output_size

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

SPLIT_BYTES = 16 << 20  # what splitting a filled data file into several holds at a time
# The write options of stores alone (OME-Zarr's chunks and pyramid levels), refused for a file when given
STORE_WRITE_OPTIONS: dict[str, Callable[[Any], bool]] = {
    "chunks": lambda value: value is not None, "shards": lambda value: value is not None,
    "levels": lambda value: value is not None,
    "pyramid": bool, "downsample": lambda value: value is not None}

# ---------------------------------------------------------------------------------------------
# Writer
# ---------------------------------------------------------------------------------------------


def _map_packed(path: Path, offset: int, dtype: np.dtype, shape: Shape4,
                order: str) -> tuple[mmap_module.mmap, Array]:
    """A writable BDHW Array over data packed in ``order`` at byte ``offset`` of ``path``."""
    b, d, h, w = shape
    mm, flat = mapped.map_output(path, offset, dtype, math.prod(shape))
    stored = flat.reshape((b, d, w, h) if order == "F" else (b, d, h, w))
    return mm, asarray(stored.transpose(0, 1, 3, 2) if order == "F" else stored)


@dataclass(frozen=True)
class Region:
    """Where a :class:`Writer`'s data lie in its temporary file, for other processes to fill tiles of.

    Picklable: a Dask task fills tiles of it by path (:meth:`fill`) and returns their statistics; the
    Writer's owner then calls :meth:`Writer.complete`. The path must be the same on every machine
    (a shared file system).
    """

    path: Path
    offset: int
    dtype: np.dtype
    shape: Shape4
    order: str
    values_dtype: np.dtype | None = None  # the type asked for, when the format stores a wider one
    store_format: str | None = None  # a store (a directory of chunks, ``path``) of this format, not a file
    measured: bool = True  # False: an output without header statistics (a picture): its tiles are not measured
    named: Path | None = None  # the output as the user named it, for messages (None: ``path``)
    # (device, inode) of the temporary file or store the Writer made at ``path``: a process given the path refuses
    # another put there since (None: unchecked)
    identity: tuple[int, int] | None = None

    @property
    def shown(self) -> Path:
        """How messages name the output: as the user did, not its temporary file."""
        return self.named or self.path

    def check_opened(self, fd: int) -> None:
        """PathRefusedError unless ``fd`` (``path`` opened) is the temporary file or store the Writer made: another
        put at its path since (by a rename in its folder) is not written into."""
        if self.identity is None:
            return
        if atomic.held_identity(fd) != self.identity:
            raise PathRefusedError(f"{self.shown}: its temporary {'store' if self.store_format else 'file'} was "
                                   "replaced while the work waited, so nothing is written into what took its place")

    def target(self) -> TileTarget:
        """Where tiles are written: this file with ``pwrite``, or the store's chunks."""
        if self.store_format is None:
            return TileFile(self)
        return cast(StoreFormat, formats.by_name(self.store_format)).tiles(self)

    def fill(self, reads: TileReads, keys: Sequence[Key]) -> list[RunningStatistics]:
        """Compute and write the tiles ``keys`` from any process (:func:`stream_tiles`), make them durable
        (on a network file system they must reach the server before the task reports them done), and
        return the statistics of each tile."""
        target = self.target()
        try:
            stats = stream_tiles(reads, keys, target, self.values_dtype or self.dtype, measure=self.measured)
            target.sync()
        finally:
            target.close()
        return stats


class TileFile:
    """Output tiles written with ``pwrite`` into the packed data of a :class:`Region`'s file.

    Not through a mapping: a page fault per 4 KiB of a mapped output cost more than computing the
    tile. A tile is computed into a buffer laid out as the file is (:meth:`buffer`), so that each
    write is one contiguous run per index of the dimensions the tile does not span whole.
    """

    writers = 1  # one thread pwrites; its writeback is started by another

    def __init__(self, region: Region) -> None:
        self.region = region
        self.itemsize = region.dtype.itemsize
        self.strides = layout.strides_for(region.shape, region.order)
        self.outer_first = sorted(range(4), key=lambda i: -self.strides[i])
        self.fd = beneath.open_path(region.path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            region.check_opened(self.fd)
        except BaseException:
            os.close(self.fd)
            raise
        # Writeback is started from a thread of its own: the call blocks while the disk's queue is full,
        # and the tiles after it need not wait for that. (None until a tile short of the whole file is written:
        # the commit's fdatasync follows a whole file's write at once.)
        self._writeback: Any = None

    def sync(self) -> None:
        atomic.sync(self.fd, self.region.shown, data_only=True)

    def close(self) -> None:
        if self._writeback is not None:
            self._writeback.shutdown(wait=True)
        os.close(self.fd)

    def buffer(self, key: Key, slot: int) -> np.ndarray:
        """A BDHW buffer for tile ``key``, packed in the file's order, reused from tile to tile (``slot``)."""
        extents = [key[i].stop - key[i].start for i in self.outer_first]
        raw = mapped.scratch(math.prod(extents) * self.itemsize, slot).view(self.region.dtype).reshape(extents)
        return raw.transpose(np.argsort(self.outer_first))

    def write(self, key: Key, buffer: np.ndarray) -> None:
        """Write ``buffer`` (from :meth:`buffer`) as tile ``key`` of the file, then start its writeback."""
        extents, first, run, outer = self._runs(key)
        data = buffer.transpose(self.outer_first).reshape(-1).view(np.uint8).data
        position = 0
        for index in np.ndindex(*(extents[i] for i in outer)):
            at = first + sum(n * self.strides[i] for n, i in zip(index, outer)) * self.itemsize
            mapped.pwrite_all(self.fd, data[position:position + run], at, self.region.shown)
            position += run
        self._written(extents, first)

    def copy(self, key: Key, buffer: np.ndarray, source: tuple[int, int, Path]) -> None:
        """Write tile ``key`` as :meth:`write` does, its bytes copied by the kernel from the input file where
        ``buffer`` was read from, as they lie there (``source``: :func:`noa_core.io.mapped.file_run`), when the
        tile is one run of the file: from page cache to page cache, half the system time of writing the buffer
        (a 61-tilt series of 2048², on 2 cores). A file system that cannot copy has the buffer written."""
        extents, first, run, outer = self._runs(key)
        fd, at, path = source
        one_run = all(extents[i] == 1 for i in outer)
        done = 0
        while one_run and done < run:
            try:
                copied = os.copy_file_range(fd, self.fd, run - done, at + done, first + done)
            except OSError as exc:
                atomic.raise_if_full(exc, self.region.shown)
                if exc.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EBADF):
                    raise
                break
            if copied == 0:
                raise TruncatedFileError(f"{path}: data: the file changed size while being read (it holds "
                                         f"{os.fstat(fd).st_size} bytes now)")
            done += copied
        if done < run:
            self.write(key, buffer)
            return
        self._written(extents, first)

    def _runs(self, key: Key) -> tuple[list[int], int, int, list[int]]:
        """Tile ``key``'s extents, the file offset of its first byte, the bytes of each of its contiguous runs in
        the file and the dimensions (outermost first) along which there is a run per index."""
        extents = [k.stop - k.start for k in key]
        run, joining = self.itemsize, True
        outer: list[int] = []
        for i in reversed(self.outer_first):  # innermost first: a run spans dimensions while they are whole
            if joining:
                run *= extents[i]
                joining = extents[i] == self.region.shape[i]
            else:
                outer.insert(0, i)
        first = self.region.offset + sum(k.start * s for k, s in zip(key, self.strides)) * self.itemsize
        return extents, first, run, outer

    def _written(self, extents: list[int], first: int) -> None:
        """Start the writeback of the tile of ``extents`` written from byte ``first`` (short of the whole file)."""
        if tuple(extents) == tuple(self.region.shape):
            return
        if self._writeback is None:
            from concurrent.futures import ThreadPoolExecutor

            self._writeback = ThreadPoolExecutor(1, "noa-writeback")
        last = first + sum((n - 1) * s for n, s in zip(extents, self.strides)) * self.itemsize + self.itemsize
        self._writeback.submit(_start_writeback, self.fd, first, last - first)


def _start_writeback(fd: int, offset: int, length: int) -> None:
    """Linux's sync_file_range(..., SYNC_FILE_RANGE_WRITE), which starts writing pages back without
    waiting: the disk then works while later tiles are computed, and the commit's fsync has little left
    to wait for (dd conv=fsync writes everything at its end)."""
    import ctypes

    call = libc.function("sync_file_range", ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    if call is not None:
        call(fd, offset, length, 2)  # SYNC_FILE_RANGE_WRITE; advice: a failure changes nothing but the timing


class Writer:
    """An output file being filled; use through :func:`create` as a context manager.

    ``array`` is a writable Array over the memory-mapped output (BDHW, packed in ``order``). Fill it
    with :func:`copy_into`, :meth:`write_block`, or directly; on a clean exit the header statistics
    are completed and the file is renamed into place; on an exception nothing is left behind.
    Do not keep ``array`` after the ``with`` block. The format (from the extension) lays out the file
    and writes its header; the Writer maps, fills and commits it. An indexed format's output (a particle
    file) is its data file (``data_path``, the stack) filled the same way, split into its data files where the
    format says several (a stack per source stack), then the index naming them, all placed together.
    """

    def __init__(self, path: str | os.PathLike, shape: int | Sequence[int], dtype, metadata: Metadata | None,
                 order: str, overwrite: bool, label: str | None,
                 write_options: Mapping[str, str] | None = None) -> None:
        # a store (OME-Zarr: a directory) is refused or replaced as a directory, never as a file
        self.path = atomic.check_output(path, overwrite, directory=formats.names_store(path))
        self.format = formats.output_format(self.path)
        self.shape = layout.as_shape4(shape)
        self.dtype = np.dtype(dtype)  # what the file stores, once created (MRC widens uint8)
        self.values_dtype = self.dtype  # the type values are converted to, whatever the file stores
        self.order: str = layout.as_order(order)
        self.metadata = metadata
        self.notices: list[str] = []
        self._spec = OutputSpec(self.path, self.shape, self.dtype, self.order, metadata, label,
                                dict(write_options or {}))
        self._overwrite = overwrite
        self._stats = RunningStatistics()
        self.format.check_writable(self.dtype, self.shape, self.path)
        check_output_size(self.shape, self.dtype.itemsize, str(self.path))  # before anything is made for it
        self._written: np.ndarray | None = None  # sections filled via write_block (made on its first call)
        self._complete = False
        self._temp: atomic.TemporaryOutput | None = None
        self._reservation: atomic.Reservation | None = None  # the file's blocks being allocated (:meth:`_reserve`)
        self._reserved = False
        self._size = 0  # the file's bytes, once created
        self._mmap: mmap_module.mmap | None = None
        self._array: Array | None = None
        self.is_store = self.format.store  # a directory of chunks, not a file
        if not self.is_store:
            for name, given in STORE_WRITE_OPTIONS.items():
                if given((write_options or {}).get(name)):
                    what = "are not chunked" if name in ("chunks", "shards") else "hold one level, no pyramid"
                    raise FileFormatError(f"{self.path}: {name}: {self.format.title} files {what}; {param(name)} is "
                                          "for OME-Zarr outputs (.ome.zarr)")
        if self.format.indexed and remote.is_remote(self.path):
            raise FileFormatError(f"{self.path}: a {self.format.title} file and the stacks it names are written to "
                                  "this machine's folders; write them here, then upload them")
        if not self.format.indexed and (write_options or {}).get("stack_per_input"):
            raise FileFormatError(f"{self.path}: {param('stack_per_input')} is for particle outputs (.star, .cs); "
                                  f"{self.format.title} outputs are one file")
        # where the data go: the file itself, or the data files an index names (a particle file's stacks), filled
        # as one (data_path) and then split into them where they are several
        self.data_files: list[tuple[Path, np.ndarray]] = []
        self.data_path = self.path
        self.data_shown = self.path  # the data's file as messages name it
        if self.format.indexed:
            indexed = cast(IndexedFormat, self.format)
            self.data_path, self.data_files = indexed.data_path(self.path), indexed.data_files(self._spec)
            if [data_file for data_file, _ in self.data_files] == [self.data_path]:  # else split into stacks later
                self.data_shown = self.data_path
            for data_file, _ in self.data_files:
                if data_file.parent.is_dir():
                    atomic.check_output(data_file, overwrite)
                else:  # a folder made when the files are placed: where it goes must exist
                    atomic.check_output(data_file.parent, False, directory=True)
        # a store's chunk grid (BDHW): tiles align to it (a pyramid's: whole chunks of every level)
        self.chunks: Shape4 | None = None

    # -- life cycle ------------------------------------------------------------------------------

    def __enter__(self) -> Writer:
        self._temp = atomic.TemporaryOutput(self.data_path, self._overwrite)
        try:
            self._open()
        except BaseException:
            self._temp.abort()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        try:
            if exc_type is None:
                self._finish()
        except BaseException:
            self._discard()
            raise
        if exc_type is not None:
            self._discard()
        return False

    def _opened(self) -> atomic.TemporaryOutput:
        """Where the output is made until its commit (its blocks given once the reservation is done: at once for
        more than a tile, else when mapped); there once the writer is entered as a context manager."""
        if self._temp is None:
            raise LayoutError(f"{self.path}: the output is not open; use the writer as a context manager")
        if self._reservation is not None:
            reservation, self._reservation = self._reservation, None
            reservation.wait()
        return self._temp

    def _open(self) -> None:
        if self.is_store:
            # Built in a temporary directory that the commit renames into place; tiles go straight to chunks.
            store = cast(StoreFormat, self.format)
            opened = self._opened()
            try:
                self.chunks, notices = store.create_store(opened.make_directory(), self._spec)
            except OutputExistsError:  # another writer's store took the name first: never ours to remove
                opened.disown()
                raise
            self.notices.extend(notices)
            self.order, self._offset = "C", 0  # chunks are row-major whatever was asked (the format says so)
            return
        created = self.format.create(self._opened().temp, self._spec)
        self.notices.extend(created.notices)
        self.dtype = created.dtype or self.dtype  # what the file stores (MRC widens uint8)
        self._offset = created.offset
        self._size = created.offset + math.prod(self.shape) * self.dtype.itemsize
        # An output of more than a tile is given its blocks before any work: a full disk is then an error at
        # once, not after the tiles before it. A smaller one is a few pwrites, the first of which finds a full disk
        # as soon; its blocks are left to the file system, which on ext4 took longer to allocate them ahead than
        # to write them (a 128 KiB file: 104-183 us against 42-59 us; a service's uploads are small). Mapped, it
        # is given them then (:attr:`array`).
        if self._size > TILE_BYTES:
            self._reserve(background=compute_path.kernels_to_load())

    def _reserve(self, background: bool) -> None:
        """Give the file its blocks (:class:`~noa_core.io.atomic.Reservation`): writes through a mapping then never
        find the disk full, which would be a SIGBUS."""
        self._reservation = atomic.Reservation(self._opened().temp, self._size,
                                               f"{self.data_shown}: no space left on device for its {self._size} "
                                               "bytes",
                                               background=background)
        self._reserved = True

    @property
    def array(self) -> Array:
        """A writable Array over the output's data (BDHW, packed in ``order``), mapped on first use;
        :func:`fill` writes with ``pwrite`` and never maps."""
        if self._array is None:
            if not self._reserved and not self.is_store:
                self._reserve(background=False)
            temp = self._opened()
            if self.is_store:
                raise LayoutError(f"{self.path}: a {self.format.title} output is a store of chunks, which cannot be "
                                  "mapped; fill it with copy_into, fill or write_block")
            self._mmap, self._array = _map_packed(temp.temp, self._offset, self.dtype, self.shape, self.order)
        return self._array

    def _finish(self) -> None:
        sections_written = self._written.all() if self._written is not None else math.prod(self.shape) == 0
        if self.format.header_statistics and not (self._complete or sections_written):
            self._scan_statistics()  # written directly through .array: read it back once
        if self.is_store:  # a store is complete once its chunks are written, then its metadata
            directory = self._opened().directory
            assert directory is not None  # made by _open for a store
            cast(StoreFormat, self.format).complete_store(directory)
        else:
            self.format.finish(self._opened().temp, self._spec, self._stats.result())
        # No msync: on Linux the fsync of the commit writes back the pages dirtied through the mapping
        # too (they are dirty in the page cache), and a second pass over them cost a quarter of a copy.
        self._release_mapping()
        if self.format.indexed:
            self._commit_with_index()
        else:
            self._opened().commit()

    def _commit_with_index(self) -> None:
        """Write the index naming the data files (a particle file naming its stacks) and place them all together:
        the data file filled, or the files it is split into (their folders made where missing, and removed again
        when the placement fails)."""
        split = [data_file for data_file, _ in self.data_files] != [self.data_path]
        outputs: list[atomic.TemporaryOutput] = []
        try:
            with atomic.folders_made(data_file.parent for data_file, _ in self.data_files):
                try:
                    if split:
                        self._split(outputs)
                    else:
                        outputs.append(self._opened())
                    index = atomic.TemporaryOutput(self.path, self._overwrite)
                    outputs.append(index)
                    with open(index.temp, "wb") as f:
                        for piece in cast(IndexedFormat, self.format).written(self._spec)(self.data_files):
                            f.write(piece if isinstance(piece, bytes) else piece.data)
                    atomic.commit_together(outputs)
                except BaseException:
                    for output in outputs:
                        output.abort()
                    raise
        finally:
            if split:  # the data file filled, now split: never placed
                self._opened().abort()

    def _split(self, outputs: list[atomic.TemporaryOutput]) -> None:
        """The data file filled, split into :attr:`data_files` (each added to ``outputs`` once made): each laid out
        by the format, its sections copied from the data file in runs of at most :data:`SPLIT_BYTES`, its header
        statistics taken from them as they pass."""
        entry = math.prod(self.shape[1:]) * self.dtype.itemsize  # one batch entry, stored whole in either order
        per_copy = max(1, SPLIT_BYTES // max(entry, 1))
        buffer = memoryview(bytearray(min(self.shape[0], per_copy) * entry))
        source = os.open(self._opened().temp, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            for data_file, sections in self.data_files:
                output = atomic.TemporaryOutput(data_file, self._overwrite)
                outputs.append(output)
                spec = replace(self._spec, shape=layout.as_shape4((len(sections), *self.shape[1:])))
                created = self.format.create(output.temp, spec)
                stats = RunningStatistics()
                fd = os.open(output.temp, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
                try:
                    size = created.offset + len(sections) * entry
                    atomic.reserve(fd, size, f"{data_file}: no space left on device for its {size} bytes")
                    heads = np.concatenate(([0], np.flatnonzero(np.diff(sections) != 1) + 1, [len(sections)]))
                    for head, end in zip(heads[:-1].tolist(), heads[1:].tolist()):  # runs of consecutive sections
                        for done in range(head, end, per_copy):
                            piece = buffer[:min(per_copy, end - done) * entry]
                            at = self._offset + int(sections[head] + done - head) * entry
                            if os.preadv(source, [piece], at) != len(piece):
                                raise FileFormatError(f"{self.path}: its images were cut short while being written")
                            stats.add(np.frombuffer(piece, self.dtype))
                            mapped.pwrite_all(fd, piece, created.offset + done * entry, data_file)
                finally:
                    os.close(fd)
                self.format.finish(output.temp, spec, stats.result())
        finally:
            os.close(source)

    def _discard(self) -> None:
        self._release_mapping()
        if self._reservation is not None:  # done with the file before it goes; its error is the disk's, not ours
            with contextlib.suppress(Exception):
                self._opened()
        if self._temp is not None:
            self._temp.abort()

    def _release_mapping(self) -> None:
        self._array = None
        if self._mmap is not None:
            try:
                self._mmap.close()
            except BufferError:
                pass  # a caller still holds a view; the mapping goes when that view does
            self._mmap = None

    def _scan_statistics(self) -> None:
        self._stats = RunningStatistics()
        out = self.array.numpy()
        tile = plan_tile(self.shape, [(self.array.strides, self.dtype.itemsize)])
        for key in tiles(self.shape, tile, self.array.strides):
            self._stats.add(out[key])
            mapped.release(out[key])

    # -- filling ----------------------------------------------------------------------------------

    def region(self) -> Region:
        """Where the data go in the temporary file, for tasks in other processes (see :class:`Region`)."""
        if self.is_store:
            directory = self._opened().directory
            assert directory is not None  # made by _open for a store
            return Region(directory, 0, self.dtype, self.shape, "C", self.values_dtype, self.format.name,
                          named=self.path, identity=self._opened().identity())
        return Region(self._opened().temp, self._offset, self.dtype, self.shape, self.order, self.values_dtype,
                      named=self.data_shown, identity=self._opened().identity())

    def complete(self, stats: RunningStatistics) -> None:
        """Declare every element written (e.g. by tasks through :meth:`region`), with their statistics."""
        self._stats, self._complete = stats, True

    def write_block(self, index: int, block) -> None:
        """Write consecutive sections starting at section ``index`` (section = ``b * depth + d``).

        ``block`` (Array or NumPy array) holds ``k`` whole (height, width) sections: any shape whose
        last two dimensions are (H, W). Each section may be written once; statistics follow.
        """
        _, _, h, w = self.shape
        src = np.asarray(block.numpy() if isinstance(block, Array) else block)
        if src.ndim < 2 or src.shape[-2:] != (h, w):
            raise ShapeError(f"{self.path}: block of shape {src.shape} does not end with a section ({h}, {w})")
        src = src.reshape(-1, h, w)
        k = src.shape[0]
        if self._written is None:
            self._written = np.zeros(self.shape[0] * self.shape[1], bool)
        if not 0 <= index <= len(self._written) - k:
            raise LayoutError(f"{self.path}: sections {index}..{index + k - 1} are outside 0..{len(self._written) - 1}")
        if self._written[index:index + k].any():
            raise LayoutError(f"{self.path}: sections {index}..{index + k - 1} were already written")
        convert = storing(self.values_dtype, lambda blocks, dst: checked_copy(dst, blocks[0]))
        if self.is_store:
            sections = np.empty((k, h, w), self.dtype)
            convert([asarray(src)], asarray(sections))
            self._write_sections(index, sections)
        else:
            sections = self.array.numpy().reshape(-1, h, w)[index:index + k]
            convert([asarray(src)], asarray(sections))
            mapped.release(sections)
        self._stats.add(sections)
        self._written[index:index + k] = True

    def _write_sections(self, index: int, sections: np.ndarray) -> None:
        """Write consecutive sections (from section ``index``) into a store, one tile per batch entry crossed."""
        _, depth, h, w = self.shape
        target = self.region().target()
        try:
            done = 0
            while done < len(sections):
                b, d = divmod(index + done, depth)
                count = min(depth - d, len(sections) - done)
                key = (slice(b, b + 1), slice(d, d + count), slice(0, h), slice(0, w))
                target.write(key, sections[done:done + count].reshape(1, count, h, w))
                done += count
        finally:
            target.close()


def create(path: str | os.PathLike, shape: int | Sequence[int], dtype: DTypeLike,
           metadata: Metadata | None = None, *, order: str = "C", overwrite: bool = False, label: str | None = None,
           write_options: Mapping[str, str] | None = None) -> Writer:
    """An output to fill block by block: ``with create(...) as out: copy_into(src, out)``.

    The format follows the extension (see :func:`noa_core.io.formats.output_format`); the existing
    file is refused unless ``overwrite``; ``metadata`` (pixel size, origin, labels, ...) describes
    the output, e.g. ``read_metadata.permute(perm)``. ``write_options`` are the format's own choices
    (MRC: ``uint8_mode`` 'widen' or 'imod'); the stored type may then differ from ``dtype``
    (``out.dtype`` says). Notices end up in ``out.notices``.

    Args:
        path: the output file (or an OME-Zarr store's directory); its folder must exist.
        shape: the output's shape, up to 4 sizes padded to BDHW.
        dtype: the element type of the values written.
        metadata: what the header describes; None: nothing but the shape and type.
        order: 'C', or 'F' to store each section column-major.
        overwrite: replace an existing output.
        label: text of the MRC label noa appends.
        write_options: the format's own write options, by name.

    Returns:
        The Writer, to use as a context manager.

    Raises:
        OutputExistsError: the output exists and ``overwrite`` is False.
        MissingFileError: the output's folder does not exist.
        UnknownFormatError: an extension noa does not write.
        FileFormatError: a type, shape or write option the format cannot take.
        LayoutError: ``order`` is not 'C' or 'F'.
        LimitError: the output would exceed the output limits.
    """
    return Writer(path, shape, dtype, metadata, order, overwrite, label, write_options)


def stream_tiles(reads: TileReads, keys: Sequence[Key], target: TileTarget, values_dtype: np.dtype,
                 progress: Callable[[int, int], None] | None = None, *,
                 measure: bool = True) -> list[RunningStatistics]:
    """Compute the tiles ``keys`` as ``reads`` says and write them into ``target``; return each tile's
    statistics (empty ones without ``measure``).

    Sources are read into memory with ``pread`` (:func:`noa_core.io.mapped.read_view`), each tile is
    computed into one of two reused buffers, and a writer thread takes a tile's statistics and writes it while
    the next is read and computed (pread, pwrite and the kernels release the GIL). A plain copy's tile read as it
    lies in a local input file, one run there and in a file output, is written by the kernel from that file
    (:meth:`TileFile.copy`).
    """

    def measured_and_written(key: Key, buffer: np.ndarray, source: tuple[int, int, Path] | None) -> RunningStatistics:
        stats = RunningStatistics.of(buffer) if measure else RunningStatistics()
        if source is None:
            target.write(key, buffer)
        else:
            cast(TileFile, target).copy(key, buffer, source)
        return stats

    writing: list = []  # each tile's future, in order: its statistics once written
    in_flight = target.writers + 1  # output buffers: one being computed, the others being written
    with contextlib.ExitStack() as stack:
        if len(keys) > 1:
            from concurrent.futures import ThreadPoolExecutor

            submit = stack.enter_context(ThreadPoolExecutor(target.writers, "noa-write")).submit
        else:  # one tile: no other tile to overlap its write with, so no thread (nor its import)
            submit = cast(Callable[..., Any], _WrittenNow)
        stack.enter_context(mapped.scratch_buffers())
        for done, key in enumerate(keys, 1):
            slot = -1 - done % in_flight  # the output buffers' slots; sources use 0, 1, ...
            if len(writing) >= in_flight:
                writing[-in_flight].result()  # the write from this buffer is done
            views, compute = reads(key)
            buffer = target.buffer(key, slot)
            source = None  # where the buffer's bytes lie as they are in a local input file, for a file's copy
            # Read with pread, not through the input mappings: a file truncated meanwhile is an error, not SIGBUS.
            if getattr(compute, "copies", False) and len(views) == 1 and values_dtype == buffer.dtype:
                # A plain copy: read straight into the buffer written from, when the runs land there.
                block = mapped.read_view(views[0].numpy(), 0, into=buffer)
                if not np.shares_memory(block, buffer):
                    compute([asarray(block)], asarray(buffer))
                elif isinstance(target, TileFile) and block.dtype == buffer.dtype:
                    source = mapped.file_run(views[0].numpy())
            else:
                blocks = [asarray(mapped.read_view(view.numpy(), i)) for i, view in enumerate(views)]
                storing(values_dtype, compute)(blocks, asarray(buffer))
            # in this thread's context: the compute path the driver chose measures the tile there too
            writing.append(submit(contextvars.copy_context().run, measured_and_written, key, buffer, source))
            if progress is not None:
                progress(done, len(keys))
        return [pending.result() for pending in writing]


class _WrittenNow:
    """A tile written at once, in this thread; like the Future of a write, it has a result."""

    def __init__(self, write: Callable[..., RunningStatistics], *args: Any) -> None:
        self.stats = write(*args)

    def result(self) -> RunningStatistics:
        return self.stats


def fill(writer: Writer, sources: Sequence[Array], compute: Compute | None, *, block_bytes: int = TILE_BYTES,
         progress: Callable[[int, int], None] | None = None, whole: Sequence[int] = (),
         reads: TileReads | None = None, keys: Sequence[Key] | None = None) -> None:
    """Fill ``writer`` tile by tile with ``compute(source_tiles, output_tile)``.

    Sources broadcast onto the output shape. Tiles are planned so that each buffers at most
    ``block_bytes`` of the output and of every source (:func:`plan_tiles`) and written with ``pwrite``
    (:func:`stream_tiles`); header statistics are taken from each tile as it is computed.
    ``progress(done, total)`` is called after each tile; every tile spans the dimensions in ``whole``
    entirely. With ``reads``, each tile's source views and compute come from it instead of ``sources``
    and ``compute``; ``keys`` are the tiles to walk when already planned.

    Args:
        writer: the output, entered as a context manager.
        sources: the Arrays read for each tile (broadcast onto the output's shape).
        compute: ``compute(source_tiles, output_tile)``, filling the output tile (None with ``reads``).
        block_bytes: the most bytes a tile buffers of the output and of each source.
        progress: called with ``(done, total)`` tiles after each tile.
        whole: the BDHW axes every tile spans entirely.
        reads: each tile's source views and compute, in place of ``sources`` and ``compute``.
        keys: the tiles to walk, when already planned.

    Raises:
        LayoutError: the writer is not open.
        DTypeError: values the output's type cannot hold.
    """
    if keys is None:
        keys = plan_tiles(writer, sources if reads is None else [], block_bytes, whole)
    if reads is None:
        assert compute is not None
        reads = same_tile(sources, writer.shape, compute)
    region = writer.region()
    target = region.target()
    try:
        per_tile = stream_tiles(reads, keys, target, writer.values_dtype, progress, measure=region.measured)
    finally:
        target.close()
    writer.complete(RunningStatistics.merged(per_tile))


def batch_statistics(source: Array, *, block_bytes: int = TILE_BYTES) -> list[RunningStatistics]:
    """The statistics of each batch entry of ``source`` in one pass, tile by tile: bounded memory, and
    tiles of a file are read with ``pread`` (a file truncated meanwhile is an error, not SIGBUS)."""
    b, d, h, w = source.shape
    entry = layout.Shape4((1, d, h, w))
    tile = plan_tile(entry, [(source.strides, source.itemsize)], block_bytes)
    per_batch = []
    with mapped.scratch_buffers():
        for index in range(b):
            stats = RunningStatistics()
            for key in tiles(entry, tile, source.strides):
                view = source[(slice(index, index + 1), *key[1:])]
                stats.merge(RunningStatistics.of(mapped.read_view(view.numpy())))
            per_batch.append(stats)
    return per_batch


def copy_into(source: Array | np.ndarray, writer: Writer, *, block_bytes: int = TILE_BYTES) -> None:
    """Copy a (possibly permuted or broadcast) source view into ``writer``, tile by tile.

    The source broadcasts onto the output shape. Values are converted to the output dtype; an
    integer output refuses values it cannot hold, and complex cannot become real.

    Args:
        source: an Array or NumPy array whose shape broadcasts onto the output's.
        writer: the output, entered as a context manager.
        block_bytes: the most bytes a tile buffers of the output and of the source.

    Raises:
        BroadcastError: a source whose shape does not broadcast onto the output's.
        DTypeError: values the output's type cannot hold, or complex values into a real output.
        LayoutError: the writer is not open.
    """
    fill(writer, [asarray(source)], lambda blocks, dst: checked_copy(dst, blocks[0]), block_bytes=block_bytes)


def write(path: str | os.PathLike, array: Array | np.ndarray, metadata: Metadata | None = None, *,
          overwrite: bool = False, dtype: DTypeLike | None = None, order: str = "C",
          label: str | None = None) -> list[str]:
    """Write ``array`` to ``path`` (format from the extension) atomically; return notices.

    Args:
        path: the output file (or an OME-Zarr store's directory); its folder must exist.
        array: an Array or anything :func:`noa_core.asarray` accepts.
        metadata: pixel size, origin, labels, ... to carry (e.g. from :func:`noa_core.io.read`, or derived with
            ``metadata.permute(perm)``); header statistics are always recomputed.
        overwrite: replace an existing file (otherwise OutputExistsError).
        dtype: store as this type. MRC needs one of float32, int16, uint16, float16, int8, uint8,
            complex64; other input types must name one here (values must fit integer types).
        order: 'C', or 'F' to store each section column-major (recorded in the file).
        label: text of the MRC label noa appends (default: what was written).

    Returns:
        The notices for the user (e.g. what the format could not store).

    Raises:
        OutputExistsError: the output exists and ``overwrite`` is False.
        MissingFileError: the output's folder does not exist.
        UnknownFormatError: an extension noa does not write.
        FileFormatError: a type, shape or metadata the format cannot take.
        DTypeError: values the stored type cannot hold.
        LayoutError: ``order`` is not 'C' or 'F'.
        LimitError: the output would exceed the output limits.
    """
    source = asarray(array)
    with create(path, source.shape, dtype or source.dtype, metadata, order=order, overwrite=overwrite,
                label=label) as out:
        copy_into(source, out)
    return out.notices

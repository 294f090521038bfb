"""Streaming outputs: fill a memory-mapped temporary file block by block, then commit it atomically.

Peak memory does not grow with the file: :func:`copy_into` walks the output in tiles chosen so that
both the tile's pages in the output and the pages it reads from a (possibly permuted or broadcast)
source stay under a budget, and after each tile releases the pages of both mappings. Header
statistics are accumulated tile by tile (Chan's parallel mean/variance), so the data are read once.
"""

from __future__ import annotations

import errno
import itertools
import math
import mmap as mmap_module
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from noa_core import layout
from noa_core.array import Array, asarray
from noa_core.errors import LayoutError, NoSpaceError, ShapeError
from noa_core.io import atomic, formats, mapped
from noa_core.io.metadata import Metadata, Statistics
from noa_core.io.protocol import OutputSpec
from noa_core.layout import Shape4

if TYPE_CHECKING:
    from noa_core.reduction import Moments

BLOCK_BYTES = 128 << 20  # per-tile mapping budget, for the output and for the source alike
GRANULE = 2 << 20


class RunningStatistics:
    """Minimum, maximum, mean and RMS deviation accumulated over blocks (float64; complex: RMS only).

    Each block's moments come from one parallel pass (:func:`noa_core.reduction.moments`); blocks
    merge with Chan et al.'s formula, so merging the same blocks in the same order gives the same
    bits, whichever process computed them.
    """

    def __init__(self, moments: Moments | None = None) -> None:
        from noa_core.reduction import EMPTY_MOMENTS  # numba: only outputs (which need it) get here

        self.moments = EMPTY_MOMENTS if moments is None else moments

    def add(self, block: np.ndarray | Array) -> None:
        self.merge(RunningStatistics.of(block))

    @classmethod
    def of(cls, block: np.ndarray | Array) -> RunningStatistics:
        """The statistics of one block."""
        from noa_core.reduction import moments  # numba: not imported for reading headers

        return cls(moments(block if isinstance(block, Array) else asarray(block)))

    def merge(self, other: RunningStatistics) -> None:
        """Add the values ``other`` accumulated."""
        self.moments = self.moments.merge(other.moments)

    def result(self) -> Statistics:
        m = self.moments
        if m.count == 0:
            return Statistics(None, None, None, None)
        rms = math.sqrt(m.m2 / m.count)
        if m.min is None:  # complex: MRC statistics are real numbers, only the RMS deviation means something
            return Statistics(None, None, None, rms)
        return Statistics(m.min, m.max, float(m.mean), rms)


# ---------------------------------------------------------------------------------------------
# Tiling
# ---------------------------------------------------------------------------------------------


def _footprints(tiles_: np.ndarray, strides: Sequence[int], itemsize: int) -> np.ndarray:
    """Bytes of mapping each candidate tile (rows of ``tiles_``) spans in a layout.

    Dimensions whose stride reaches a granule are separate runs; the others form one span per run.
    Counting in 2 MiB granules, not 4 KiB pages, because current kernels map large page-cache folios
    whole on a fault: touching one byte can make up to 2 MiB resident.
    """
    stride = np.asarray(strides, np.int64) * itemsize
    run = stride >= GRANULE
    runs = np.prod(np.where(run, tiles_, 1), axis=1)
    span = ((tiles_ - 1) * np.where(run, 0, stride)).sum(axis=1) + itemsize
    return runs * ((span + GRANULE - 1) // GRANULE + 1) * GRANULE


def plan_tile(shape: Shape4, layouts: Sequence[tuple[Sequence[int], int]], budget: int = BLOCK_BYTES,
              whole: Sequence[int] = ()) -> Shape4:
    """Tile extents such that the tile spans at most ``budget`` bytes in every ``(strides, itemsize)`` layout.

    Candidates halve each dimension repeatedly (but the dimensions in ``whole``, which every tile
    spans entirely); among those within budget, the one moving the most elements per byte mapped
    wins (then the largest). A whole output section at a time is the common result; permutations
    that exchange an outer and an inner axis get square-ish tiles.
    """
    entire = np.array([shape], np.int64)
    if all(_footprints(entire, strides, size)[0] <= budget for strides, size in layouts):
        return tuple(shape)  # the common small case: one tile, and no search
    options = [[n] if i in whole else sorted({-(-n // (1 << k)) for k in range(max(n, 1).bit_length() + 1)})
               for i, n in enumerate(shape)]
    grid = np.array(np.meshgrid(*options, indexing="ij"), np.int64).reshape(4, -1).T
    mapped_bytes = sum(_footprints(grid, strides, size) for strides, size in layouts)
    worst = np.max([_footprints(grid, strides, size) for strides, size in layouts], axis=0)
    elements = np.prod(grid, axis=1)
    fits = worst <= budget
    if not fits.any():
        return tuple(n if i in whole else 1 for i, n in enumerate(shape))  # type: ignore[return-value]
    score = np.where(fits, elements / mapped_bytes, -1.0)
    best = np.flatnonzero(score == score.max())
    choice = best[np.argmax(elements[best])]
    return tuple(int(n) for n in grid[choice])  # type: ignore[return-value]


def tiles(shape: Shape4, tile: Shape4, strides: Sequence[int]) -> Iterator[tuple[slice, ...]]:
    """Index tuples covering ``shape`` tile by tile, outermost dimension (largest stride) slowest."""
    order = sorted(range(4), key=lambda i: -strides[i])
    starts = [range(0, shape[i], tile[i]) for i in order]
    for corner in itertools.product(*starts):
        key = [slice(None)] * 4
        for i, start in zip(order, corner):
            key[i] = slice(start, min(start + tile[i], shape[i]))
        yield tuple(key)


# ---------------------------------------------------------------------------------------------
# Writer
# ---------------------------------------------------------------------------------------------


def _map_packed(path: os.PathLike, offset: int, dtype: np.dtype, shape: Shape4,
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

    def fill(self, reads: TileReads, keys: Sequence[tuple[slice, ...]]) -> list[RunningStatistics]:
        """:func:`fill_tile` for each of ``keys`` from any process: map the file, fill the tiles, flush
        them, unmap; return the statistics of each tile."""
        mm, out = _map_packed(self.path, self.offset, self.dtype, self.shape, self.order)
        try:
            with mapped.scratch_buffers():
                values_dtype = self.values_dtype or self.dtype
                stats = [fill_tile(reads, out, key, values_dtype) for key in keys]
            # On a network file system the tiles must reach the server before the task reports them done.
            mapped.flush([out.numpy()[key] for key in keys])
        finally:
            del out
            try:
                mm.close()
            except BufferError:
                pass  # a view is still referenced (e.g. from a traceback); the mapping goes with it
        return stats


def _convert(dst: Array, src: Array) -> None:
    """``dst[...] = src`` with a checked conversion: values the output type cannot hold are refused."""
    from noa_core.elementwise import convert_into

    convert_into(src, dst, mode="checked")


def storing(values_dtype: np.dtype, compute: Compute) -> Compute:
    """``compute`` for an output whose values are of ``values_dtype`` (the type asked for) when the format may
    store a wider type (MRC stores uint8 as uint16): values are computed, checked and clamped for the type
    asked, then widened, so ``--dtype uint8 --clamp`` still clamps to 0..255."""
    def widened(blocks: list[Array], out: Array) -> None:
        if out.dtype == values_dtype:
            compute(blocks, out)
            return
        from noa_core.array import empty

        scratch = empty(out.shape, values_dtype)
        compute(blocks, scratch)
        _convert(out, scratch)

    return widened


class Writer:
    """An output file being filled; use through :func:`create` as a context manager.

    ``array`` is a writable Array over the memory-mapped output (BDHW, packed in ``order``). Fill it
    with :func:`copy_into`, :meth:`write_block`, or directly; on a clean exit the header statistics
    are completed and the file is renamed into place; on an exception nothing is left behind.
    Do not keep ``array`` after the ``with`` block. The format (from the extension) lays out the file
    and writes its header; the Writer maps, fills and commits it.
    """

    def __init__(self, path: str | os.PathLike, shape: int | Sequence[int], dtype, metadata: Metadata | None,
                 order: str, overwrite: bool, label: str | None,
                 write_options: Mapping[str, str] | None = None) -> None:
        self.path = atomic.check_output(path, overwrite)
        self.format = formats.output_format(self.path)
        self.shape = layout.as_shape4(shape)
        self.dtype = np.dtype(dtype)  # what the file stores, once created (MRC widens uint8)
        self.values_dtype = self.dtype  # the type values are converted to, whatever the file stores
        self.order = layout.as_order(order)
        self.metadata = metadata
        self.notices: list[str] = []
        self._spec = OutputSpec(self.path, self.shape, self.dtype, self.order, metadata, label,
                                dict(write_options or {}))
        self._overwrite = overwrite
        self._stats = RunningStatistics()
        self._written = np.zeros(self.shape[0] * self.shape[1], bool)  # sections filled via write_block
        self._complete = False
        self.format.check_writable(self.dtype, self.shape, self.path)
        self._temp: atomic.TemporaryOutput | None = None
        self._mmap: mmap_module.mmap | None = None
        self.array: Array | None = None

    # -- life cycle ------------------------------------------------------------------------------

    def __enter__(self) -> Writer:
        self._temp = atomic.TemporaryOutput(self.path, self._overwrite)
        try:
            self._open()
        except BaseException:
            self._temp.abort()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if exc_type is None:
                self._finish()
        except BaseException:
            self._discard()
            raise
        if exc_type is not None:
            self._discard()
        return False

    def _open(self) -> None:
        created = self.format.create(self._temp.temp, self._spec)
        self.notices.extend(created.notices)
        self.dtype = created.dtype or self.dtype  # what the file stores (MRC widens uint8)
        self._offset = created.offset
        self._reserve(created.offset + math.prod(self.shape) * self.dtype.itemsize)
        self._mmap, self.array = _map_packed(self._temp.temp, created.offset, self.dtype, self.shape, self.order)

    def _reserve(self, size: int) -> None:
        """Allocate the whole file now: writing through a mapping into a sparse file that finds the disk
        full is a SIGBUS, which kills the process and leaves the temporary file; here it is an error."""
        try:
            with open(self._temp.temp, "r+b") as f:
                os.posix_fallocate(f.fileno(), 0, size)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise NoSpaceError(f"{self.path}: no space left on device for its {size} bytes") from None
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):  # a file system that cannot: sparse, as before
                raise

    def _finish(self) -> None:
        if self.format.header_statistics and not (self._complete or self._written.all()):
            self._scan_statistics()  # written directly through .array: read it back once
        self.format.finish(self._temp.temp, self._spec, self._stats.result())
        # No msync: on Linux the fsync of the commit writes back the pages dirtied through the mapping
        # too (they are dirty in the page cache), and a second pass over them cost a quarter of a copy.
        self._release_mapping()
        self._temp.commit()

    def _discard(self) -> None:
        self._release_mapping()
        if self._temp is not None:
            self._temp.abort()

    def _release_mapping(self) -> None:
        self.array = None
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
        return Region(self._temp.temp, self._offset, self.dtype, self.shape, self.order, self.values_dtype)

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
        if not 0 <= index <= len(self._written) - k:
            raise LayoutError(f"{self.path}: sections {index}..{index + k - 1} are outside 0..{len(self._written) - 1}")
        if self._written[index:index + k].any():
            raise LayoutError(f"{self.path}: sections {index}..{index + k - 1} were already written")
        sections = self.array.numpy().reshape(-1, h, w)[index:index + k]
        storing(self.values_dtype, lambda blocks, dst: _convert(dst, blocks[0]))([asarray(src)], asarray(sections))
        self._stats.add(sections)
        mapped.release(sections)
        self._written[index:index + k] = True


def create(path: str | os.PathLike, shape: int | Sequence[int], dtype, metadata: Metadata | None = None, *,
           order: str = "C", overwrite: bool = False, label: str | None = None,
           write_options: Mapping[str, str] | None = None) -> Writer:
    """An output to fill block by block: ``with create(...) as out: copy_into(src, out)``.

    The format follows the extension (see :func:`noa_core.io.formats.output_format`); the existing
    file is refused unless ``overwrite``; ``metadata`` (pixel size, origin, labels, ...) describes
    the output, e.g. ``read_metadata.permute(perm)``. ``write_options`` are the format's own choices
    (MRC: ``uint8_mode`` 'widen' or 'imod'); the stored type may then differ from ``dtype``
    (``out.dtype`` says). Notices end up in ``out.notices``.
    """
    return Writer(path, shape, dtype, metadata, order, overwrite, label, write_options)


Compute = Callable[[list[Array], Array], None]
Key = tuple[slice, ...]
# An output tile's key -> the source views it is computed from (lazy, any shapes) and how: ``compute(blocks,
# out)`` gets those views read into memory and the output tile.
TileReads = Callable[[Key], tuple[list[Array], Compute]]


def same_tile(sources: Sequence[Array], shape: Shape4, compute: Compute) -> TileReads:
    """The tile reads of sources viewed onto the output's ``shape`` (broadcast if need be): output tile
    ``key`` is computed from the same tile of every source."""
    views = [s if s.shape == shape else s.broadcast(shape) for s in map(asarray, sources)]
    return lambda key: ([view[key] for view in views], compute)


def plan_tiles(writer: Writer, sources: Sequence[Array], block_bytes: int = BLOCK_BYTES,
               whole: Sequence[int] = (), read_factor: float = 1.0) -> list[Key]:
    """The tiles :func:`fill` walks, in its order: each spans at most ``block_bytes`` of mapping in
    the output and in every source (sources broadcast onto the output shape), and all of the
    dimensions in ``whole`` (a compute that reverses an axis needs the whole axis).

    ``sources`` may be empty when they do not map onto the output tile for tile (a binning, a crop);
    then a tile's reads are taken to be ``read_factor`` times its own size and the budget shrinks so.
    """
    srcs = [s.broadcast(writer.shape) if s.shape != writer.shape else s for s in map(asarray, sources)]
    out = writer.array
    layouts = [(out.strides, writer.dtype.itemsize)] + [(s.strides, s.itemsize) for s in srcs]
    budget = block_bytes if srcs else max(GRANULE, int(block_bytes / max(1.0, read_factor)))
    tile = plan_tile(writer.shape, layouts, budget, whole)
    return list(tiles(writer.shape, tile, out.strides))


def fill_tile(reads: TileReads, out: Array, key: Key, values_dtype: np.dtype | None = None, *,
              release: bool = True) -> RunningStatistics:
    """Compute tile ``key`` of ``out`` as ``reads`` says; return the tile's statistics.

    Sources are read into memory with ``pread`` (:func:`noa_core.io.mapped.read_view`); values are
    computed for ``values_dtype`` (see :func:`storing`). With ``release``, the output pages of the
    tile are dropped afterwards.
    """
    views, compute = reads(key)
    # Read with pread, not through the input mappings: a file truncated meanwhile is an error, not SIGBUS.
    blocks = [asarray(mapped.read_view(view.numpy(), slot)) for slot, view in enumerate(views)]
    storing(values_dtype or out.dtype, compute)(blocks, out[key])
    written = out.numpy()[key]
    stats = RunningStatistics.of(written)
    if release:
        mapped.release(written)
    return stats


def fill(writer: Writer, sources: Sequence[Array], compute: Compute | None, *, block_bytes: int = BLOCK_BYTES,
         progress: Callable[[int, int], None] | None = None, whole: Sequence[int] = (),
         reads: TileReads | None = None, keys: Sequence[Key] | None = None) -> None:
    """Fill ``writer`` tile by tile with ``compute(source_tiles, output_tile)``.

    Sources broadcast onto the output shape. Tiles are planned so that each spans at most
    ``block_bytes`` of mapping in the output and in every source (:func:`plan_tiles`); header
    statistics are taken from each output tile as it is written, and the pages of every tile are
    released afterwards. ``progress(done, total)`` is called after each tile; every tile spans the
    dimensions in ``whole`` entirely. With ``reads``, each tile's source views and compute come from
    it instead of ``sources`` and ``compute``; ``keys`` are the tiles to walk when already planned.
    """
    if keys is None:
        keys = plan_tiles(writer, sources if reads is None else [], block_bytes, whole)
    if reads is None:
        assert compute is not None
        reads = same_tile(sources, writer.shape, compute)
    stats = RunningStatistics()
    # One tile is the whole output: its mapping closes next, so dropping its pages first gains nothing.
    release = len(keys) > 1
    with mapped.scratch_buffers():
        for done, key in enumerate(keys, 1):
            stats.merge(fill_tile(reads, writer.array, key, writer.values_dtype, release=release))
            if progress is not None:
                progress(done, len(keys))
    writer.complete(stats)


def batch_statistics(source: Array, *, block_bytes: int = BLOCK_BYTES) -> list[RunningStatistics]:
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


def copy_into(source: Array | np.ndarray, writer: Writer, *, block_bytes: int = BLOCK_BYTES) -> None:
    """Copy a (possibly permuted or broadcast) source view into ``writer``, tile by tile.

    The source broadcasts onto the output shape. Values are converted to the output dtype; an
    integer output refuses values it cannot hold, and complex cannot become real.
    """
    fill(writer, [asarray(source)], lambda blocks, dst: _convert(dst, blocks[0]), block_bytes=block_bytes)

"""The tile engine: an output computed tile by tile, so memory stays bounded whatever its size.

A plan says, for each output tile (its ``Key``: one slice per BDHW axis), which source views it is computed
from and how (:data:`TileReads`). :func:`plan_tile` chooses the tile extents within a byte budget (whole
sections where they fit: every read and write is then one long run), :func:`tiles` walks them, and
:func:`compute_whole` runs a plan's reads as one tile in memory (what the library functions return). The
streaming of tiles between files (``pread`` of the sources, a writer thread, header statistics) is
:mod:`noa_core.io.stream`'s; a target of tiles (a file, a store's chunks) follows :class:`TileTarget`.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

import numpy as np

from noa_core.array import Array, asarray, empty, layout
from noa_core.array.layout import Shape4
from noa_core.compute.conversion import convert_into


class TiledOutput(Protocol):
    """What tiles are planned for: an output's shape, its order and stored type, and a store's chunks."""

    shape: Shape4
    order: str
    dtype: np.dtype
    chunks: Shape4 | None


RUN_BYTES = 8 << 20  # a view is read in runs of at most this many contiguous bytes (and at least one element)
# Per tile, the buffer of the output and of each source read (two tiles are in flight). Small enough for
# a tile to stay in the processor's cache between its read, its statistics and its write: measured on
# 1 GiB, 8 MiB tiles copied and transposed 1.3-2x faster than 32 MiB ones.
TILE_BYTES = 8 << 20
RUN_COST = 64 << 10  # a read or write call costs about as much as moving this many bytes
TILE_COST = 256 << 10  # and a tile (a kernel launch, a hand-over to the writer thread) as much as this
MIN_TILE_BYTES = 1 << 20  # the least a tile of a plan with reads is given, however much it reads

Compute = Callable[[list[Array], Array], None]
Key = tuple[slice, ...]
# An output tile's key -> the source views it is computed from (lazy, any shapes) and how: ``compute(blocks,
# out)`` gets those views read into memory and the output tile.
TileReads = Callable[[Key], tuple[list[Array], Compute]]


class TileTarget(Protocol):
    """Where computed tiles go: a file (:class:`TileFile`) or a store's chunks (a store format's ``tiles``)."""

    writers: int  # tiles written at once, each from its own thread

    def buffer(self, key: Key, slot: int) -> np.ndarray:
        """A reused BDHW buffer (``slot``) for tile ``key``, laid out as the target stores it."""

    def write(self, key: Key, buffer: np.ndarray) -> None:
        """Store ``buffer`` as tile ``key`` (called from a writer thread)."""

    def sync(self) -> None:
        """Make what was written durable before a task reports it done."""

    def close(self) -> None: ...


def _source_runs(tiles_: np.ndarray, strides: Sequence[int], itemsize: int) -> tuple[np.ndarray, np.ndarray]:
    """(runs, bytes per run) of each candidate tile (rows of ``tiles_``) read from a layout by
    :func:`noa_core.io.mapped.read_view`: dimensions by increasing stride join one run (gaps included)
    while it stays within :data:`RUN_BYTES`; each index of the others is a run of its own."""
    order = sorted((i for i in range(4) if strides[i] != 0), key=lambda i: abs(strides[i]))
    span = np.full(len(tiles_), itemsize, np.int64)
    runs = np.ones(len(tiles_), np.int64)
    joining = np.ones(len(tiles_), bool)
    for i in order:
        wider = span + (tiles_[:, i] - 1) * abs(strides[i]) * itemsize
        joins = joining & ((wider <= RUN_BYTES) | (span == itemsize) | (tiles_[:, i] == 1))
        span = np.where(joins, wider, span)
        runs = np.where(joins, runs, runs * tiles_[:, i])
        joining = joins
    return runs, span


def _output_runs(tiles_: np.ndarray, shape: Sequence[int], strides: Sequence[int],
                 itemsize: int) -> tuple[np.ndarray, np.ndarray]:
    """(runs, bytes per run) of each candidate tile written into a packed layout: a run is contiguous in
    the file, so it spans the inner dimensions whole and stops after the first one it does not."""
    order = sorted(range(4), key=lambda i: strides[i])
    span = np.full(len(tiles_), itemsize, np.int64)
    runs = np.ones(len(tiles_), np.int64)
    joining = np.ones(len(tiles_), bool)
    for i in order:
        span = np.where(joining, span * tiles_[:, i], span)
        runs = np.where(joining, runs, runs * tiles_[:, i])
        joining = joining & (tiles_[:, i] == shape[i])
    return runs, span


def plan_tile(shape: Shape4, sources: Sequence[tuple[Sequence[int], int]], budget: int = TILE_BYTES,
              whole: Sequence[int] = (), output: tuple[Sequence[int], int] | None = None) -> Shape4:
    """Tile extents for streaming ``shape``: each tile's buffer holds at most ``budget`` bytes for every
    source read (``(strides, itemsize)``, viewed onto ``shape``), gaps read between a view's elements
    included, and for the ``output`` written (``(strides, itemsize)`` of a packed layout), if any.

    Candidates halve each dimension repeatedly (but the dimensions in ``whole``, which every tile
    spans entirely); among those within budget, the one with the least cost per element wins (then
    the largest), a cost being the bytes moved plus :data:`RUN_COST` per read or write call and
    :data:`TILE_COST` per tile. Whole
    sections are the common result: a transpose of height and width then happens in memory, and
    every read and write is one long run.
    """
    layouts = tuple((tuple(int(s) for s in strides), int(itemsize)) for strides, itemsize in sources)
    written = None if output is None else (tuple(int(s) for s in output[0]), int(output[1]))
    return _planned(layout.Shape4(tuple(int(n) for n in shape)), layouts, int(budget), tuple(int(i) for i in whole),
                    written)


# A service plans the same few shapes request after request: the plan took 0.4 ms of a small permute's 9 ms.
@functools.lru_cache(maxsize=1024)
def _planned(shape: Shape4, sources: tuple[tuple[tuple[int, ...], int], ...], budget: int, whole: tuple[int, ...],
             output: tuple[tuple[int, ...], int] | None) -> Shape4:
    """:func:`plan_tile` of hashable arguments."""
    options = [[n] if i in whole else sorted({-(-n // (1 << k)) for k in range(max(n, 1).bit_length() + 1)})
               for i, n in enumerate(shape)]
    grid = np.array(np.meshgrid(*options, indexing="ij"), np.int64).reshape(4, -1).T
    worst = np.zeros(len(grid), np.int64)
    cost = np.full(len(grid), TILE_COST, np.int64)
    if output is not None:
        runs, span = _output_runs(grid, shape, *output)
        worst, cost = runs * span, cost + runs * (span + RUN_COST)
    for strides, itemsize in sources:
        runs, span = _source_runs(grid, strides, itemsize)
        worst = np.maximum(worst, runs * span)
        cost = cost + runs * (span + RUN_COST)
    elements = np.prod(grid, axis=1)
    fits = worst <= budget
    if not fits.any():
        return tuple(n if i in whole else 1 for i, n in enumerate(shape))  # type: ignore[return-value]
    score = np.where(fits, elements / cost, -1.0)
    best = np.flatnonzero(score >= score.max() * (1 - 1e-9))
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


def checked_copy(dst: Array, src: Array) -> None:
    """``dst[...] = src`` with a checked conversion: values the output type cannot hold are refused."""
    convert_into(src, dst, mode="checked")


def storing(values_dtype: np.dtype, compute: Compute) -> Compute:
    """``compute`` for an output whose values are of ``values_dtype`` (the type asked for) when the format may
    store a wider type (MRC stores uint8 as uint16): values are computed, checked and clamped for the type
    asked, then widened, so ``--dtype uint8 --clamp`` still clamps to 0..255."""
    def widened(blocks: list[Array], out: Array) -> None:
        if out.dtype == values_dtype:
            compute(blocks, out)
            return
        scratch = empty(out.shape, values_dtype)
        compute(blocks, scratch)
        checked_copy(out, scratch)

    return widened


def same_tile(sources: Sequence[Array], shape: Shape4, compute: Compute) -> TileReads:
    """The tile reads of sources viewed onto the output's ``shape`` (broadcast if need be): output tile
    ``key`` is computed from the same tile of every source."""
    views = [s if s.shape == shape else s.broadcast(shape) for s in map(asarray, sources)]
    return lambda key: ([view[key] for view in views], compute)


def compute_whole(source: Array, shape: Sequence[int], dtype, reads: TileReads) -> Array:
    """The whole output of ``reads`` as one tile, in memory: what the file operations compute tile by tile.

    The computes are NumPy and numba CPU code: a source on a GPU is moved to the CPU, and the result back."""
    device = source.device
    if device != "cpu":
        source = source.to("cpu")
    out = empty(tuple(shape), dtype)
    if math.prod(out.shape) > 0:
        views, compute = reads(tuple(slice(0, n) for n in out.shape))
        compute([asarray(np.ascontiguousarray(v.numpy())) for v in views], out)
    return out if device == "cpu" else out.to(device)


def plan_tiles(writer: TiledOutput, sources: Sequence[Array], block_bytes: int = TILE_BYTES,
               whole: Sequence[int] = (), read_factor: float = 1.0) -> list[Key]:
    """The tiles :func:`fill` walks, in its order: each buffers at most ``block_bytes`` of the output
    and of every source read (sources broadcast onto the output shape), and spans all of the dimensions
    in ``whole`` (a compute that reverses an axis needs the whole axis).

    ``sources`` may be empty when they do not map onto the output tile for tile (a binning, a crop);
    then a tile's reads are taken to be ``read_factor`` times its own size and the budget shrinks so.
    """
    srcs = [s.broadcast(writer.shape) if s.shape != writer.shape else s for s in map(asarray, sources)]
    out_strides = layout.strides_for(writer.shape, writer.order)
    budget = block_bytes if srcs else max(MIN_TILE_BYTES, int(block_bytes / max(1.0, read_factor)))
    tile = plan_tile(writer.shape, [(s.strides, s.itemsize) for s in srcs], budget, whole,
                     output=(out_strides, writer.dtype.itemsize))
    if writer.chunks is not None:
        tile = chunk_aligned(tile, writer.chunks, writer.shape, budget // writer.dtype.itemsize, out_strides, whole)
    return list(tiles(writer.shape, tile, out_strides))


def chunk_aligned(tile: Sequence[int], chunks: Sequence[int], shape: Sequence[int], elements: int,
                  strides: Sequence[int], whole: Sequence[int] = ()) -> Shape4:
    """``tile`` grown to whole chunks along every axis (at most the whole axis): tiles then never share a
    chunk, so each can be written by a different process without reading a chunk back. Where growing one
    axis took the tile past ``elements`` (and one chunk), the outer axes (largest ``strides`` first; never one in
    ``whole``) are cut back, in whole chunks: a pyramid's 16 sections are taken in bands of rows."""
    aligned = [min(n, -(-t // c) * c) for t, c, n in zip(tile, chunks, shape)]
    for axis in sorted((i for i in range(4) if i not in whole), key=lambda i: -strides[i]):
        while math.prod(aligned) > max(elements, math.prod(chunks)) and aligned[axis] > chunks[axis]:
            aligned[axis] = -(-aligned[axis] // chunks[axis] // 2) * chunks[axis]
    return layout.as_shape4(tuple(aligned))

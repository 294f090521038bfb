"""Memory-mapped file regions, and releasing their pages so resident memory stays bounded.

Only mappings made here are ever released: they are shared file mappings (``MAP_SHARED``), where
``madvise(MADV_DONTNEED)`` merely unmaps pages that the page cache still holds (dirty pages are
written back by the kernel). On private or anonymous memory the same call would discard data, so
a mapping noa did not make is never touched.

Inputs are mapped so that views (permuted, broadcast, sliced) cost nothing to plan, but a file
truncated by someone else while it is mapped turns the next access into SIGBUS, which kills the
process without a word. So the data of a view are read with ``pread`` instead (:func:`read_view`):
a file that shrank gives a short read, reported as an error naming the file.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import mmap
import os
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

import numpy as np
from numpy.lib.stride_tricks import as_strided

from noa_core.compute.tiles import RUN_BYTES
from noa_core.errors import SizeError, TruncatedFileError
from noa_core.io import atomic, remote
from noa_core.io.compression import open_input

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

# mmap object -> address of its first byte. Weak, so a closed and dropped mapping leaves no trace.
_SHARED: weakref.WeakKeyDictionary[mmap.mmap, int] = weakref.WeakKeyDictionary()
_CAN_RELEASE = hasattr(mmap, "MADV_DONTNEED") and hasattr(mmap.mmap, "madvise")
# input mapping -> (descriptor kept open for pread, path for messages); the descriptor closes with the mapping
_INPUTS: weakref.WeakKeyDictionary[mmap.mmap, tuple[int, Path]] = weakref.WeakKeyDictionary()
_PRIVATE: weakref.WeakSet[mmap.mmap] = weakref.WeakSet()  # mappings of this process's temporary files
# input mapping -> what writes a byte range into its file while read_view reads it (map_input's ``produce``)
_PRODUCERS: weakref.WeakKeyDictionary[mmap.mmap, Callable[[int, int], contextlib.AbstractContextManager]] = \
    weakref.WeakKeyDictionary()
# input mapping -> what reads its bytes from elsewhere (map_gathered's ``gather``): the mapping itself is never read
_GATHERS: weakref.WeakKeyDictionary[mmap.mmap, Gather] = weakref.WeakKeyDictionary()
PARALLEL_BYTES = 4 << 20  # smaller views are read by one thread
# A view whose values lie at least this many bytes apart (a volume's x slice: one value a row) is read with
# scattered preadv (:func:`_read_spaced`): the bytes between them still come through, in file order (as a cold
# page cache is best read), but into a small buffer that stays in cache, and the values land packed: a third
# less time than reading the gaps into memory from 1 KiB apart (measured), more below.
SPACED_BYTES = 1 << 10
IOV_MAX = 1024  # buffers a preadv takes (Linux's UIO_MAXIOV, macOS's IOV_MAX)
# A run read straight into the pieces of an output buffer that keeps its values in another order (a permuted
# copy): only where each piece holds at least this many bytes, else reading it packed and copying costs less.
SCATTER_BYTES = 1 << 10


class Gather(Protocol):
    """The bytes of an array gathered from other files (a particle file's images from the stacks its rows name)."""

    def read_into(self, buffer: memoryview, offset: int) -> bool:
        """Fill ``buffer`` with the bytes from ``offset`` on; False when a file came back short."""

    def close(self) -> None:
        """Close the files it keeps open."""


def _register(mm: mmap.mmap) -> None:
    probe = np.frombuffer(mm, np.uint8, count=1)
    _SHARED[mm] = probe.ctypes.data
    del probe  # release the buffer export so that the mapping can be closed


def spill_folder(path: Path, nbytes: int, fields: str, doing: str) -> str:
    """The temporary folder data of ``path`` are written out to (decompressed, decoded) before they are
    mapped with ``private=True``; SizeError naming ``fields`` when it has not ``nbytes`` free."""
    folder = tempfile.gettempdir()
    room = os.statvfs(folder)
    if nbytes > room.f_bavail * room.f_frsize:
        raise SizeError(f"{path}: {fields}: {doing} the {nbytes} bytes of data needs more room than {folder} has "
                        f"({room.f_bavail * room.f_frsize} bytes free)")
    return folder


def map_input(path: Path, offset: int, dtype: np.dtype, count: int, *, private: bool = False,
              fd: int | None = None,
              produce: Callable[[int, int], contextlib.AbstractContextManager] | None = None,
              gather: Gather | None = None) -> np.ndarray:
    """A read-only 1-d view of ``count`` items of ``dtype`` at byte ``offset`` of ``path``; ``private``: a
    temporary file of this process (decompressed data) that no other process can map by its path;
    ``fd``: that file already open (an unlinked temporary), mapped instead of ``path``, which then only
    names it in messages; ``produce(first, stop)``: a context manager :func:`read_view` enters around its
    reading of bytes ``first .. stop-1``, which writes them into the file first and keeps them there until
    the reading ends (data made as tiles ask for them: the array must then be read through :func:`read_view`
    only); ``gather``: what :func:`read_view` reads the bytes from instead of the file (see :func:`map_gathered`)."""
    if fd is not None:
        fd = os.dup(fd)
    else:
        with open_input(path) as file:  # refuses a FIFO or device swapped in for the file, without blocking
            fd = os.dup(file.fileno())
    try:
        mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except BaseException:
        os.close(fd)
        raise
    _register(mm)
    _INPUTS[mm] = (fd, Path(path))
    if private:
        _PRIVATE.add(mm)
    if produce is not None:
        _PRODUCERS[mm] = produce
    if gather is not None:
        _GATHERS[mm] = gather
        weakref.finalize(mm, gather.close)
    weakref.finalize(mm, os.close, fd)
    return np.frombuffer(mm, dtype=dtype, count=count, offset=offset)


def map_gathered(path: Path, dtype: np.dtype, count: int, gather: Gather) -> np.ndarray:
    """A read-only 1-d array of ``count`` items of ``dtype`` whose bytes ``gather`` reads from other files when
    :func:`read_view` asks (a tile's runs), straight into the tile's buffer: the array views a sparse unlinked
    file that holds no data and takes no disk, so it must be read through :func:`read_view` only, as the tile
    engine reads its sources. ``path`` names it in messages."""
    with tempfile.TemporaryFile(prefix="noa-", suffix=".gathered") as placeholder:
        os.ftruncate(placeholder.fileno(), max(count * np.dtype(dtype).itemsize, 1))
        return map_input(path, 0, dtype, count, private=True, fd=placeholder.fileno(), gather=gather)


def gathered(path: Path, dtype: np.dtype, count: int, gather: Gather, tiles: bool) -> np.ndarray:
    """A read-only 1-d array of ``count`` items of ``dtype`` whose bytes ``gather`` reads from elsewhere (the
    stacks a particle file names, a remote object): with ``tiles``, read as the tile engine asks
    (:func:`map_gathered`); else read whole now, into an unlinked temporary file mapped privately (memory stays
    bounded however large). ``path`` names it in messages."""
    if tiles:
        return map_gathered(path, dtype, count, gather)
    nbytes = count * np.dtype(dtype).itemsize
    folder = spill_folder(path, nbytes, "data", "gathering")
    with tempfile.TemporaryFile(prefix="noa-", suffix=".gathered", dir=folder) as temp:
        atomic.reserve(temp.fileno(), nbytes, f"{path}: gathering the {nbytes} bytes of data: no space left in "
                       f"{folder}")
        buffer = scratch(min(nbytes, PARALLEL_BYTES), 0)
        try:
            for start in range(0, nbytes, len(buffer)):
                piece = buffer.data[:min(len(buffer), nbytes - start)]
                if not gather.read_into(piece, start):
                    raise TruncatedFileError(f"{path}: a file it names changed size while being read")
                pwrite_all(temp.fileno(), piece, start, path)
        finally:
            gather.close()
        return map_input(path, 0, dtype, count, private=True, fd=temp.fileno())


def map_file(path: Path, offset: int, dtype: np.dtype, count: int, tiles: bool,
             file: BinaryIO | None = None) -> np.ndarray:
    """``count`` items of ``dtype`` at byte ``offset`` of an input: a local file's mapped (:func:`map_input`; from
    ``file``, the input as :func:`open_input` opened it, rather than opened again), a remote object's fetched by byte
    ranges as the tiles ask when ``tiles``, else whole (:func:`gathered`)."""
    if isinstance(path, remote.RemotePath):
        return gathered(path, dtype, count, remote.Ranges(path, offset), tiles)
    return map_input(path, offset, dtype, count, fd=None if file is None else file.fileno())


_SCRATCH = threading.local()
_READERS: list[tuple[ThreadPoolExecutor, int]] = []
os.register_at_fork(after_in_child=_READERS.clear)  # a forked child has none of its parent's threads


def io_threads() -> int:
    """How many threads may read or write at once: as many as the kernels use (NUMBA_NUM_THREADS,
    which a Dask worker sets to its share of the cores), else one per core."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return int(os.environ.get("NUMBA_NUM_THREADS") or cores)


def _readers() -> tuple[ThreadPoolExecutor, int]:
    """The threads that read runs (pread releases the GIL) and their count (:func:`io_threads`)."""
    if not _READERS:
        from concurrent.futures import ThreadPoolExecutor

        count = io_threads()
        _READERS.append((ThreadPoolExecutor(count, _READER_NAME), count))
    return _READERS[0]


_READER_NAME = "noa-read"


def is_reader(thread: threading.Thread) -> bool:
    """Whether ``thread`` is one of the threads that read runs: idle whenever no read runs (a read returns once
    its runs are read), so a command may end without waiting for them."""
    return thread.name.startswith(_READER_NAME)


@contextlib.contextmanager
def scratch_buffers() -> Iterator[None]:
    """Reuse this thread's read buffers (:func:`read_view`) within the block, and free them after it."""
    try:
        yield
    finally:
        _SCRATCH.__dict__.pop("buffers", None)


def scratch(nbytes: int, slot: int) -> np.ndarray:
    """Buffer ``slot`` of this thread, reused from tile to tile: fresh pages for every tile would cost
    a page fault (and zeroing) per 4 KiB, more than the read itself."""
    buffers = _SCRATCH.__dict__.setdefault("buffers", {})
    have = buffers.get(slot)
    if have is None or have.size < nbytes:
        have = buffers[slot] = np.empty(nbytes, np.uint8)
    return have[:nbytes]


def read_view(array: np.ndarray, slot: int = 0, into: np.ndarray | None = None) -> np.ndarray:
    """The values of ``array`` in memory, read with ``pread`` when it views a noa input mapping (else
    ``array`` itself): same shape, dtype and values, never a page fault on the file.

    Dimensions are taken by increasing stride: the inner ones whose span fits :data:`RUN_BYTES` are
    read as one contiguous run per index of the outer ones (gaps of a strided view included), and
    broadcast dimensions (stride 0) once. The result lives in this thread's buffer ``slot`` until the
    next read into that slot (one slot per source of a tile), or in ``into`` (an array of the same
    shape and type) when the runs read land exactly where ``into`` keeps its elements: a copy of a
    file then goes from the page cache straight into the buffer it is written from. Raises
    TruncatedFileError when the file has shrunk.
    """
    mm = _mapping_of(array)
    if mm is None or mm not in _INPUTS or array.size == 0:
        return array
    fd, path = _INPUTS[mm]
    start = array.ctypes.data - _SHARED[mm]  # file offset of the first element (mappings start at 0)
    dims = sorted((i for i in range(array.ndim) if array.strides[i] != 0 and array.shape[i] > 1),
                  key=lambda i: array.strides[i])
    if reads_spaced(array) and mm not in _GATHERS:
        return _read_spaced(array, dims, fd, path, start, slot, into, _PRODUCERS.get(mm))
    inner, span = 0, array.itemsize
    while inner < len(dims):
        wider = span + (array.shape[dims[inner]] - 1) * array.strides[dims[inner]]
        if wider > RUN_BYTES and inner > 0:
            break
        inner, span = inner + 1, wider
    outer = dims[inner:][::-1]  # slowest first
    runs = math.prod(array.shape[i] for i in outer)
    strides = list(array.strides)
    step = span
    for i in reversed(outer):
        strides[i] = step
        step *= array.shape[i]
    indices = list(np.ndindex(*(array.shape[i] for i in outer)))
    offsets = [start + sum(k * array.strides[i] for k, i in zip(index, outer)) for index in indices]
    gather = _GATHERS.get(mm)
    pieces = None
    if into is not None and _lands_in(into, array, runs * span, strides):
        buffer = _packed_bytes(into)
    elif into is not None and gather is None and (pieces := _pieces_in(into, array, dims[:inner], span, runs)):
        # each run scattered into the rows of ``into`` it fills (preadv's buffers)
        buffer = _packed_bytes(into)
        strides = list(into.strides)
        starts = [sum(k * into.strides[i] for k, i in zip(index, outer)) for index in indices]
    else:
        buffer = scratch(runs * span, slot)
    view = buffer.data

    def read_runs(first: int, stop: int) -> bool:
        """Read runs ``first..stop-1``; False when one came back short."""
        if gather is not None:
            return all(gather.read_into(view[run * span:(run + 1) * span], offsets[run]) for run in range(first, stop))
        if pieces is not None:
            piece = pieces[1]
            return all(os.preadv(fd, [view[starts[run] + at:starts[run] + at + piece] for at in pieces[0]],
                                 offsets[run]) == span for run in range(first, stop))
        return all(os.preadv(fd, [view[run * span:(run + 1) * span]], offsets[run]) == span
                   for run in range(first, stop))

    # One thread copies from the page cache at a fraction of the memory's speed: read runs side by side,
    # in a few batches per thread (a task per run would cost more than a small run's read).
    produce = _PRODUCERS.get(mm)
    stop = start + sum((n - 1) * s for n, s in zip(array.shape, array.strides)) + array.itemsize
    with contextlib.nullcontext() if produce is None else produce(start, stop):
        if runs * span < PARALLEL_BYTES:
            complete = read_runs(0, runs)
        else:
            pool, threads = _readers()
            batches = min(runs, 4 * threads)
            bounds = [runs * b // batches for b in range(batches + 1)]
            complete = read_runs(0, runs) if batches == 1 else all(pool.map(read_runs, bounds[:-1], bounds[1:]))
    if not complete and gather is not None:
        raise TruncatedFileError(f"{path}: a file it names changed size while being read")
    if not complete:
        raise TruncatedFileError(f"{path}: data: the file changed size while being read (it holds "
                                 f"{os.fstat(fd).st_size} bytes now)")
    return as_strided(buffer.view(array.dtype), array.shape, tuple(strides), writeable=False)


def file_run(array: np.ndarray) -> tuple[int, int, Path] | None:
    """Where ``array``, a C-contiguous view of a noa input mapping of a local file, lies in that file: its
    descriptor, the offset of its first byte, its path (for messages). None for any other view: not an input's,
    strided, empty, or of data written into its file as read (``produce``) or read from elsewhere (a remote
    object's)."""
    mm = _mapping_of(array)
    if mm is None or mm not in _INPUTS or mm in _PRODUCERS or mm in _GATHERS or array.size == 0 or \
            not array.flags.c_contiguous:
        return None
    fd, path = _INPUTS[mm]
    return fd, array.ctypes.data - _SHARED[mm], path


def reads_spaced(array: np.ndarray) -> bool:
    """True when :func:`read_view` reads ``array`` value by value (:func:`_read_spaced`): its nearest values lie
    :data:`SPACED_BYTES` or more apart, and it holds them packed, without the bytes between them."""
    steps = [s for s, n in zip(array.strides, array.shape) if s != 0 and n > 1]
    return bool(steps) and min(steps) >= SPACED_BYTES


def _read_spaced(array: np.ndarray, dims: list[int], fd: int, path: Path, start: int, slot: int,
                 into: np.ndarray | None, produce: Callable[[int, int], contextlib.AbstractContextManager] | None,
                 ) -> np.ndarray:
    """:func:`read_view` of a view whose nearest elements (along ``dims[0]``) lie :data:`SPACED_BYTES` or more
    apart: each line along it (with the dimensions after it that continue its spacing) is read with preadv in
    pieces of up to :data:`IOV_MAX` values, value k into byte k x itemsize of a small buffer followed by the gap
    after it, which the next value overwrites; the values are then copied out packed, the line's dimension
    innermost. Same file bytes as a run with its gaps, a fraction of the memory traffic."""
    itemsize, spacing = array.itemsize, array.strides[dims[0]]
    length, line = array.shape[dims[0]], 1
    while line < len(dims) and array.strides[dims[line]] == length * spacing:  # the line goes on across it
        length *= array.shape[dims[line]]
        line += 1
    outer = dims[line:][::-1]  # slowest first: a line per index of these
    strides = list(array.strides)
    step = itemsize
    for i in dims[:line]:
        strides[i] = step
        step *= array.shape[i]
    for i in reversed(outer):
        strides[i] = step
        step *= array.shape[i]
    lines = math.prod(array.shape[i] for i in outer)
    nbytes = lines * length * itemsize
    buffer = _packed_bytes(into) if into is not None and _lands_in(into, array, nbytes, strides) \
        else scratch(nbytes, slot)
    offsets = [start + sum(k * array.strides[i] for k, i in zip(index, outer))
               for index in np.ndindex(*(array.shape[i] for i in outer))]
    calls = -(-length // IOV_MAX)  # a line's
    out = buffer.data
    total = lines * calls
    taken = itertools.count()
    taking = threading.Lock()

    def read_calls() -> bool:
        """Make the next calls (``calls`` a line, line by line) until none is left; False when one came back
        short. Threads take them in turn, so that the file is read in its order, as one stream (two streams
        far apart in one file defeat the kernel's readahead: a cold page cache read a seventh slower, measured)."""
        landing = np.empty(IOV_MAX * itemsize + spacing, np.uint8).data
        gaps = [landing[k * itemsize:k * itemsize + spacing] for k in range(IOV_MAX - 1)]
        while True:
            with taking:
                call = next(taken)
            if call >= total:
                return True
            n, k = divmod(call, calls)
            k *= IOV_MAX
            count = min(IOV_MAX, length - k)
            pieces = [*gaps[:count - 1], landing[(count - 1) * itemsize:count * itemsize]]
            if os.preadv(fd, pieces, offsets[n] + k * spacing) != (count - 1) * spacing + itemsize:
                return False
            at = (n * length + k) * itemsize
            out[at:at + count * itemsize] = landing[:count * itemsize]

    stop = start + sum((n - 1) * s for n, s in zip(array.shape, array.strides)) + itemsize
    with contextlib.nullcontext() if produce is None else produce(start, stop):
        if lines * length * spacing < PARALLEL_BYTES or total == 1:
            complete = read_calls()
        else:
            pool, threads = _readers()
            complete = all(pool.map(lambda _: read_calls(), range(min(total, threads))))
    if not complete:
        raise TruncatedFileError(f"{path}: data: the file changed size while being read (it holds "
                                 f"{os.fstat(fd).st_size} bytes now)")
    return as_strided(buffer.view(array.dtype), array.shape, tuple(strides), writeable=False)


def _fills(into: np.ndarray, array: np.ndarray, nbytes: int) -> bool:
    """True when ``into`` is a packed array of ``array``'s shape and type that ``nbytes`` read fill exactly."""
    return (into.dtype == array.dtype and into.shape == array.shape and into.nbytes == nbytes
            and _outer_first(into).flags.c_contiguous)


def _outer_first(array: np.ndarray) -> np.ndarray:
    """``array`` with its dimensions in decreasing stride order (C-contiguous when it is packed)."""
    return array.transpose(sorted(range(array.ndim), key=lambda i: -array.strides[i]))


def _lands_in(into: np.ndarray, array: np.ndarray, nbytes: int, strides: list[int]) -> bool:
    """True when reading ``array``'s runs packed (``strides``, ``nbytes`` in all) fills ``into`` exactly."""
    return _fills(into, array, nbytes) and all(n <= 1 or a == b for n, a, b in zip(array.shape, into.strides, strides))


def _pieces_in(into: np.ndarray, array: np.ndarray, run_dims: list[int], span: int,
               runs: int) -> tuple[list[int], int] | None:
    """Where the bytes of one run of ``array`` (along ``run_dims``, fastest first: ``span`` bytes, packed in the
    file) lie in ``into``, a packed array of the same shape and type holding them in another order: the offsets of
    its pieces from the run's first element, in file order, and the bytes of each. None unless the ``runs`` fill
    ``into`` (a broadcast view's runs fill one of its copies), ``into`` keeps each piece of at least
    :data:`SCATTER_BYTES` contiguous, and a run needs at most :data:`IOV_MAX` of them."""
    if not _fills(into, array, runs * span) or min(into.strides, default=0) < 0:
        return None
    packed_in_file = piece = array.itemsize
    for i in run_dims:
        if array.strides[i] != packed_in_file:
            return None  # a run with gaps: its bytes between values are no values of ``into``
        packed_in_file *= array.shape[i]
    if packed_in_file != span:
        return None
    within = 0  # the run's dimensions that ``into`` keeps contiguous too, fastest first
    while within < len(run_dims) and into.strides[run_dims[within]] == piece:
        piece *= array.shape[run_dims[within]]
        within += 1
    scattered = run_dims[within:][::-1]  # slowest first, as np.ndindex counts
    count = math.prod(array.shape[i] for i in scattered)
    if within == 0 or piece < SCATTER_BYTES or count > IOV_MAX:
        return None
    return [sum(k * into.strides[i] for k, i in zip(index, scattered))
            for index in np.ndindex(*(array.shape[i] for i in scattered))], piece


def _packed_bytes(array: np.ndarray) -> np.ndarray:
    """The bytes of an array packed in some order of its dimensions, as a 1-d uint8 view (no copy)."""
    flat = _outer_first(array)
    if not flat.flags.c_contiguous:
        raise ValueError("the array is not packed")  # callers check with _lands_in first
    return flat.reshape(-1).view(np.uint8)


def pwrite_all(fd: int, data: memoryview, offset: int, path: Path) -> None:
    """Write all of ``data`` at ``offset`` of ``fd`` (pwrite may write less than asked); a full disk is a
    NoSpaceError naming ``path``."""
    while data:
        try:
            written = os.pwrite(fd, data, offset)
        except OSError as exc:
            atomic.raise_if_full(exc, path)
            raise
        data, offset = data[written:], offset + written


def map_output(path: Path, offset: int, dtype: np.dtype, count: int) -> tuple[mmap.mmap, np.ndarray]:
    """A writable 1-d view of ``count`` items at byte ``offset`` of an existing file of the right size."""
    with open(path, "r+b") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_WRITE)
    _register(mm)
    return mm, np.frombuffer(mm, dtype=dtype, count=count, offset=offset)


def _mapping_of(array: np.ndarray) -> mmap.mmap | None:
    """The noa shared mapping under a NumPy view, following ``.base`` (and memoryview) links."""
    obj: Any = array
    while obj is not None:
        if isinstance(obj, mmap.mmap):
            return obj if obj in _SHARED else None
        # np.frombuffer keeps a memoryview of the mapping as its base
        obj = obj.obj if isinstance(obj, memoryview) else getattr(obj, "base", None)
    return None


def _pages(array: np.ndarray) -> tuple[mmap.mmap, int, int] | None:
    """The noa mapping under ``array`` and the page-aligned ``(start, length)`` that ``array`` spans in it."""
    if array.size == 0:
        return None
    mm = _mapping_of(array)
    if mm is None or mm.closed:
        return None
    lo = array.ctypes.data - _SHARED[mm]
    hi = lo + sum((n - 1) * s for n, s in zip(array.shape, array.strides)) + array.itemsize
    start = lo - lo % mmap.PAGESIZE
    return mm, start, min(hi, len(mm)) - start


def release(array: np.ndarray) -> None:
    """Drop from this process the resident pages spanned by ``array``, if it lives in a noa mapping."""
    span = _pages(array) if _CAN_RELEASE else None
    if span is not None:
        mm, start, length = span
        mm.madvise(mmap.MADV_DONTNEED, start, length)


def flush(arrays: Sequence[np.ndarray]) -> None:
    """Write back to the file (one msync) the pages from the lowest to the highest byte the ``arrays``
    span in one noa mapping; arrays in no noa mapping are skipped."""
    spans = [span for span in map(_pages, arrays) if span is not None]
    if spans:
        mm = spans[0][0]
        start = min(s for _, s, _ in spans)
        end = max(s + n for _, s, n in spans)
        mm.flush(start, end - start)


def is_mapped(array: np.ndarray) -> bool:
    """True when ``array`` views a file mapping made here that other processes can map too (by path: not
    decompressed data in a temporary file of this process)."""
    mm = _mapping_of(array)
    return mm is not None and mm not in _PRIVATE

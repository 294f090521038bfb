"""Compile the kernels that file operations use into numba's on-disk cache.

``noa warmup`` (and the container build) call :func:`warmup` once, so that later processes load
machine code from the cache instead of compiling it (seconds per kernel).

numba compiles one version per argument type, so every registered operation runs for real, through the
local driver, with the option sets its declaration lists (``Operation.warmup``), on a small file of every
element type; STAR tables are read and written besides (:mod:`noa_core.io.star`). Only what those calls
compile is compiled: each kernel has one version for every size (small arrays run it on one thread), and the
inputs kernels get are read-only views whether a file or Python gave them, so the reductions and views a
Python user's arrays reach and no file operation does (``noa_core.compute.reduction``: a statistics is the
one-pass moments kernel) compile on their first call instead (a second each). The work is cut into units (an
operation x an element type), each reported to ``progress`` once done.

Small files are computed with NumPy (:mod:`noa_core.compute.compute_path`), which compiles nothing: every
unit runs with the numba path forced, in whichever process runs it.

numba compiles in the calling process and holds the GIL for most of it, so with ``jobs`` > 1 the
units run in that many worker processes (started with "spawn": never a fork of a process whose
numba threading layer may have started), sharing the on-disk cache. numba writes each cache file
atomically (a temporary file, then ``os.replace``), but adding an entry to a function's index is a
read-modify-write of that index: two processes saving different versions of one function at once
could each pick the same data file, and the index could end naming the other's machine code. The
workers therefore take one lock around each cache save (:func:`_serialise_cache_saves`); saves are
milliseconds, compiling is seconds, so this costs nothing measurable. Units are handed out in
chunks of one element type (:func:`split`), so that the kernels all operations on that type share
(reading, writing, converting) are compiled by one worker, not by every worker at once.

Once per installation: a finished warm-up leaves a mark in the cache folder, named by what the
machine code depends on (numba's version, noa's sources). :func:`warmup_once`, what every service
process calls at start, returns at once where that mark exists, and where another process holds the
warm-up's lock (it is compiling into the same cache): so several processes, or a service started
after ``noa warmup``, never compile the same kernels twice.
"""

from __future__ import annotations

import fcntl
import hashlib
import math
import multiprocessing
import os
import queue
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from pathlib import Path
from typing import Literal, NamedTuple, Protocol

import numba

# compute is a face: its kernels load when a warm-up runs, not when the service starts and finds them cached
import numpy as np

from noa_core import io, limits, operations
from noa_core.array import full
from noa_core.compute import compute_path
from noa_core.io import star
from noa_core.kernels import runtime
from noa_core.run.execution import execute

# Element types that MRC and TIFF files hold.
FILE_DTYPES = ("int8", "uint8", "int16", "uint16", "float16", "float32", "int32", "float64", "complex64")
# Elements a plane pair of the small files run: every kernel has one version, whatever the size.
COUNT = 64
# The unit that reads and writes STAR tables, a chunk of its own (its "element type": text).
STAR = "star tables"

# progress(done, total, what): called after each unit of work.
Progress = Callable[[int, int, str], None]


class _Flag(Protocol):
    def is_set(self) -> bool: ...


class Unit(NamedTuple):
    """One unit of work: ``operation`` (a registered operation's name, or :data:`STAR`) on inputs of
    element type ``dtype``."""

    operation: str
    dtype: str

    def __str__(self) -> str:
        return f"{self.operation} {self.dtype}"


def units() -> list[Unit]:
    """Every unit :func:`warmup` runs, in the order one process runs them."""
    names = [operation.name for operation in operations.operations() if operation.warmup]
    return [Unit(name, dtype) for dtype in FILE_DTYPES for name in names] + [Unit(STAR, "text")]


def split(work: Sequence[Unit]) -> list[list[Unit]]:
    """``work`` in chunks of one element type each (in the order of first appearance, units in their
    order): what one worker process runs in turn. Every unit is in exactly one chunk."""
    chunks: dict[str, list[Unit]] = {}
    for unit in work:
        chunks.setdefault(unit.dtype, []).append(unit)
    return list(chunks.values())


def installation_key() -> str:
    """What the cached machine code depends on: numba's and Python's versions and every noa_core source
    file (path, size, modification time), as a short digest."""
    digest = hashlib.sha256(f"{numba.__version__} {sys.version}".encode())
    for path in sorted(runtime.PACKAGE_DIR.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path.relative_to(runtime.PACKAGE_DIR)} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def _mark(folder: Path) -> Path:
    return folder / f"noa-warmup-{installation_key()}.done"


def warmed() -> bool:
    """Whether a warm-up of this installation has finished into the cache folder in use."""
    folder = runtime.cache_folder()
    return folder is not None and _mark(folder).exists()


def warmed_lately(interval_s: float = 1.0) -> Callable[[], bool]:
    """:func:`warmed`, looked up at most once per ``interval_s`` and true for good once true: what a service asks
    for each file it computes (:func:`noa_core.compute.compute_path.kernels_ready_when`) while a warm-up, its own
    or another process's, fills the cache."""
    found = False
    looked = -math.inf

    def ready() -> bool:
        nonlocal found, looked
        if not found and time.monotonic() - looked >= interval_s:
            looked = time.monotonic()
            found = warmed()
        return found

    return ready


# What warmup_once found or did.
WarmupState = Literal["cached", "compiled", "compiling elsewhere", "stopped"]


def warmup_once(stop: threading.Event | None = None, progress: Progress | None = None,
                jobs: int = 1) -> WarmupState:
    """:func:`warmup` unless this installation's kernels are cached already ("cached") or another
    process is compiling them into the same cache now ("compiling elsewhere": kernels this process
    needs meanwhile are compiled, or loaded from the cache, when first called). Without a cache folder,
    a warm-up of this process's memory."""
    folder = runtime.cache_folder()
    if folder is None:
        warmup(stop, progress, jobs)
        return "stopped" if stop is not None and stop.is_set() else "compiled"
    if _mark(folder).exists():
        return "cached"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "noa-warmup.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return "compiling elsewhere"
        if _mark(folder).exists():  # finished by another process between the look and the lock
            return "cached"
        warmup(stop, progress, jobs)
    return "stopped" if stop is not None and stop.is_set() else "compiled"


def warmup(stop: threading.Event | None = None, progress: Progress | None = None, jobs: int = 1) -> float:
    """Run every kernel variant a file operation can reach, for FILE_DTYPES, and those of STAR tables;
    return the seconds it took. ``progress(done, total, what)`` is called after each unit. With
    ``jobs`` > 1, in up to that many worker processes (at most :func:`noa_core.limits.available_cores`);
    with 1, in this process. With ``stop``, it returns early once that is set (a server shutting
    down must not leave a thread running kernels while the interpreter exits): no unit starts after
    that, and the units running end after their current case."""
    stop = stop or threading.Event()
    start = time.perf_counter()
    work = units()
    chunks = split(work)
    workers = max(1, min(jobs, limits.available_cores(), len(chunks)))
    if workers == 1:
        _in_process(work, stop, progress)
    else:
        _in_workers(chunks, len(work), workers, stop, progress)
    folder = runtime.cache_folder()
    if folder is not None and not stop.is_set():
        for old in folder.glob("noa-warmup-*.done"):  # marks of earlier sources or versions
            old.unlink(missing_ok=True)
        _mark(folder).write_text(f"noa {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    return time.perf_counter() - start


def _in_process(work: Sequence[Unit], stop: _Flag, progress: Progress | None) -> None:
    with tempfile.TemporaryDirectory(prefix="noa-warmup-") as folder:
        for done, unit in enumerate(work, 1):
            if stop.is_set():
                return
            _run(unit, Path(folder), stop)
            if progress is not None:
                progress(done, len(work), str(unit))


def _in_workers(chunks: list[list[Unit]], total: int, workers: int, stop: threading.Event,
                progress: Progress | None) -> None:
    context = multiprocessing.get_context("spawn")
    finished = context.Queue()  # each unit, once a worker has run it
    stopping = context.Event()  # `stop`, seen by the workers (a threading.Event does not cross)
    lock = context.Lock()  # around numba's cache saves
    done = 0
    with futures.ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker,
                                     initargs=(finished, stopping, lock)) as pool:
        running = {pool.submit(_run_chunk, chunk) for chunk in chunks}
        try:
            while running:
                if stop.is_set():
                    stopping.set()
                    for future in running:
                        future.cancel()
                try:
                    unit = finished.get(timeout=0.2)
                except queue.Empty:
                    pass
                else:
                    done += 1
                    if progress is not None:
                        progress(done, total, str(Unit(*unit)))
                ended = {future for future in running if future.done()}
                for future in ended:
                    if not future.cancelled():
                        future.result()  # a worker's exception ends the warm-up with it
                running -= ended
        except BaseException:
            stopping.set()
            for future in running:
                future.cancel()
            raise
    while progress is not None:  # units reported after their chunk's future was seen done
        try:
            unit = finished.get(timeout=0.2)
        except queue.Empty:
            break
        done += 1
        progress(done, total, str(Unit(*unit)))


# -- in a worker process --------------------------------------------------------------------------

_finished: multiprocessing.Queue | None = None
_stopping: _Flag = threading.Event()


def _start_worker(finished: multiprocessing.Queue, stopping: _Flag, lock) -> None:
    global _finished, _stopping
    _finished, _stopping = finished, stopping
    # This process only warms up: its drivers must choose numba whatever the size (compute_path's
    # context variable does not cross into a process, and drivers choose again per file).
    os.environ[compute_path.ENVIRONMENT] = "numba"
    _serialise_cache_saves(lock)


def _serialise_cache_saves(lock) -> None:
    """Make numba's cache saves in this process take ``lock`` (shared by the warm-up's workers), so
    that two workers adding versions of one function to its index do not lose or mix up an entry."""
    from numba.core import caching

    save = caching.IndexDataCacheFile.save
    if getattr(save, "_noa_locked", False):
        return

    def locked_save(self, key, data):
        with lock:
            return save(self, key, data)

    locked_save._noa_locked = True  # type: ignore[attr-defined]
    caching.IndexDataCacheFile.save = locked_save


def _run_chunk(chunk: list[Unit]) -> None:
    assert _finished is not None
    with tempfile.TemporaryDirectory(prefix="noa-warmup-") as folder:
        for unit in chunk:
            if _stopping.is_set():
                return
            _run(unit, Path(folder), _stopping)
            _finished.put(tuple(unit))


# -- a unit ---------------------------------------------------------------------------------------


def _run(unit: Unit, folder: Path, stop: _Flag) -> None:
    """Run ``unit``, on the numba path, writing its files in ``folder``."""
    with compute_path.using("numba"):
        if unit.operation == STAR:
            _star_tables(folder)
        else:
            _file_operation(unit, folder, stop)


def _suffix(dtype: str) -> str:
    return ".mrc" if dtype in io.mrc.WRITABLE_DTYPES else ".tif"


def _source_suffix(dtype: str) -> str:
    """Where a small input of ``dtype`` is written: MRC widens uint8 to mode 6 (GUIDE 2), TIFF keeps it, so
    that the kernels an 8-bit file needs are compiled too."""
    return ".tif" if dtype == "uint8" else _suffix(dtype)


def _file_operation(unit: Unit, folder: Path, stop: _Flag) -> None:
    operation = operations.get(unit.operation)
    width = math.isqrt(COUNT) + 1
    shape = (1, 2, width, width)

    def source(dtype: str) -> Path:
        path = folder / f"{dtype}{_source_suffix(dtype)}"
        if not path.exists():
            io.write(path, full(shape, 1, dtype=dtype), overwrite=True)
        return path

    for dtype, values in operation.warmup(unit.dtype, shape) if operation.warmup else ():
        if stop.is_set():
            return
        # a writer's one input; a report's every input the same small file (fsc: two halves and a mask)
        inputs = [source(dtype)] * (1 if operation.writes else operation.max_inputs)
        out = folder / (f"out{_suffix(values.get('dtype') or dtype)}" if operation.writes == "file" else "outs")
        execute(operation, inputs, out if operation.writes else None, values, overwrite=True)


def _star_tables(folder: Path) -> None:
    """A table written, read, its values taken and a loop written back with some replaced and some added."""
    path = folder / "warmup.star"
    star.write(path, star.loop_text("particles", {"rlnImageName": ["1@a.mrcs", "2@a.mrcs"], "rlnDefocusU": [1.5, 2.0]}),
               overwrite=True)
    table = star.read(path)
    block = table.block("particles")
    table.numbers(block, "rlnDefocusU")
    edit = star.LoopEdit(rows=np.array([1, 0]), replace={"rlnDefocusU": table.values(block, "rlnDefocusU")},
                         add={"rlnAngleRot": np.array([b"0", b"90"])})
    star.write(path, table.edited({"particles": edit}), overwrite=True)

"""The Dask driver (the optional extra ``noa[dask]``): many files as tasks, and one large file split
into tasks that each write their own tiles of the output.

Nothing here imports dask at module level, so ``import noa_core`` and the CLI never load it; a missing
install is reported on first use as a :class:`~noa_core.errors.SchedulerError`.

- :func:`connect` gives a ``distributed.Client``: ``'local'`` starts a LocalCluster of processes sized
  to this machine (workers x numba threads <= cores), or for small work a worker of threads in this process
  (worker processes would take longer to start than the work: :func:`local_cluster`); ``tcp://host:port``
  joins a running scheduler. :class:`LocalClusterDriver` starts its LocalCluster at its first call, when the
  work is known.
- :func:`run_batch` applies a :class:`noa_core.operations.FileTask` to (input, output) pairs, as tasks of a
  few consecutive pairs each: a failure is that pair's result and the others go on; ``resume`` skips
  outputs that exist (writes are atomic, so an existing output is complete). A batch of one pending
  pair is split instead.
- :func:`write_split` writes one output with tasks over runs of its tiles: the client creates the
  temporary output (header and full size, sparse), each task maps it by path and fills its tiles (the
  tiles, and their order, of the single-process writer), the client merges the per-tile statistics
  in tile order, writes the header and renames the file. The result is byte for byte the
  single-process one, and no process maps more than a tile of the input and of the output at a time. Text files
  beside the output (a tilt series') are written by the client and placed with it (as the single-process writer).
  An OME-Zarr output is a temporary store instead, whose chunks the tasks write (tiles are whole
  chunks, so no two tasks write one); an OME-Zarr input is first decoded by tasks over blocks of its
  chunks into a temporary file beside the output, which the tile tasks then read as a mapped input.
- A service gives :func:`write_split` its data root (``confined_to``): every task then opens its files beneath it with
  no link followed (:func:`noa_core.io.beneath.confined`), and a pair that one task would write whole is left to
  the service (:class:`WholeTask`), which runs it beneath the root its own way. It names the output through the
  folder it opened beneath the root (``/proc/self/fd/N/NAME``), so that the client creates and renames the temporary
  output there, not by a path a link could redirect, and says where the tasks find that folder (``dst_folder``).
- Any pair written by one task (:func:`one_task`) stops at its next block when the caller's ``progress`` raises (a
  cancelled job): it is told through a Dask event, and commits nothing.
- A data set (:class:`~noa_core.operations.WritesDataSet`) is one task, unless it is written in parts
  (``in_parts``: extract, a task per share of its micrographs): then its write runs in the caller's process, which
  checks, creates the temporary files and places them, and runs the parts as tasks (:class:`TaskParts`).

Compiled kernels: LocalCluster workers get the client's numba cache directory (``NUMBA_CACHE_DIR``,
see :mod:`noa_core.kernels.runtime`), and the first task of a batch or split runs alone, so the kernels it
needs are compiled once and every other worker loads them from the cache. Workers of a remote
cluster should have ``NUMBA_CACHE_DIR`` set to a shared folder in their environment, or get one from
``connect(address, cache_dir=...)`` (a worker plugin, :func:`numba_cache_plugin`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import math
import os
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from noa_core import kernels  # a face: numba (and noa's set-up of it) loads when a client or worker starts
from noa_core.compute.compute_path import SMALL_BYTES
from noa_core.compute.moments import RunningStatistics
from noa_core.compute.tiles import TILE_BYTES
from noa_core.errors import LayoutError, NoaError, SchedulerError, param
from noa_core.io import atomic, beneath, mapped, omezarr, particles
from noa_core.io.formats import input_bytes
from noa_core.io.read_options import OmeZarrReadOptions
from noa_core.io.remote import as_path, is_remote
from noa_core.io.stream import Region
from noa_core.limits import available_cores, replanning
from noa_core.operations import FileTask, WritesDataSet
from noa_core.operations.spec import PARTS
from noa_core.run.batch import FileResult, PathLike, Progress, split_complete
from noa_core.run.execution import write_pair
from noa_core.run.local import placed_with_side_files

if TYPE_CHECKING:
    import distributed

T = TypeVar("T")
LOCAL = "local"
CANCEL_CHECK_S = 0.25  # how often a caller waiting on a task, and the task itself, look for a cancellation
CANCEL_GRACE_S = 30.0  # how long a cancelled task is waited for before it is just released
MIN_BLOCK_BYTES = 8 << 20  # the smallest task budget (tests use it to split small files)
BLOCK_BYTES = 128 << 20  # about what one task writes: fewer, larger tasks cost less to schedule


def _distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise SchedulerError(f"{param('scheduler')} needs Dask, which is not installed: install noa[dask] "
                             "(in noa's checkout: pip install -e '.[dask]', or pip install '.[dask]')") from None
    return distributed


def local_layout(workers: int | None = None, cores: int | None = None) -> tuple[int, int]:
    """``(worker processes, numba threads per worker)`` for a LocalCluster on ``cores`` cores.

    One single-threaded process per core by default: files are independent, and processes share
    nothing (no GIL, no numba thread pool to oversubscribe). With ``workers`` given, each gets an equal
    share of the cores, so workers x threads never exceeds the cores (at least one thread each).
    """
    cores = cores or available_cores()
    count = workers or cores
    if count < 1:
        raise SchedulerError(f"workers: {count} is not a positive number of worker processes")
    return count, max(1, cores // count)


def local_cluster(workers: int | None = None, work_bytes: int | None = None,
                  cache_dir: str | None = None) -> dict:
    """The keywords of the LocalCluster for ``work_bytes`` of input (None: unknown) on ``workers`` processes.

    Small work (under :data:`~noa_core.compute.compute_path.SMALL_BYTES`, which every process computes with
    NumPy, no kernels loaded) gets one worker of threads in this process, unless ``workers`` is given: a worker
    process takes about half a second to start (Dask's import and noa's), more than such work takes, and on a
    loaded machine far more. The rest gets one single-threaded process per core (:func:`local_layout`), their
    numba cache pointed at ``cache_dir`` or this process's. Never the dashboard: noa shows no link to it, and
    with bokeh installed it doubled the start (2 s more on 2 cores, benchmarks/bench_dask_start.py).
    """
    quiet = {"silence_logs": logging.CRITICAL,  # noa reports every failure itself, per file
             # dashboard_address=None would still bind the scheduler's HTTP server to 8787 (warning when taken)
             "dashboard_address": "127.0.0.1:0", "scheduler_kwargs": {"dashboard": False}}
    if workers is None and work_bytes is not None and work_bytes < SMALL_BYTES:
        return {"n_workers": 1, "threads_per_worker": available_cores(), "processes": False, **quiet}
    import numba

    kernels.runtime  # noqa: B018 - loading it applies noa's numba cache choice to numba.config
    count, threads = local_layout(workers)
    env = {"NUMBA_NUM_THREADS": str(threads)}
    shared = cache_dir or numba.config.CACHE_DIR  # '' is numba's in-tree cache, already shared
    if shared:
        env["NUMBA_CACHE_DIR"] = str(shared)
    return {"n_workers": count, "threads_per_worker": 1, "processes": True, "host": "127.0.0.1", "env": env, **quiet}


def work_bytes(task: FileTask, sources: Sequence[PathLike]) -> int | None:
    """The bytes of the files that ``task`` reads for the pairs whose inputs are ``sources`` (None: unknown,
    such as a folder, a store or a data set among them)."""
    total = 0
    for src in sources:
        size = input_bytes(task.reads(src))
        if size is None:
            return None
        total += size
    return total


def numba_cache_plugin(directory: str) -> distributed.WorkerPlugin:
    """A worker plugin pointing the numba kernel cache of every worker, present and future, at ``directory``.

    Kernels are compiled lazily, so setting the directory when a worker starts (or joins) is early
    enough. ``directory`` must be the same shared folder on every machine.
    """
    plugin_base: Any = _distributed().WorkerPlugin

    class NumbaCacheDir(plugin_base):
        name = "noa-numba-cache-dir"

        def __init__(self, path: str) -> None:
            self.path = path

        def setup(self, worker) -> None:
            os.environ["NUMBA_CACHE_DIR"] = self.path
            kernels.runtime.configure()

    return NumbaCacheDir(directory)


@contextlib.contextmanager
def connect(scheduler: str = LOCAL, *, workers: int | None = None, cache_dir: str | None = None,
            timeout: float | None = None, work_bytes: int | None = None) -> Iterator[distributed.Client]:
    """A Dask client for ``scheduler``: 'local' (a LocalCluster, closed on exit) or ``tcp://host:port``.

    'local' spawns worker processes, so a script using it needs the ``if __name__ == "__main__":`` guard.

    Args:
        workers: 'local' only: worker processes (default one per core; see :func:`local_layout`).
        work_bytes: 'local' only: the bytes the work reads, when known; small work is run by threads of this
            process (:func:`local_cluster`).
        cache_dir: numba cache folder for the workers; for 'local' the default is this process's
            (``NUMBA_CACHE_DIR`` or noa's choice), for an address the workers' own setting.
        timeout: seconds to reach the scheduler and see a worker, else SchedulerError; by default
            Dask's ``distributed.comm.timeouts.connect`` (30 s; environment variable
            ``DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT``).
    """
    distributed = _distributed()
    if timeout is None:
        import dask.config
        from dask.utils import parse_timedelta

        timeout = parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), default="seconds")
    cluster = None
    if scheduler == LOCAL:
        cluster = distributed.LocalCluster(**local_cluster(workers, work_bytes, cache_dir))
        client = distributed.Client(cluster)
    else:
        if workers is not None:
            raise SchedulerError(f"{scheduler}: workers: only a 'local' cluster is sized by noa")
        try:
            client = distributed.Client(scheduler, timeout=timeout)
        except ValueError as exc:
            raise SchedulerError(f"{scheduler}: scheduler: not 'local' nor an address such as "
                                 f"tcp://host:8786 ({exc})") from None
        except (OSError, TimeoutError):
            raise SchedulerError(f"{scheduler}: scheduler: not reachable within {timeout:g} s") from None
    try:
        if cluster is None:
            try:
                client.wait_for_workers(1, timeout=timeout)
            except (OSError, TimeoutError):
                raise SchedulerError(f"{scheduler}: scheduler: no worker joined within {timeout:g} s") from None
            if cache_dir:
                client.register_plugin(numba_cache_plugin(cache_dir))
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _here(task: FileTask) -> FileTask:
    """``task`` with the project folder of the particle files it reads bound to this process's current folder,
    where the stacks they name and a relative project_dir resolve without Dask: a worker runs in a folder of its
    own."""
    if task.projects is not None:
        return task
    return dataclasses.replace(task, projects=particles.FolderProjects(os.getcwd()))


def _key(task: FileTask, index: int, run: str) -> str:
    return f"noa-{task.name}-{run}-{index}"


def _warm_first(client: distributed.Client, fn: Callable, calls: Sequence[tuple],
                keys: Sequence[str]) -> list[distributed.Future]:
    """Submit ``fn(*calls[0])`` alone and wait for it, then the rest.

    The first task compiles the kernels this operation needs into the shared cache; the others, on
    any worker, load them from there instead of each compiling the same code at once.
    """
    distributed = _distributed()
    first = client.submit(fn, *calls[0], key=keys[0], pure=False)
    distributed.wait(first)
    rest = [client.submit(fn, *call, key=key, pure=False) for call, key in zip(calls[1:], keys[1:])]
    return [first, *rest]


def _write_pairs(task: FileTask, pairs: list[tuple[Path, Path]], overwrite: bool, resume: bool) -> list[FileResult]:
    """One task of a batch: a run of pairs, one after the other. A user error (bad input, existing
    output) is a result, not a task failure, so that workers do not log it as a crash."""
    return [write_pair(task, src, dst, overwrite, resume=resume) for src, dst in pairs]


def _file_runs(todo: list[tuple[Path, Path]], threads: int) -> list[list[tuple[Path, Path]]]:
    """The first pair alone (it warms the kernel cache), then runs of consecutive pairs.

    A small file takes a few milliseconds, about what scheduling one task costs, so files go in runs:
    about 4 runs per worker thread to keep the workers evenly busy, each under BLOCK_BYTES of input.
    """
    first, rest = todo[:1], todo[1:]
    sizes = [src.stat().st_size if src.is_file() else 0 for src, _ in rest]
    mean = max(1, sum(sizes) // max(1, len(sizes)))
    per_run = max(1, min(len(rest) // (4 * threads), BLOCK_BYTES // mean))
    return [first] + [rest[i:i + per_run] for i in range(0, len(rest), per_run)]


def run_batch(task: FileTask, pairs: Sequence[tuple[PathLike, PathLike]], client: distributed.Client, *,
              overwrite: bool = False, resume: bool = False, block_bytes: int = BLOCK_BYTES,
              on_result: Callable[[FileResult], None] | None = None,
              progress: Progress | None = None) -> list[FileResult]:
    """Write every pair's output with ``task`` on the cluster; one :class:`FileResult` per pair, in order.

    A failed pair (bad input, an existing output without ``overwrite`` or ``resume``, a lost worker)
    does not stop the others. ``resume`` skips pairs whose output exists. A single pending pair is
    written by :func:`write_split` (``block_bytes``: its tile and task budget). ``on_result`` is
    called as each pair finishes (skipped ones first); ``progress(done, total)`` counts pairs, or
    tasks for a split file.
    """
    distributed = _distributed()
    task = _here(task)
    todo, complete = split_complete(pairs) if resume else ([(as_path(s), as_path(d)) for s, d in pairs], [])
    results: dict[tuple[Path, Path], FileResult] = {}

    def record(result: FileResult) -> None:
        results[(result.src, result.dst)] = result
        if on_result is not None:
            on_result(result)

    for src, dst in complete:
        record(FileResult(src, dst, "skipped"))
    if len(todo) == 1:
        src, dst = todo[0]
        try:
            record(FileResult(src, dst, "written", tuple(write_split(task, src, dst, client, overwrite=overwrite,
                                                                     block_bytes=block_bytes, progress=progress,
                                                                     resume=resume))))
        except (NoaError, OSError) as exc:
            record(FileResult(src, dst, "failed", error=exc))
    elif todo:
        runs = _file_runs(todo, sum(client.nthreads().values()) or 1)
        run = uuid.uuid4().hex[:8]
        keys = [_key(task, i, run) for i in range(len(runs))]
        futures = _warm_first(client, _write_pairs, [(task, pairs_, overwrite, resume) for pairs_ in runs], keys)
        pairs_of = dict(zip(keys, runs))
        done = 0
        for future in distributed.as_completed(futures):
            try:
                finished = future.result()
            except Exception as exc:  # noqa: BLE001 - any failure, even a lost worker, belongs to these files only
                finished = [FileResult(src, dst, "failed", error=exc) for src, dst in pairs_of[future.key]]
            future.release()
            for result in finished:
                record(result)
            done += len(finished)
            if progress is not None:
                progress(done, len(todo))
    return [results[(as_path(s), as_path(d))] for s, d in pairs]


def _fill_tiles(task: FileTask, src: PathLike, region: Region, keys: list[tuple[slice, ...]],
                decoded: dict, confined_to: Path | None) -> list[RunningStatistics]:
    """One task of :func:`write_split`: re-plan from the headers (stores from their ``decoded`` files),
    fill a run of tiles of the output; every file opened beneath ``confined_to`` where given."""
    with beneath.confined(confined_to):
        with omezarr.decoded_inputs(decoded), replanning():
            plan = task.plan(src)
        return region.fill(plan.tile_reads(task.device), keys)


def _decode_blocks(confined_to: Path | None, *args: Any) -> None:
    """One task decoding blocks of a store (:func:`noa_core.io.omezarr.decode_blocks`), beneath ``confined_to``
    where given."""
    with beneath.confined(confined_to):
        omezarr.decode_blocks(*args)


class WholeTask(Exception):
    """Raised by :func:`write_split` given ``confined_to`` for a pair that one task would write whole (an input that
    is not mapped, a data set, an output workers do not see): its caller runs that task its own way."""


def _write_decoded(task: FileTask, src: Path, dst: Path, overwrite: bool, decoded: dict, *,
                   progress: Progress | None = None) -> FileResult:
    """A pair written by one task, its stores read from their ``decoded`` files."""
    with omezarr.decoded_inputs(decoded):
        return write_pair(task, src, dst, overwrite, progress)


class TaskStopped(Exception):
    """Raised in a task told to stop (:func:`one_task`): its caller was cancelled, and it commits nothing."""


def one_task(client: distributed.Client, progress: Progress | None, fn: Callable[..., T], *args: Any,
             **kwargs: Any) -> T:
    """``fn(*args, progress=..., **kwargs)`` run as one task of ``client``; its result.

    While the task runs, ``progress(0, 1)`` is called here every :data:`CANCEL_CHECK_S`, and ``progress(1, 1)`` once it
    ended. Once it raises (a cancelled job; Ctrl-C likewise), the task is told through a Dask event and stops at its
    next block, before any commit (the ``progress`` it is given raises :class:`TaskStopped` there); it is waited for
    up to :data:`CANCEL_GRACE_S`, so that nothing is committed after the caller stopped, then released, and the
    exception is raised here."""
    distributed = _distributed()
    stop = distributed.Event(f"noa-stop-{uuid.uuid4().hex}", client=client)
    # keyed by fn's name, as a task of fn alone would be (what the dashboard and task streams show)
    future = client.submit(_stoppable, fn, stop.name, args, kwargs, key=f"{fn.__name__}-{uuid.uuid4().hex}")
    try:
        while not future.done():
            try:
                if progress is not None:
                    progress(0, 1)
                distributed.wait(future, timeout=CANCEL_CHECK_S)
            except TimeoutError:
                continue
            except BaseException:
                stop.set()
                with contextlib.suppress(TimeoutError):
                    distributed.wait(future, timeout=CANCEL_GRACE_S)
                if not future.done():
                    future.cancel()
                raise
        result = future.result()
    finally:
        future.release()
        stop.clear()
    if progress is not None:
        progress(1, 1)
    return result


def _stoppable(fn: Callable[..., T], stop: str, args: tuple, kwargs: dict) -> T:
    """The task of :func:`one_task`: ``fn`` given a ``progress`` that raises TaskStopped once the event ``stop`` is
    set (looked at every :data:`CANCEL_CHECK_S`: a round trip to the scheduler)."""
    told = _distributed().Event(stop)
    checked = -math.inf

    def progress(done: int, total: int) -> None:
        nonlocal checked
        if time.monotonic() - checked >= CANCEL_CHECK_S:
            checked = time.monotonic()
            if told.is_set():
                raise TaskStopped

    progress(0, 1)  # stopped while it waited for a worker
    return fn(*args, progress=progress, **kwargs)


@dataclasses.dataclass(frozen=True)
class _Output:
    """A split's output ``path`` as this process names it, and the folder it lies in as the tasks find it
    (``folder``: None, that of ``path``; else ``path`` names it through a descriptor this process holds)."""

    path: Path
    folder: Path | None = None

    def for_tasks(self, path: Path) -> Path:
        """``path``, the output's or one beside it that this process made, as other processes find it."""
        return path if self.folder is None else self.folder / path.relative_to(self.path.parent)


@contextlib.contextmanager
def _decoded_stores(task: FileTask, src: PathLike, dst: _Output, client: distributed.Client,
                    block_bytes: int, confined_to: Path | None) -> Iterator[dict]:
    """The OME-Zarr inputs of the pair larger than ``block_bytes``, decoded by tasks over blocks of their
    chunks into temporary files beside ``dst`` (a file system every worker sees), removed on exit: the
    keys and files to read them from (:func:`noa_core.io.omezarr.decoded_inputs`).

    A store has no layout to map; decoded once into a plain file, its data are read by every tile task
    as any mapped input's, instead of each task decoding the whole store again."""
    distributed = _distributed()
    request = OmeZarrReadOptions(channel=task.options.get("channel"), level=task.options.get("level"))
    decoded: dict = {}
    temporaries: list[atomic.TemporaryOutput] = []
    try:
        for path in task.inputs(src):
            if not omezarr.is_store(path):
                continue
            nbytes, blocks = omezarr.decoding(path, request, min(block_bytes, omezarr.BLOCK_BYTES))
            if nbytes <= block_bytes:
                continue  # decoded by whichever process reads it, as any small input
            temp = atomic.TemporaryOutput(dst.path, overwrite=True)  # locked, so never taken for abandoned
            temporaries.append(temp)
            with open(temp.temp, "r+b") as file:
                omezarr.allocate(path, file.fileno(), nbytes, str(temp.temp.parent))
            run = uuid.uuid4().hex[:8]
            decoded_file = dst.for_tasks(temp.temp)
            futures = [client.submit(_decode_blocks, confined_to, path, request, decoded_file, [block],
                                     key=f"noa-decode-{run}-{i}", pure=False) for i, block in enumerate(blocks)]
            try:
                for future in distributed.as_completed(futures):
                    future.result()
            except BaseException:
                client.cancel(futures)
                raise
            decoded[omezarr.decoded_key(path, request)] = decoded_file
        yield decoded
    finally:
        for temp in temporaries:
            temp.abort()


def _task_runs(keys: list[tuple[slice, ...]], itemsize: int, task_bytes: int) -> list[list[tuple[slice, ...]]]:
    """Consecutive tiles grouped into ``ceil(output bytes / task_bytes)`` runs of about equal bytes.

    Tiles are sized by the pages they map, not by the data they hold: a depth <-> width permutation
    gets thousands of small ones, and one task per tile would cost more in scheduling than the copy.
    """
    sizes = [math.prod(k.stop - k.start for k in key) * itemsize for key in keys]
    total = sum(sizes)
    count = max(1, -(-total // task_bytes))
    runs: list[list[tuple[slice, ...]]] = [[] for _ in range(count)]
    before = 0
    for key, size in zip(keys, sizes):
        runs[min(count - 1, before * count // total)].append(key)
        before += size
    return [run for run in runs if run]


def write_split(task: FileTask, src: PathLike, dst: PathLike, client: distributed.Client, *, overwrite: bool = False,
                block_bytes: int = BLOCK_BYTES, progress: Progress | None = None, resume: bool = False,
                confined_to: Path | None = None, dst_folder: Path | None = None) -> list[str]:
    """Write one output with tasks over runs of its tiles, spread over the workers; return notices.

    Tiles buffer at most ``block_bytes`` (and :data:`TILE_BYTES`) of the output and of every input, and each
    task writes about ``block_bytes`` of output, so a worker's memory stays near its baseline plus two tiles.

    Used when every input is memory-mapped (uncompressed, native byte order, stored plainly) or an
    OME-Zarr store, and the output is larger than ``block_bytes``; otherwise the pair is one task. The
    output must be on a file system every worker sees at the same path, or on object storage: then split only on
    a LocalCluster, whose workers see this machine's temporary folder (else one task writes and uploads it). See
    the module documentation for the protocol.

    ``confined_to`` (a service's data root, which holds every path given): this call and its tasks open the files
    they read, and the tasks the temporary output, beneath it, following no link
    (:func:`noa_core.io.beneath.confined`); a pair one task would write whole raises :class:`WholeTask` instead
    (after decoding any large store input, which that task decodes again). ``dst_folder``: where the tasks find the
    folder of ``dst``, which names it through a descriptor this process holds (``/proc/self/fd/N/NAME``: the
    temporary output is created and renamed in the folder opened, whatever its path names since).
    """
    if block_bytes < MIN_BLOCK_BYTES:
        raise LayoutError(f"block_bytes: {block_bytes} is below {MIN_BLOCK_BYTES}: tasks that small cost more to "
                          "schedule than they write")
    task, src, dst = _here(task), as_path(src), as_path(dst)
    output = _Output(dst, dst_folder)
    # an output on object storage is written in the temporary folder of this process (the file uploaded, its side
    # files, decoded stores): workers elsewhere do not see it, so one of them writes the output whole in its own
    shared = not is_remote(dst) or _workers_here(client)
    if isinstance(task.operation, WritesDataSet) or not shared:  # it writes its own files (no tiles to share)
        if confined_to is not None:
            raise WholeTask
        if isinstance(task.operation, WritesDataSet) and task.operation.in_parts and shared:
            token = PARTS.set(TaskParts(client, task))  # written from here, its parts as tasks
            try:
                whole = write_pair(task, src, dst, overwrite, progress, resume)
            finally:
                PARTS.reset(token)
        else:  # one task
            whole = one_task(client, progress, write_pair, task, src, output.for_tasks(dst), overwrite, resume=resume)
        if whole.error is not None:
            raise whole.error
        return list(whole.notices)
    with beneath.confined(confined_to), _decoded_stores(task, src, output, client, block_bytes, confined_to) as decoded:
        with omezarr.decoded_inputs(decoded):
            plan = task.plan(src)
        small = math.prod(plan.shape) * plan.dtype.itemsize <= block_bytes
        if small or not all(mapped.is_mapped(s.numpy()) for s in plan.sources):  # an input in memory: one task
            if confined_to is not None:
                raise WholeTask
            result = one_task(client, progress, _write_decoded, task, src, output.for_tasks(dst), overwrite, decoded)
            if result.error is not None:
                raise result.error
            return list(result.notices)
        return _write_tiles(task, src, output, client, plan, decoded, overwrite, block_bytes, progress, confined_to)


def _workers_here(client: distributed.Client) -> bool:
    """Whether the workers of ``client`` run on this machine: a LocalCluster's (processes or threads), not those
    of a scheduler reached by its address, which may be anywhere."""
    return isinstance(client.cluster, _distributed().LocalCluster)


class TaskParts:
    """A data set's parts (:data:`noa_core.operations.spec.PARTS`) run as tasks of ``client``, the first alone (the
    kernels it compiles are cached for the others); as each ends, ``done`` is called here."""

    def __init__(self, client: distributed.Client, task: FileTask) -> None:
        self.client = client
        self.task = task
        self.threads = sum(client.nthreads().values()) or 1

    def __call__(self, fn: Callable[..., Any], calls: Sequence[tuple], done: Callable[[int, Any], None]) -> None:
        distributed = _distributed()
        run = uuid.uuid4().hex[:8]
        keys = [_key(self.task, i, run) for i in range(len(calls))]
        futures = [self.client.submit(fn, *calls[0], key=keys[0], pure=False)]
        try:
            done(0, futures[0].result())  # should it fail (or done raise), nothing else is submitted
            futures.extend(self.client.submit(fn, *call, key=key, pure=False) for call, key in zip(calls[1:], keys[1:]))
            index = {key: i for i, key in enumerate(keys)}
            for future in distributed.as_completed(futures[1:]):
                done(index[future.key], future.result())
                future.release()
        except BaseException:
            self.client.cancel(futures)  # a failure, or a cancel: nothing more is written
            raise


def _write_tiles(task: FileTask, src: PathLike, dst: _Output, client: distributed.Client, plan, decoded: dict,
                 overwrite: bool, block_bytes: int, progress: Progress | None, confined_to: Path | None) -> list[str]:
    """The split of :func:`write_split`: the output created here, its tiles filled by tasks; its side files written
    and placed with it here."""
    distributed = _distributed()
    with placed_with_side_files(plan, dst.path, overwrite) as placing, \
            plan.create(placing.target, overwrite=overwrite) as writer:
        made = writer.region()
        region = dataclasses.replace(made, path=dst.for_tasks(made.path))  # where the tasks find the file
        keys = plan.keys(writer, min(block_bytes, TILE_BYTES))
        runs = _task_runs(keys, plan.dtype.itemsize, block_bytes)
        run = uuid.uuid4().hex[:8]
        names = [_key(task, i, run) for i in range(len(runs))]
        futures = _warm_first(client, _fill_tiles,
                              [(task, src, region, keys, decoded, confined_to) for keys in runs], names)
        index = {name: i for i, name in enumerate(names)}
        run_stats: list[list[RunningStatistics]] = [[] for _ in runs]
        try:
            for done, future in enumerate(distributed.as_completed(futures), 1):
                run_stats[index[future.key]] = future.result()
                future.release()
                if progress is not None:
                    progress(done, len(runs))
        except BaseException:
            client.cancel(futures)  # stop writing into an output about to be discarded
            raise
        # in tile order, as the single-process writer merges them: the same bits
        writer.complete(RunningStatistics.merged(itertools.chain.from_iterable(run_stats)))
    return placing.told([*plan.notices, *writer.notices])


class DaskDriver:
    """Pairs written as Dask tasks on ``client``'s workers (see the module documentation)."""

    def __init__(self, client: distributed.Client, *, block_bytes: int = BLOCK_BYTES) -> None:
        self.client = client
        self.block_bytes = block_bytes

    def write(self, task: FileTask, src: PathLike, dst: PathLike, *, overwrite: bool = False,
              progress: Progress | None = None) -> list[str]:
        return write_split(task, src, dst, self.client, overwrite=overwrite, block_bytes=self.block_bytes,
                           progress=progress)

    def run_batch(self, task: FileTask, pairs: Sequence[tuple[PathLike, PathLike]], *, overwrite: bool = False,
                  resume: bool = False, on_result: Callable[[FileResult], None] | None = None,
                  progress: Progress | None = None) -> list[FileResult]:
        return run_batch(task, pairs, self.client, overwrite=overwrite, resume=resume, block_bytes=self.block_bytes,
                         on_result=on_result, progress=progress)


class LocalClusterDriver:
    """A :class:`DaskDriver` on a LocalCluster that its first call starts, sized by that call's work (a small
    batch runs on threads of this process: :func:`local_cluster`); :meth:`close` closes it."""

    def __init__(self, *, workers: int | None = None, block_bytes: int = BLOCK_BYTES) -> None:
        _distributed()  # a missing install is said now, before any work, as for a running scheduler
        self.workers = workers
        self.block_bytes = block_bytes
        self.client: distributed.Client | None = None
        self._started = contextlib.ExitStack()

    def _driver(self, task: FileTask, sources: Sequence[PathLike]) -> DaskDriver:
        if self.client is None:
            self.client = self._started.enter_context(
                connect(LOCAL, workers=self.workers, work_bytes=work_bytes(task, sources)))
        return DaskDriver(self.client, block_bytes=self.block_bytes)

    def write(self, task: FileTask, src: PathLike, dst: PathLike, *, overwrite: bool = False,
              progress: Progress | None = None) -> list[str]:
        return self._driver(task, [src]).write(task, src, dst, overwrite=overwrite, progress=progress)

    def run_batch(self, task: FileTask, pairs: Sequence[tuple[PathLike, PathLike]], *, overwrite: bool = False,
                  resume: bool = False, on_result: Callable[[FileResult], None] | None = None,
                  progress: Progress | None = None) -> list[FileResult]:
        return self._driver(task, [src for src, _ in pairs]).run_batch(
            task, pairs, overwrite=overwrite, resume=resume, on_result=on_result, progress=progress)

    def close(self) -> None:
        self._started.close()
        self.client = None

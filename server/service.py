"""The running service's state: the worker pool, the sandbox, the job store and readiness.

All noa_core work runs in one bounded pool of ``settings.workers`` threads, each pinned to
``settings.kernel_threads`` numba threads (numba's thread count is per calling thread), so the
kernels of all workers of all ``settings.processes`` server processes together fit the cores, and
the event loop never computes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from fastapi import Request

from noa_core.compute import compute_path, expr
from noa_core.io import remote
from noa_core.io.remote import RemotePath
from noa_core.kernels import runtime
from noa_core.pictures import drawing
from noa_core.run import Progress, cluster
from noa_core.run.warmup import WarmupState, warmed_lately, warmup_once
from noa_server import execution
from noa_server.execution import remove_abandoned_uploads
from noa_server.jobs import JobStore
from noa_server.models import PathRequest
from noa_server.problems import ProblemError
from noa_server.sandbox import AnySandbox, open_sandbox
from noa_server.settings import Settings
from noa_server.watches import open_watches

T = TypeVar("T")
# Set when this process retired itself (retire_if_spent); how its server stops is installed by
# noa_server.processes, which owns the uvicorn Server (none when the app runs under another server).
RETIRING = threading.Event()
_STOP_SERVER: list[Callable[[], None]] = []


def on_retire(stop_server: Callable[[], None]) -> None:
    """Make ``stop_server()`` what a retiring process calls (uvicorn: ``server.should_exit = True``)."""
    _STOP_SERVER[:] = [stop_server]
log = logging.getLogger("noa.server")
SHUTDOWN_GRACE_S = 10.0
CLUSTER_JOBS = 32  # jobs a process keeps on a Dask cluster at once (each waited on by a thread); more wait queued


def _pin_kernel_threads(count: int) -> None:
    import numba

    # NUMBA_NUM_THREADS (the pool numba launches) caps what a thread may ask for.
    numba.set_num_threads(min(count, numba.config.NUMBA_NUM_THREADS))


class Service:
    def __init__(self, settings: Settings):
        self.settings = settings
        root = settings.data_root
        if isinstance(root, RemotePath):
            remote.check_folder(root)  # a missing or forbidden bucket stops the server (a ValueError, in one line)
        elif root is not None and not root.is_dir():
            # A typo in --data-root must stop the server, not create an empty root.
            raise ValueError(f"data root {root} is not a folder")
        self.sandbox = None if root is None else open_sandbox(root, settings.jobs_dir, settings.tmp_dir)
        jobs_dir = settings.jobs_dir  # set whenever the data root is
        self.jobs = (None if root is None or jobs_dir is None
                     else JobStore(jobs_dir, settings.job_ttl, database=settings.database))
        self._pool = ThreadPoolExecutor(settings.workers, "noa-worker", initializer=_pin_kernel_threads,
                                        initargs=(settings.kernel_threads,))
        # With a Dask scheduler, jobs run on its workers; a thread each waits on them, outside the worker pool.
        # The client is made (and closed) by a thread of its own: a sync Dask client is not made in the event loop.
        on_cluster = settings.dask is not None and self.jobs is not None  # no data root: no jobs, no cluster
        self._dask = ThreadPoolExecutor(1, "noa-dask-client") if on_cluster else None
        self._cluster_jobs = ThreadPoolExecutor(CLUSTER_JOBS, "noa-cluster-job") if on_cluster else None
        self._client: Future | None = None
        self._client_closing = contextlib.ExitStack()
        self._warmup: Future | None = None
        self._stopping = threading.Event()
        self.watches = open_watches(settings.watch_config, self.jobs, self.sandbox, self.start_job, self.job_work)

    def start(self) -> None:
        """Remove what killed server processes left in the upload folder; compile the kernels in a
        worker thread, once per installation (:func:`noa_core.run.warmup.warmup_once`). Requests are
        answered meanwhile: small files by NumPy, larger ones by kernels compiled (or loaded from the
        cache) when first needed, so readiness does not wait for it."""
        for folder in remove_abandoned_uploads(self.settings.tmp_dir):
            log.info("removed %s, the upload folder of a server process that was killed", folder)
        # Clients' expressions are compiled once per process and kept in memory, not cached on
        # disk: every distinct one would stay in the cache directory for good.
        runtime.CACHE_EXPRESSIONS = False
        if self._dask is not None:
            self._client = self._dask.submit(self._connect)
            self._client.add_done_callback(_log_connected)
        if self.watches is not None:
            self.watches.start()
        if self.settings.warmup:
            # Until the cache holds the kernels, small files are NumPy's: a first request must not wait while
            # a kernel compiles (2 s for the statistics).
            self._warmup = self._pool.submit(_warm_up, self._stopping)
            warmup = self._warmup
            compute_path.kernels_ready_when(warmed_lately() if runtime.cache_folder() is not None else warmup.done)
            self._warmup.add_done_callback(_log_warmup)

    def retire_if_spent(self) -> None:
        """Once this process has compiled ``max_expressions`` expressions and runs no job, ask its
        server to stop (gracefully) so that a fresh process replaces it: see :mod:`noa_server.processes`."""
        limit = self.settings.max_expressions
        if not limit or expr.compiled_count() < limit or RETIRING.is_set():
            return
        if self.jobs is not None and self.jobs.busy():
            return  # the next request checks again
        log.info("compiled %d expressions; this process is replaced to give their memory back",
                 expr.compiled_count())
        RETIRING.set()
        for stop_server in _STOP_SERVER:
            stop_server()

    def stop(self) -> None:
        self._stopping.set()  # the warm-up ends after its current case: no kernel runs while Python exits
        compute_path.kernels_ready_when(None)
        if self.watches is not None:  # first: no job is submitted while the jobs stop
            self.watches.stop()
        if self.jobs is not None:
            self.jobs.stop()
            self.jobs.wait_idle(SHUTDOWN_GRACE_S)
        if self._warmup is not None:
            futures.wait([self._warmup], timeout=SHUTDOWN_GRACE_S)
        if self._dask is not None and self._cluster_jobs is not None:
            self._cluster_jobs.shutdown(wait=False, cancel_futures=True)
            futures.wait([self._dask.submit(self._client_closing.close)], timeout=SHUTDOWN_GRACE_S)
            self._dask.shutdown(wait=False)
        self._pool.shutdown(wait=False, cancel_futures=True)
        execution.remove_link_folder(self.settings.tmp_dir)

    @property
    def kernels(self) -> str:
        """The kernels' warm-up: "off", "compiling", "failed", or what warmup_once found or did."""
        if self._warmup is None:
            return "off"
        if not self._warmup.done():
            return "compiling"
        return "failed" if self._warmup.exception() is not None else self._warmup.result()

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        future = self._pool.submit(fn, *args)
        future.add_done_callback(lambda _: self.retire_if_spent())
        return future

    def start_job(self, fn: Callable[[], None]) -> Future[None]:
        """Start a job's ``fn``: in the worker pool, or with a Dask scheduler in a thread that waits on the cluster
        (the pool stays free for requests)."""
        if self._cluster_jobs is None:
            return self.submit(fn)
        return self._cluster_jobs.submit(fn)

    def job_work(self, request: PathRequest) -> Callable[[Progress], Any]:
        """A job's work, ``work(progress)``, on this service's workers or its cluster's; its paths checked now
        (a ProblemError), so that a refused path is never recorded as a job."""
        execution.plan(request, self.paths())
        limit = self.settings.max_voxels
        # planned again as it starts: its files are opened as their paths resolve then
        if self.settings.dask is not None:  # on the cluster's workers (see start_job)
            return lambda progress: execution.run_on_cluster(execution.plan(request, self.paths()), limit, progress,
                                                             self.dask_client())
        return lambda progress: execution.run_on_paths(execution.plan(request, self.paths()), limit, progress)

    def _connect(self) -> Any:
        assert self.settings.dask is not None
        address, workers = self.settings.dask
        return self._client_closing.enter_context(cluster.connect(address, workers=workers))

    def dask_client(self) -> Any:
        """The Dask client of ``settings.scheduler`` (a ``distributed.Client``), once connected (waits for it)."""
        assert self._client is not None, "the service was started without a scheduler, or not started"
        return self._client.result()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker thread; the event loop only waits."""
        return await asyncio.wrap_future(self.submit(fn, *args))

    def paths(self) -> AnySandbox:
        if self.sandbox is None:
            raise ProblemError(403, "paths-disabled", "Server-side paths disabled",
                               "this server was started without a data root; upload the files instead")
        return self.sandbox

    def job_store(self) -> JobStore:
        self.paths()
        assert self.jobs is not None
        return self.jobs


def _log_connected(future: Future) -> None:
    if future.exception() is not None:
        log.error("cannot reach the Dask scheduler; jobs fail until the service is restarted: %s", future.exception())
    else:
        log.info("jobs run on the Dask cluster %s", future.result().scheduler.address)


def _warm_up(stopping: threading.Event) -> WarmupState:
    """What a first request would otherwise wait for, loaded in a worker: the picture encoders, then the kernels
    (:func:`noa_core.run.warmup.warmup_once`, whose outcome it gives)."""
    drawing.load_encoders()
    return warmup_once(stopping)


def _log_warmup(future: Future) -> None:
    if future.exception() is not None:
        log.error("kernel warm-up failed; kernels compile when first needed", exc_info=future.exception())
    else:
        log.info("kernel warm-up: %s", future.result())


async def service(request: Request) -> Service:
    """Dependency: the app's Service (async: FastAPI runs a plain def dependency in a thread)."""
    return request.app.state.service

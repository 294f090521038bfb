"""The running service's state: the worker pool, the sandbox, the job store and readiness.

All noa_core work runs in one bounded pool of ``settings.workers`` threads, each pinned to
``settings.kernel_threads`` numba threads (numba's thread count is per calling thread), so the
kernels of all workers of all ``settings.processes`` server processes together fit the cores, and
the event loop never computes.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from fastapi import Request

from noa_core.compute import expr
from noa_core.kernels import runtime
from noa_core.run.warmup import warmup_once
from noa_server.execution import remove_abandoned_uploads
from noa_server.jobs import JobStore
from noa_server.problems import ProblemError
from noa_server.sandbox import Sandbox
from noa_server.settings import Settings

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


def _pin_kernel_threads(count: int) -> None:
    import numba

    # NUMBA_NUM_THREADS (the pool numba launches) caps what a thread may ask for.
    numba.set_num_threads(min(count, numba.config.NUMBA_NUM_THREADS))


class Service:
    def __init__(self, settings: Settings):
        self.settings = settings
        root = settings.data_root
        if root is not None and not root.is_dir():
            # A typo in --data-root must stop the server, not create an empty root.
            raise ValueError(f"data root {root} is not a folder")
        self.sandbox = None if root is None else Sandbox(root, settings.jobs_dir, settings.tmp_dir)
        jobs_dir = settings.jobs_dir  # set whenever the data root is
        self.jobs = (None if root is None or jobs_dir is None
                     else JobStore(jobs_dir, settings.job_ttl, database=settings.database))
        self._pool = ThreadPoolExecutor(settings.workers, "noa-worker", initializer=_pin_kernel_threads,
                                        initargs=(settings.kernel_threads,))
        self._warmup: Future | None = None
        self._stopping = threading.Event()

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
        if self.settings.warmup:
            self._warmup = self._pool.submit(warmup_once, self._stopping)
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
        if self.jobs is not None:
            self.jobs.stop()
            self.jobs.wait_idle(SHUTDOWN_GRACE_S)
        if self._warmup is not None:
            futures.wait([self._warmup], timeout=SHUTDOWN_GRACE_S)
        self._pool.shutdown(wait=False, cancel_futures=True)

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

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker thread; the event loop only waits."""
        return await asyncio.wrap_future(self.submit(fn, *args))

    def paths(self) -> Sandbox:
        if self.sandbox is None:
            raise ProblemError(403, "paths-disabled", "Server-side paths disabled",
                               "this server was started without a data root; upload the files instead")
        return self.sandbox

    def job_store(self) -> JobStore:
        self.paths()
        assert self.jobs is not None
        return self.jobs


def _log_warmup(future: Future) -> None:
    if future.exception() is not None:
        log.error("kernel warm-up failed; kernels compile when first needed", exc_info=future.exception())
    else:
        log.info("kernel warm-up: %s", future.result())


async def service(request: Request) -> Service:
    """Dependency: the app's Service (async: FastAPI runs a plain def dependency in a thread)."""
    return request.app.state.service

"""The local driver: the pairs of a batch written one after the other in this process (the kernels use every
core), each by :func:`noa_core.run.execute`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

from noa_core import run  # a face: the Dask driver's module loads only when asked for (the dask extra)
from noa_core.io.remote import as_path
from noa_core.operations import FileTask
from noa_core.run.batch import Driver, FileResult, PathLike, Progress, split_complete
from noa_core.run.execution import execute, write_pair


class LocalDriver:
    """Pairs written one after the other in this process (the kernels use every core)."""

    def write(self, task: FileTask, src: PathLike, dst: PathLike, *, overwrite: bool = False,
              progress: Progress | None = None) -> list[str]:
        written = execute(task.operation, task.inputs(src), dst, task.options, overwrite=overwrite, progress=progress)
        return written["notices"]

    def run_batch(self, task: FileTask, pairs: Sequence[tuple[PathLike, PathLike]], *, overwrite: bool = False,
                  resume: bool = False, on_result: Callable[[FileResult], None] | None = None,
                  progress: Progress | None = None) -> list[FileResult]:
        todo, complete = split_complete(pairs) if resume else ([(as_path(s), as_path(d)) for s, d in pairs], [])
        results = {}
        for src, dst in complete:
            results[(src, dst)] = FileResult(src, dst, "skipped")
            if on_result is not None:
                on_result(results[(src, dst)])
        for done, (src, dst) in enumerate(todo, 1):
            # A lone pair reports its tiles; several report pairs.
            result = write_pair(task, src, dst, overwrite, progress if len(todo) == 1 else None, resume)
            results[(src, dst)] = result
            if on_result is not None:
                on_result(result)
            if progress is not None and len(todo) > 1:
                progress(done, len(todo))
        return [results[(as_path(s), as_path(d))] for s, d in pairs]


@contextlib.contextmanager
def driver(scheduler: str | None = None, *, workers: int | None = None) -> Iterator[Driver]:
    """The local driver, or with ``scheduler`` ('local' or tcp://HOST:PORT) a Dask one (closed on exit). A local
    cluster starts at the first call, sized by its work (:class:`~noa_core.run.cluster.LocalClusterDriver`)."""
    if scheduler is None:
        yield LocalDriver()
    elif scheduler == run.cluster.LOCAL:
        with contextlib.closing(run.cluster.LocalClusterDriver(workers=workers)) as local:
            yield local
    else:
        with run.cluster.connect(scheduler, workers=workers) as client:
            yield run.cluster.DaskDriver(client)

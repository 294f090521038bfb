"""Drivers: write a file operation's outputs, here or on a cluster, behind one interface.

A driver writes one (input, output) pair of a :class:`~noa_core.operations.FileTask`
(:meth:`Driver.write`) or a batch of pairs (:meth:`Driver.run_batch`: one :class:`FileResult`
per pair, a failure is that pair's result and the others go on). :class:`~noa_core.run.local.LocalDriver`
streams tiles in this process; :class:`~noa_core.run.cluster.DaskDriver` runs the same tiles as
Dask tasks. The CLI, the service and Python callers only choose one (:func:`driver`) and report.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from noa_core.run.batch import Driver, FileResult, PathLike, Progress, split_complete

__all__ = ["Driver", "FileResult", "PathLike", "Progress", "driver", "split_complete"]


@contextlib.contextmanager
def driver(scheduler: str | None = None, *, workers: int | None = None) -> Iterator[Driver]:
    """The local driver, or with ``scheduler`` ('local' or tcp://HOST:PORT) a Dask one (closed on exit)."""
    if scheduler is None:
        from noa_core.run.local import LocalDriver

        yield LocalDriver()
        return
    from noa_core.run.cluster import DaskDriver, connect

    with connect(scheduler, workers=workers) as client:
        yield DaskDriver(client)

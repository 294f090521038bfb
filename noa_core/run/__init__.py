"""Running operations: :func:`execute` runs one of any kind on files (what every door calls), and drivers
write a batch of (input, output) pairs of a :class:`~noa_core.operations.FileTask`, here or on a cluster,
behind one interface (:meth:`Driver.write`, :meth:`Driver.run_batch`: one :class:`FileResult` per pair, a
failure is that pair's result and the others go on). :class:`~noa_core.run.drivers.LocalDriver` writes each
pair in this process; :class:`~noa_core.run.cluster.DaskDriver` runs pairs, or one large file's tiles, as
Dask tasks. The CLI, the service and Python callers choose one (:func:`driver`) and report. Loaded on first
use: ``import noa_core.run`` loads nothing.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__, ["batch", "cluster", "drivers", "local", "warmup"],
    {"batch": ["Driver", "FileResult", "PathLike", "Progress", "split_complete"],
     "drivers": ["driver"], "execution": ["Limits", "NO_LIMITS", "execute"]})

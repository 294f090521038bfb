"""Which code computes a file operation: NumPy for small work, noa's numba kernels for the rest.

Importing numba and loading its cached kernels costs about half a second, more than NumPy takes for
any small file, and pipelines call noa once per file, thousands of times. So a file operation whose
inputs and output are smaller than :data:`SMALL_BYTES` runs on NumPy (and scipy), with the same
results to the bit: the same conversions, statistics and expressions, written once more in NumPy
(tests compare both paths' bytes for every operation and type). Above it, the numba kernels run, as
before: parallel, fused, with bounded memory.

The drivers choose (:func:`for_size`, given :func:`noa_core.io.formats.input_bytes`); the computes ask
:func:`numpy_path`.
Outside a driver (``noa_core`` called from Python on Arrays) the kernels run. ``NOA_COMPUTE=numpy``
or ``numba`` forces one path (``auto``, the default, chooses by size); ``noa --debug`` and the
``noa`` logger at DEBUG level say which path ran and why.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
from collections.abc import Callable, Iterator

# Measured with benchmarks/bench_cli.py --crossover on 2 cores (3 rounds paired): whole `noa copy` and
# `noa stats` processes on the NumPy path took 0.26-0.45x the numba path's time up to 32 MiB, 0.72-0.87x at
# 64 MiB and 1.07-1.15x at 128 MiB: they break even near 96 MiB, numba's import and kernel loading included.
SMALL_BYTES = 96 << 20
PATHS = ("auto", "numpy", "numba")
ENVIRONMENT = "NOA_COMPUTE"

_current: contextvars.ContextVar[str] = contextvars.ContextVar("noa_compute_path", default="numba")
_pinned: contextvars.ContextVar[str | None] = contextvars.ContextVar("noa_compute_path_pinned", default=None)
# Whether numba's kernels run without compiling first (None: taken as yes). A service sets it while its warm-up
# fills an empty cache: until then small work takes NumPy's path instead of waiting seconds for a kernel.
_kernels_ready: Callable[[], bool] | None = None


def kernels_ready_when(ready: Callable[[], bool] | None) -> None:
    """Make :func:`choose` take numba's path for small work in a process that loaded numba only once ``ready()``
    (None: at once)."""
    global _kernels_ready
    _kernels_ready = ready


def forced() -> str:
    """The path ``NOA_COMPUTE`` asks for: 'auto' (by size), 'numpy' or 'numba'."""
    value = os.environ.get(ENVIRONMENT, "auto").strip().lower() or "auto"
    return value if value in PATHS else "auto"


def choose(nbytes: int | None) -> str:
    """'numpy' for work of ``nbytes`` below :data:`SMALL_BYTES` (None: unknown, so not small) in a process
    that has not loaded numba yet (or whose kernels are not ready: :func:`kernels_ready_when`), else 'numba';
    ``NOA_COMPUTE`` overrides. Once numba is loaded (the service, a Dask worker, a batch past its first large
    file), its kernels win at every size: 6x NumPy's time at 0.25 MiB, 24x at 64 MiB (a clamped conversion and
    the header statistics, in one process)."""
    wanted = forced()
    if wanted != "auto":
        return wanted
    if "numba" in sys.modules and (_kernels_ready is None or _kernels_ready()):
        return "numba"
    return "numpy" if nbytes is not None and nbytes < SMALL_BYTES else "numba"


def numpy_path() -> bool:
    """Whether the work being done now is computed with NumPy (chosen by the driver running it)."""
    return _current.get() == "numpy"


def kernels_to_load() -> bool:
    """Whether the work being done now loads numba's kernels before it computes (its path is numba's, in a process
    that has not imported numba yet): what needs no kernel, such as allocating the output's blocks, can be done
    meanwhile."""
    return not numpy_path() and "numba" not in sys.modules


@contextlib.contextmanager
def using(path: str) -> Iterator[str]:
    """Compute with ``path`` ('numpy' or 'numba') inside the block, whatever the drivers inside it would
    choose (``noa warmup`` runs small files on the numba path, to compile its kernels)."""
    if path not in ("numpy", "numba"):
        raise ValueError(f"compute path {path!r} is not numpy or numba")
    tokens = _current.set(path), _pinned.set(path)
    try:
        yield path
    finally:
        _current.reset(tokens[0])
        _pinned.reset(tokens[1])


@contextlib.contextmanager
def for_size(nbytes: int | None, what: str = "") -> Iterator[str]:
    """Compute work of ``nbytes`` on the path :func:`choose` gives (or the one an enclosing :func:`using`
    pins), saying which at DEBUG level."""
    path = _pinned.get() or choose(nbytes)
    # Where logging was never imported, nothing can have been set to show it (and importing it costs 8 ms).
    logging = sys.modules.get("logging")
    log = None if logging is None else logging.getLogger("noa")
    if _pinned.get() is None and logging is not None and log is not None and log.isEnabledFor(logging.DEBUG):
        size = "unknown size" if nbytes is None else f"{nbytes / 1024:.0f} KiB"
        if forced() != "auto":
            why = f"{ENVIRONMENT}={forced()}"
        elif path == "numba" and "numba" in sys.modules and nbytes is not None and nbytes < SMALL_BYTES:
            why = f"{size}, but numba is loaded already"
        elif path == "numpy" and "numba" in sys.modules:
            why = f"{size} < the threshold {SMALL_BYTES >> 20} MiB, and the kernels are still compiling"
        else:
            why = f"{size} {'<' if path == 'numpy' else '>='} the threshold {SMALL_BYTES >> 20} MiB"
        log.debug("compute path %s%s: %s", path, f" for {what}" if what else "", why)
    token = _current.set(path)
    try:
        yield path
    finally:
        _current.reset(token)


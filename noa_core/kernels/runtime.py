"""Numba runtime set-up, done once before any kernel is compiled.

Two process-wide settings are decided here, and every module of :mod:`noa_core.kernels` imports this one
before its ``njit`` decorators run:

- the compilation cache directory: numba writes next to the sources (``__pycache__``) by default
  and fails at decoration time when that is read-only (containers, Apptainer images, site-wide
  installs). :func:`choose_cache_dir` picks a writable directory instead.
- the threading layer: kernels may be launched from several Python threads at once (a web server);
  numba's default ``workqueue`` layer is not safe for that, so the layer is pinned to
  ``'threadsafe'`` (tbb, else OpenMP) unless the user chose one through ``NUMBA_THREADING_LAYER``.
  TBB is preferred: an OpenMP region ends at a barrier that waits for every thread, so on a busy
  machine (a server, a shared node) a kernel of 0.2 ms took 8-12 ms whenever a worker thread was
  not scheduled; TBB's caller finishes the work alone instead (measured: 0.3-1.5 ms). The ``tbb``
  wheel installs its library where the loader does not look, so it is loaded here by path.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.metadata
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import numba
import numpy as np

PACKAGE_DIR = Path(__file__).resolve().parent

# Arrays with fewer elements than this run each kernel on the calling thread alone (:func:`launch`): waking
# the thread pool costs more than the work (measured on 2 cores with TBB: break-even is around 256K float32).
SERIAL_THRESHOLD = 1 << 18


def launch(kernel: Callable, parallel: bool, *args) -> None:
    """Call ``kernel`` (compiled ``parallel=True``) on the threads numba gives this thread when ``parallel``,
    else on this thread alone. One compiled version serves both (a serial twin per kernel would double what a
    new installation compiles); numba's thread count belongs to the calling thread, so a server's other threads
    keep theirs."""
    threads = numba.get_num_threads()
    if parallel or threads == 1:
        kernel(*args)
        return
    numba.set_num_threads(1)
    try:
        kernel(*args)
    finally:
        numba.set_num_threads(threads)


def read_only(x):
    """A read-only view of a kernel's input array (scalars pass through).

    numba compiles a separate version for read-only arrays, which is what memory-mapped files give;
    handing every kernel its inputs read-only, whether a file, a conversion or Python made them, halves
    the versions to compile and cache.
    """
    if not isinstance(x, np.ndarray) or not x.flags.writeable:
        return x
    view = x.view()
    view.flags.writeable = False
    return view


def _writable(directory: Path) -> bool:
    """True when ``directory`` exists or can be created, and a file can be written in it."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory):
            pass
        return True
    except OSError:
        return False


# Returned by choose_cache_dir when no folder at all can be written: kernels are then compiled in
# every process and kept in memory only.
NO_CACHE = ""


def choose_cache_dir(environ: Mapping[str, str] | None = None, package_dir: Path = PACKAGE_DIR) -> str | None:
    """The directory numba should cache compiled kernels in; None keeps numba's default.

    Order: ``NUMBA_CACHE_DIR`` if set and writable; the package's own ``__pycache__`` (numba's
    default, returned as None) if writable; ``$XDG_CACHE_HOME/noa/numba`` or ``~/.cache/noa/numba``;
    a directory under the system temp dir; :data:`NO_CACHE` when even that cannot be written (a
    container with a read-only root and no writable /tmp).
    """
    env = os.environ if environ is None else environ
    explicit = env.get("NUMBA_CACHE_DIR")
    if explicit and _writable(Path(explicit)):
        return explicit
    if _writable(package_dir / "__pycache__") and _writable(package_dir / "kernels" / "__pycache__"):
        return None
    xdg = env.get("XDG_CACHE_HOME")
    home_cache = Path(xdg) if xdg else Path(env.get("HOME", str(Path.home()))) / ".cache"
    candidate = home_cache / "noa" / "numba"
    if _writable(candidate):
        return str(candidate)
    try:
        temp = tempfile.gettempdir()  # raises when no temporary folder is writable
    except FileNotFoundError:
        return NO_CACHE
    fallback = Path(temp) / f"noa-numba-{os.getuid() if hasattr(os, 'getuid') else 'user'}"
    return str(fallback) if _writable(fallback) else NO_CACHE


def load_tbb() -> bool:
    """Load the ``tbb`` wheel's shared library globally, so numba's tbb layer can link to it."""
    try:
        files = importlib.metadata.files("tbb") or []
    except importlib.metadata.PackageNotFoundError:
        return False
    for file in files:
        if file.name == "libtbb.so.12":
            try:
                ctypes.CDLL(str(file.locate()), mode=ctypes.RTLD_GLOBAL)
                return True
            except OSError:
                return False
    return False


# Whether compiled kernels are cached on disk (``cache=`` of every njit in noa_core).
CACHE_ENABLED = True

# Whether kernels built around noa_core.compute.expr expressions are cached on disk too. The service turns
# it off: each distinct client expression would leave its kernels in the cache directory for good.
CACHE_EXPRESSIONS = True


def configure() -> None:
    """Apply the cache directory and threading layer to ``numba.config`` (idempotent)."""
    global CACHE_ENABLED
    cache_dir = choose_cache_dir()
    CACHE_ENABLED = cache_dir != NO_CACHE
    if cache_dir:
        numba.config.CACHE_DIR = cache_dir
    elif os.environ.get("NUMBA_CACHE_DIR"):
        # NUMBA_CACHE_DIR was set but is not writable: fall back to numba's in-tree default.
        numba.config.CACHE_DIR = ""
    if not os.environ.get("NUMBA_THREADING_LAYER"):
        load_tbb()
        numba.config.THREADING_LAYER = "threadsafe"


def cache_folder() -> Path | None:
    """The folder numba caches noa's kernels in now (after :func:`configure`); None when nothing is cached."""
    if not CACHE_ENABLED:
        return None
    return Path(numba.config.CACHE_DIR) if numba.config.CACHE_DIR else PACKAGE_DIR / "__pycache__"


@functools.cache  # once a process: a refresh of the loaded target cost each request of a service 0.15 ms
def load_cpu_target() -> None:
    """Load numba's CPU implementations now, with SciPy hidden.

    numba loads them on the first kernel it compiles or takes from the cache, and on the way imports
    ``scipy.linalg`` only to learn whether ``np.dot`` may call BLAS: a quarter of a second of every
    command's start-up where SciPy is installed. noa's kernels call no BLAS. Without it numba's
    ``np.dot`` of vectors is a loop; the rest of ``np.linalg`` imports SciPy when a kernel first uses
    it, and so does noa where it needs SciPy itself (the hiding ends here).
    """
    import sys

    from numba.core.registry import cpu_target

    hide = "scipy.linalg" not in sys.modules
    if hide:
        sys.modules["scipy.linalg"] = None  # type: ignore[assignment]  # an import of it fails at once
    try:
        cpu_target.target_context.refresh()
    finally:
        if hide:
            del sys.modules["scipy.linalg"]


configure()
load_cpu_target()

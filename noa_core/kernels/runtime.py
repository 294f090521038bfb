"""Numba runtime set-up, done once before any kernel is compiled.

Two process-wide settings are decided here, and every module of :mod:`noa_core.kernels` imports this one
before its ``njit`` decorators run:

- the compilation cache directory: numba writes next to the sources (``__pycache__``) by default
  and fails at decoration time when that is read-only (containers, Apptainer images, site-wide
  installs). :func:`choose_cache_dir` picks a writable directory instead.
- the threading layer: noa's kernels are serial and run their parts on noa's own threads (:func:`launch`), but
  the thread count each thread may use (:func:`numba.set_num_threads`, per thread: a server's workers share the
  cores) lives in numba's layer, and a user's own ``parallel=True`` code may run beside a server's threads,
  which numba's default ``workqueue`` layer does not allow; so the layer is pinned to ``'threadsafe'`` (tbb,
  else OpenMP) unless the user chose one through ``NUMBA_THREADING_LAYER``. The ``tbb`` wheel installs its
  library where the loader does not look, so it is loaded here by path.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.metadata
import inspect
import os
import tempfile
import textwrap
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic, overload, register_jitable

from noa_core.kernels.sources import cache_on_disk, compile_template, parted

PACKAGE_DIR = Path(__file__).resolve().parent

# Arrays with fewer elements than this run each kernel on the calling thread alone (:func:`launch`): waking
# a helper thread costs more than the work (measured on 2 cores: a float32 copy of 256K elements took 0.12-0.17
# ms alone, 0.18-0.21 ms on two threads; of 512K, 0.32-0.35 and 0.28-0.33 ms).
SERIAL_THRESHOLD = 1 << 19


# A parallel launch is cut into this many parts per thread. Every thread of a launch, the launching one
# included, takes parts (an atomic counter, in the kernel) until none is left, and the launch ends once every
# part is done: a thread the machine does not schedule (a busy server, a shared node) leaves its parts to the
# others instead of holding the launch back (an OpenMP-style barrier made a kernel of 0.2 ms take 8-12 ms so),
# and no thread needs the GIL between its parts.
PARTS_PER_THREAD = 4
# How many times the launching thread looks whether the other threads' parts are done before it waits for them.
SPINS = 1 << 16


def _item_pointer(context, builder, signature, args):
    """The address of ``counters[index]``, the intrinsics' two arguments."""
    array_type = signature.args[0]
    array = context.make_array(array_type)(context, builder, value=args[0])
    return cgutils.get_item_pointer(context, builder, array_type, array, [args[1]])


@intrinsic
def _fetch_add(typingctx, counters, index):
    """``counters[index] += 1``, atomically (sequentially consistent); the value before."""
    return types.int64(counters, types.intp), lambda context, builder, signature, args: builder.atomic_rmw(
        "add", _item_pointer(context, builder, signature, args), ir.Constant(ir.IntType(64), 1), "seq_cst")


@intrinsic
def _load_acquire(typingctx, counters, index):
    """``counters[index]``, read after every write made before its last atomic update."""
    return types.int64(counters, types.intp), lambda context, builder, signature, args: builder.load_atomic(
        _item_pointer(context, builder, signature, args), "acquire", 8)


# A launch's control: [next part to take, parts, parts done] (int64). Compiled, the part functions count with
# atomic instructions; called from Python (a kernel's py_func), under a lock.
_COUNTING = threading.Lock()


def take_part(control) -> int:
    """The next part for this thread (``>= control[1]``: none is left)."""
    with _COUNTING:
        control[0] += 1
        return int(control[0]) - 1


def part_done(control) -> None:
    with _COUNTING:
        control[2] += 1


@overload(take_part, jit_options={"nogil": True})
def _take_part_compiled(control):
    return lambda control: _fetch_add(control, 0)


@overload(part_done, jit_options={"nogil": True})
def _part_done_compiled(control):
    def done(control):
        _fetch_add(control, 2)

    return done


@register_jitable
def part_bounds(total: int, part: int, parts: int) -> tuple[int, int]:
    """The tasks ``[first, last)`` of ``part`` when ``total`` tasks are cut into ``parts`` nearly equal parts."""
    return total * part // parts, total * (part + 1) // parts


def parts_of(total: int) -> range:
    """A kernel's task loop, ``for task in parts_of(total):``, as written: every task, in order. Compiled, the loop
    takes parts of them until none is left (:func:`noa_core.kernels.sources.parted`)."""
    return range(total)


# What a kernel's part loop calls (:func:`noa_core.kernels.sources.parted`), by name.
PART_HELPERS = {"take_part": take_part, "part_done": part_done, "part_bounds": part_bounds}


def compile_kernel(source: str, name: str, module: str, namespace: dict, cache: bool = True, **options) -> Callable:
    """The CPU kernel ``name`` of ``source``, a function written with a ``parts_of`` task loop (:func:`parted`) and
    a last parameter ``control``: compiled with numba (``nogil``, ``options``) in ``namespace`` and the part
    helpers, as a function of ``module``; :func:`launch` runs it. With ``cache`` (and a cache folder), cached on
    disk by the module's file: not ``njit(cache=True)``, since numba cannot locate a function compiled under a
    ``<noa kernel ...>`` name (:func:`noa_core.kernels.sources.cache_on_disk`)."""
    func = compile_template(parted(source), name, module, {**namespace, **PART_HELPERS})
    kernel = numba.njit(nogil=True, **options)(func)
    return cache_on_disk(kernel) if cache and CACHE_ENABLED else kernel


def compile_parted(func: Callable, namespace: dict, **options) -> Callable:
    """:func:`compile_kernel` of ``func``, a plain function of its module, from its own source."""
    return compile_kernel(textwrap.dedent(inspect.getsource(func)), func.__name__, func.__module__, namespace,
                          **options)


_HELPER_NAME = "noa-kernel"
_POOL_LOCK = threading.Lock()
_POOL: list[ThreadPoolExecutor] = []  # the process's helper threads, made at its first parallel launch


def _helpers() -> ThreadPoolExecutor:
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(max(1, numba.config.NUMBA_NUM_THREADS - 1),
                                            thread_name_prefix=_HELPER_NAME))
        return _POOL[0]


def is_helper(thread: threading.Thread) -> bool:
    """Whether ``thread`` is one of the kernels' helper threads: idle whenever no launch runs (a launch returns
    once its parts are done), so a command may end without waiting for them."""
    return thread.name.startswith(_HELPER_NAME)


def _forget_helpers() -> None:
    """In a forked child: its parent's helper threads do not exist there."""
    _POOL.clear()


os.register_at_fork(after_in_child=_forget_helpers)


def launch(kernel: Callable, parallel: bool, *args) -> None:
    """Run ``kernel(*args, control)`` on as many threads as numba gives this thread when ``parallel`` (a server's
    worker thread has its share of the cores: :func:`numba.set_num_threads` is per thread), else on this thread
    alone; it returns once every part is done.

    Kernels are compiled serial (``nogil``); each takes parts of its task index until none is left
    (:func:`take_part`, :func:`part_bounds`, :func:`part_done`, woven into the generated ones by
    :func:`noa_core.kernels.sources.parted`). numba's ``parallel=True`` compiled every kernel twice (the function
    and its parallel region): twice what a new installation waits for."""
    threads = numba.get_num_threads() if parallel else 1
    parts = threads * PARTS_PER_THREAD if threads > 1 else 1
    control = np.array([0, parts, 0], np.int64)
    if threads <= 1:
        kernel(*args, control)
        _check_done(kernel, control)
        return
    try:
        helpers = [_helpers().submit(kernel, *args, control) for _ in range(threads - 1)]
    except RuntimeError:  # the interpreter is exiting (no new threads): this thread takes every part
        helpers = []
    try:
        kernel(*args, control)
    finally:
        for helper in helpers:
            helper.cancel()  # one that has not started has nothing left to take
    if not _all_parts_done(control, SPINS):  # parts still in flight on helper threads: wait for those
        for helper in helpers:
            if not helper.cancelled():
                helper.result()  # raises what the kernel raised
        _check_done(kernel, control)


def _check_done(kernel: Callable, control: np.ndarray) -> None:
    """A kernel whose threads all returned must have done every part (never a partial output)."""
    if control[2] < control[1]:
        raise RuntimeError(f"{kernel} returned with {control[1] - control[2]} of its {control[1]} parts undone")


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


# Compiled once numba's cache folder is chosen (configure): the launching thread's wait.
@numba.njit(nogil=True, cache=CACHE_ENABLED)
def _all_parts_done(control, spins: int) -> bool:
    """Whether every part of a launch is done, looked at up to ``spins`` times (without the GIL): a part in
    flight on another thread often ends within microseconds, and waking this thread once its thread has
    finished costs tens of them (a sleep(0) took 58 us here)."""
    for _ in range(spins):  # noqa: SIM110 (a loop numba compiles: any() of a generator is not one)
        if _load_acquire(control, 2) >= control[1]:
            return True
    return False

"""Compile the kernels that file operations use into numba's on-disk cache.

``noa warmup`` (and the container build) call :func:`warmup` once, so that later processes load
machine code from the cache instead of compiling it (seconds per kernel).

numba compiles one version per argument type, and an input read from a file is a read-only
memory map while an array built in Python is writable: two types. So every registered operation
runs for real, through the local driver, with the option sets its declaration lists
(``Operation.warmup``), on small files of every element type; the in-memory variants run besides.
"""

from __future__ import annotations

import math
import tempfile
import threading
import time
from pathlib import Path

from noa_core.array import empty, full
from noa_core.runtime import SERIAL_THRESHOLD

# Element types that MRC and TIFF files hold.
FILE_DTYPES = ("int8", "uint8", "int16", "uint16", "float16", "float32", "int32", "float64", "complex64")
# Sizes that reach the serial twin and the parallel version of each kernel.
COUNTS = (64, SERIAL_THRESHOLD)


def warmup(stop: threading.Event | None = None) -> float:
    """Run every kernel variant a file operation can reach, serial and parallel, for FILE_DTYPES;
    return the seconds it took. With ``stop``, it returns early once that is set (a server shutting
    down must not leave a thread running kernels while the interpreter exits)."""
    stop = stop or threading.Event()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="noa-warmup-") as folder:
        for count in COUNTS:
            for name in FILE_DTYPES:
                _file_operations(Path(folder), name, count, stop)
    for count in COUNTS:
        for name in FILE_DTYPES:
            if not stop.is_set():
                _in_memory(name, count)
    return time.perf_counter() - start


def _suffix(dtype: str) -> str:
    from noa_core import io

    return ".mrc" if dtype in io.mrc.WRITABLE_DTYPES else ".tif"


def _file_operations(folder: Path, name: str, count: int, stop: threading.Event) -> None:
    from noa_core import io, operations
    from noa_core.run import local

    width = math.isqrt(count) + 1
    shape = (1, 2, width, width)
    sources: dict[str, Path] = {}

    def source(dtype: str) -> Path:
        if dtype not in sources:
            sources[dtype] = folder / f"{dtype}-{count}{_suffix(dtype)}"
            io.write(sources[dtype], full(shape, 1, dtype=dtype), overwrite=True)
        return sources[dtype]

    for operation in operations.operations():
        for dtype, values in operation.warmup(name, shape) if operation.warmup else ():
            if stop.is_set():
                return
            if operation.writes:
                out = folder / f"out{_suffix(values.get('dtype') or dtype)}"
                local.write(operation.task(values), source(dtype), out, overwrite=True)
            else:
                operation.describe(source(dtype), values)


def _in_memory(name: str, count: int) -> None:
    from noa_core.elementwise import convert_into, copy
    from noa_core import moments, reduction

    width = math.isqrt(count) + 1
    a = full((1, 2, width, width), 1, dtype=name)
    for view in (a, a.permute((0, 1, 3, 2)), a[:, :, ::2], a[:1, :1].broadcast((3, 1, width, width))):
        copy(view, "C")
        copy(view, "F")
    moments.block_moments(a)
    if name != "complex64":
        for reduce_ in (reduction.min, reduction.max, reduction.mean, reduction.std):
            reduce_(a)
            reduce_(a, (1, 2, 3))
    for mode in ("checked", "clamp"):
        convert_into(a, empty(a.shape, "float32"), mode=mode if name != "complex64" else "cast")
        if name != "complex64":
            convert_into(a.astype("float32"), empty(a.shape, name), mode=mode)

"""Compile the kernels that file operations use into numba's on-disk cache.

``noa warmup`` (and the container build) call :func:`warmup` once, so that later processes load
machine code from the cache instead of compiling it (seconds per kernel).

numba compiles one version per argument type, and an input read from a file is a read-only
memory map while an array built in Python is writable: two types. So the file operations are run
for real (through :class:`noa_core.ops.FileOp`, the path ``noa permute`` and the others take), on
small files of every element type, and the in-memory variants are run besides.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

from noa_core.array import empty, full
from noa_core.runtime import SERIAL_THRESHOLD

# Element types that MRC and TIFF files hold; conversions are compiled between each and float32.
FILE_DTYPES = ("int8", "uint8", "int16", "uint16", "float16", "float32", "int32", "float64", "complex64")
# Sizes that reach the serial twin and the parallel version of each kernel.
COUNTS = (64, SERIAL_THRESHOLD)


def warmup() -> None:
    """Run every kernel variant a file operation can reach, serial and parallel, for FILE_DTYPES."""
    with tempfile.TemporaryDirectory(prefix="noa-warmup-") as folder:
        for count in COUNTS:
            for name in FILE_DTYPES:
                _file_operations(Path(folder), name, count)
    for count in COUNTS:
        for name in FILE_DTYPES:
            _in_memory(name, count)


def _file_operations(folder: Path, name: str, count: int) -> None:
    from noa_core import io, reduction
    from noa_core.ops import FileOp

    width = math.isqrt(count) + 1
    suffix = ".mrc" if name in io.mrc.WRITABLE_DTYPES else ".tif"
    src = folder / f"{name}-{count}{suffix}"
    io.write(src, full((1, 2, width, width), 1, dtype=name), overwrite=True)
    out = folder / f"out{suffix}"
    FileOp("permute", {"axes": (0, 1, 3, 2)})(src, out, overwrite=True)
    FileOp("broadcast", {"shape": (2, 2, width, width)})(src, out, overwrite=True)
    FileOp("copy", {"order": "F"})(src, out, overwrite=True)
    if name == "complex64":
        FileOp("copy", {"dtype": "float32", "clamp": True})(src, folder / "out.mrc", overwrite=True)  # the real part
        return
    array, _ = io.read(src)  # what `noa stats` reduces: a read-only memory map
    for reduce_ in (reduction.min, reduction.max, reduction.mean, reduction.std):
        reduce_(array)
        reduce_(array, (1, 2, 3))
    wide = folder / f"wide-{count}.tif"
    for clamp in (False, True):
        FileOp("copy", {"dtype": "float32", "clamp": clamp})(src, wide, overwrite=True)
        FileOp("copy", {"dtype": name, "clamp": clamp})(wide, out, overwrite=True)


def _in_memory(name: str, count: int) -> None:
    from noa_core.elementwise import convert_into, copy
    from noa_core.reduction import max, mean, min, moments, std

    width = math.isqrt(count) + 1
    a = full((1, 2, width, width), 1, dtype=name)
    for view in (a, a.permute((0, 1, 3, 2)), a[:, :, ::2], a[:1, :1].broadcast((3, 1, width, width))):
        copy(view, "C")
        copy(view, "F")
    moments(a)
    if name != "complex64":
        for reduce_ in (min, max, mean, std):
            reduce_(a)
            reduce_(a, (1, 2, 3))
    for mode in ("checked", "clamp"):
        convert_into(a, empty(a.shape, "float32"), mode=mode if name != "complex64" else "cast")
        if name != "complex64":
            convert_into(a.astype("float32"), empty(a.shape, name), mode=mode)

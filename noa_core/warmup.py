"""Compile the kernels that file operations use into numba's on-disk cache.

``noa warmup`` (and the container build) call :func:`warmup` once, so that later processes load
machine code from the cache instead of compiling it (seconds per kernel).
"""

from __future__ import annotations

import numpy as np

from noa_core.array import empty, full
from noa_core.runtime import SERIAL_THRESHOLD

# Element types that MRC and TIFF files hold; conversions are compiled between each and float32.
FILE_DTYPES = ("int8", "uint8", "int16", "uint16", "float16", "float32", "int32", "float64", "complex64")


def warmup() -> None:
    """Run every kernel variant a file operation can reach, serial and parallel, for FILE_DTYPES."""
    from noa_core.elementwise import convert_into, copy
    from noa_core.reduction import max, mean, min, std

    for count in (64, SERIAL_THRESHOLD):  # the serial twin and the parallel kernel
        width = int(np.sqrt(count)) + 1
        for name in FILE_DTYPES:
            a = full((1, 2, width, width), 1, dtype=name)
            for view in (a, a.permute((0, 1, 3, 2)), a[:, :, ::2], a[:1, :1].broadcast((3, 1, width, width))):
                copy(view, "C")
                copy(view, "F")
            if name != "complex64":
                for reduce_ in (min, max, mean, std):
                    reduce_(a)
                    reduce_(a, (1, 2, 3))
            for mode in ("checked", "clamp"):
                convert_into(a, empty(a.shape, "float32"), mode=mode if name != "complex64" else "cast")
                if name != "complex64":
                    convert_into(a.astype("float32"), empty(a.shape, name), mode=mode)

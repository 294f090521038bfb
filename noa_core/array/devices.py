"""Devices: CUDA availability and transfers between host and GPU memory.

A CUDA Array's ``buffer`` is a numba device array of shape ``(n, *element_shape)``, like the NumPy
buffer of a CPU Array. Transfers move packed arrays (C or F, kept): a strided view is packed first
on its own device, so only the elements it holds cross the bus.
"""

from __future__ import annotations

import numpy as np

from noa_core.array import Array, as_device
from noa_core.errors import DeviceError


def cuda_available() -> bool:
    """True when numba-cuda finds a usable GPU (or runs its simulator, NUMBA_ENABLE_CUDASIM=1).

    Returns:
        Whether arrays can be put on device 'cuda'; False, not an error, when numba-cuda or its driver is missing.
    """
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:  # numba-cuda missing or its driver failing to load: no CUDA either way
        return False


def require_cuda() -> None:
    """Raise DeviceError unless CUDA can be used."""
    if not cuda_available():
        raise DeviceError(
            "device 'cuda' was requested but CUDA is not available (no GPU or driver found by numba-cuda); "
            "use device='cpu'"
        )


def device_buffer(count: int, dtype: np.dtype):
    """A new, uninitialised device buffer of ``count`` elements of ``dtype`` (shape ``(count, *element_shape)``),
    allocated on the GPU alone: no host array, no transfer."""
    require_cuda()
    from numba import cuda

    return cuda.device_array((count, *dtype.shape), dtype.base)


def _packed(array: Array) -> Array:
    """The array itself when its elements fill ``size`` consecutive buffer rows, else a 'K' copy."""
    return array if array.order in ("C", "F") else array.copy("K")


def transfer(array: Array, device: str) -> Array:
    """A copy of ``array`` on ``device`` ('cpu' or 'cuda'), packed in its C or F order."""
    target = as_device(device)
    if target == array.device:
        return array
    require_cuda()
    from numba import cuda

    packed = _packed(array)
    rows = slice(packed.offset, packed.offset + packed.size)
    if target == "cuda":
        buffer = cuda.to_device(np.ascontiguousarray(packed.buffer[rows]))
    else:
        buffer = packed.buffer[rows].copy_to_host()
    return Array(buffer, 0, packed.shape, packed.strides, packed.dtype, target)

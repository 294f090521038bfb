"""Devices: CUDA availability and transfers between host and GPU memory.

A CUDA Array's ``buffer`` is a numba device array of shape ``(n, *element_shape)``, like the NumPy
buffer of a CPU Array. Transfers move packed arrays (C or F, kept): a strided view is packed first
on its own device, so only the elements it holds cross the bus.

Where CuPy is installed, numba's device memory comes from CuPy's memory pool (:class:`CupyPoolMemory`), which
noa's Fourier operations use already: ``cudaMalloc`` of each new output took as long as copying it (1 GiB on an
H200: 0.7 ms against 0.7 ms), a block the pool holds takes microseconds. Memory freed stays in the pool for the
next array; ``cupy.get_default_memory_pool().free_all_blocks()`` gives it back to the device.
``NUMBA_CUDA_MEMORY_MANAGER`` set in the environment is left to decide instead.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import weakref
from typing import Any

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

        _use_cupy_pool()
        return bool(cuda.is_available())
    except Exception:  # numba-cuda missing or its driver failing to load: no CUDA either way
        return False


@functools.cache
def _use_cupy_pool() -> None:
    """Make numba allocate from CuPy's pool (:class:`CupyPoolMemory`), once, before numba's context exists (a context
    keeps the manager it was made with), where CuPy is installed and nobody chose numba's manager already."""
    import numba

    if (numba.config.ENABLE_CUDASIM or "NUMBA_CUDA_MEMORY_MANAGER" in os.environ
            or importlib.util.find_spec("cupy") is None or not _cupy_works()):
        return
    from numba import cuda

    try:
        cuda.set_memory_manager(_cupy_pool_manager())
    except RuntimeError:  # a numba-cuda whose plugin interface is no longer version 1: its own manager, then
        pass


def _cupy_works() -> bool:
    """Whether CuPy imports and finds the GPU: a CuPy built for another CUDA must not take numba's memory with it."""
    try:
        import cupy

        return bool(cupy.cuda.is_available())
    except Exception:  # noqa: BLE001 - any failure of CuPy's own leaves numba's manager in place
        return False


def _cupy_pool_manager() -> type:
    """:class:`CupyPoolMemory`'s class, built where numba-cuda's base classes can be imported (a GPU machine)."""
    from numba.cuda import GetIpcHandleMixin, HostOnlyCUDAMemoryManager, MemoryInfo, MemoryPointer

    class CupyPoolMemory(GetIpcHandleMixin, HostOnlyCUDAMemoryManager):
        """numba's device allocations taken from CuPy's default memory pool, as numba-cuda's External Memory
        Management plugin interface (version 1) describes: each block is held in :attr:`blocks` until numba
        finalizes its pointer, which hands it back to the pool. Host memory stays numba's own."""

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.blocks: dict[int, object] = {}
            self.pool: Any = None  # CuPy's MemoryPool, once initialized

        def initialize(self) -> None:
            super().initialize()
            import cupy

            self.pool = cupy.get_default_memory_pool()

        def memalloc(self, size: int):
            block = self.pool.malloc(size)
            address = int(block.ptr)
            blocks = self.blocks
            blocks[address] = block  # empty blocks share address 0: none holds memory

            def release() -> None:
                blocks.pop(address, None)

            return MemoryPointer(weakref.proxy(self.context), ctypes.c_void_p(address), size, finalizer=release)

        def get_memory_info(self):
            from numba.cuda.cudadrv.driver import driver

            free, total = driver.cuMemGetInfo()
            return MemoryInfo(free=free + self.pool.free_bytes(), total=total)

        def reset(self) -> None:
            super().reset()
            self.blocks.clear()
            if self.pool is not None:
                self.pool.free_all_blocks()

        @property
        def interface_version(self) -> int:
            return 1

    return CupyPoolMemory


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

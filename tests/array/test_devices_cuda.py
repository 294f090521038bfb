"""Device memory: numba's allocations from CuPy's pool (noa_core.array.devices).

The plugin's interface is checked everywhere numba-cuda is installed; the allocations themselves only on a GPU
with CuPy (``bash scripts/test-gpu``)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numba
import pytest

import noa_core as nc
from noa_core.array import devices

cuda = pytest.importorskip("numba.cuda", reason="numba-cuda is not installed")


@pytest.mark.skipif(bool(numba.config.ENABLE_CUDASIM), reason="the simulator has no memory managers")
def test_the_pool_plugin_is_one_numba_accepts():
    manager = devices._cupy_pool_manager()
    assert manager(context=None).interface_version == 1
    assert issubclass(manager, cuda.HostOnlyCUDAMemoryManager)


# In a process of its own: numba's context keeps the memory manager it was made with, and another test of the same
# worker may have made it first (numba's own calls, without noa's).
POOL_CHECK = """
import cupy, numpy as np
from numba import cuda
import noa_core as nc

pool = cupy.get_default_memory_pool()
first = nc.empty((1, 1, 4096, 4096), "float32", device="cuda")
assert type(cuda.current_context().memory_manager).__name__ == "CupyPoolMemory"
address = first.buffer.__cuda_array_interface__["data"][0]
used = pool.used_bytes()
assert used >= 64 << 20, used
del first
assert pool.used_bytes() == used - (64 << 20), pool.used_bytes()  # handed back at once, kept by the pool
second = nc.empty((1, 1, 4096, 4096), "float32", device="cuda")
assert second.buffer.__cuda_array_interface__["data"][0] == address  # the same block again, no cudaMalloc
values = np.random.default_rng(3).random((2, 3, 40, 50), dtype=np.float32)
moved = nc.asarray(values).to("cuda").permute_copy((0, 1, 3, 2)).to("cpu").numpy()
np.testing.assert_array_equal(moved, values.transpose(0, 1, 3, 2))
print("pooled")
"""


@pytest.mark.gpu
@pytest.mark.skipif(
    bool(numba.config.ENABLE_CUDASIM) or importlib.util.find_spec("cupy") is None or not nc.cuda_available(),
    reason="needs a CUDA GPU and CuPy: pip install -e '.[cuda,cupy]'")
def test_device_arrays_come_from_cupys_pool_and_go_back_to_it():
    environment = {k: v for k, v in os.environ.items() if k != "NUMBA_CUDA_MEMORY_MANAGER"}
    done = subprocess.run([sys.executable, "-c", POOL_CHECK], capture_output=True, text=True, env=environment,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == "pooled"

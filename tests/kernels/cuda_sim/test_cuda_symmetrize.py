"""noa symmetrize on CUDA computes what the CPU computes (RELION's symmetriseMap, faces included), on tiny maps
under numba's CUDA simulator (run by tests/kernels/test_cuda_sim.py with NUMBA_ENABLE_CUDASIM=1). The CPU kernel's
own oracle is RELION's arithmetic written out in NumPy (tests/kernels/test_symmetrize.py); here the CUDA
result must be the CPU's, bit for bit. Before, CUDA sampled with the transform kernel, which interpolates
towards 0 beyond the last voxel where RELION and the CPU kernel leave the neighbour out."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from numba import cuda

import noa_core as nc
from noa_core.geometry import symmetry

NO_CUDA = ("run under numba-cuda's simulator by tests/kernels/test_cuda_sim.py (in its own process); here: no GPU"
           if importlib.util.find_spec("numba_cuda") else "needs numba-cuda (pip install -e '.[cuda]') or a GPU")
pytestmark = pytest.mark.skipif(not cuda.is_available(), reason=NO_CUDA)


@pytest.mark.parametrize(("group", "shape", "dtype"), [
    ("C2", (2, 4, 5, 6), np.float32),   # rows copied from their 2-fold mates (unreversed and reversed, even W)
    ("D3", (1, 5, 5, 5), np.float64),   # odd box, a float64 map and output
    ("I1", (1, 4, 4, 4), np.float32),   # samples past the faces on every axis
    ("Ci", (1, 3, 4, 5), np.int16),     # converted to float32 first; the inversion's rows reversed
])
def test_symmetrize_on_cuda_is_the_cpu_result(group, shape, dtype):
    values = (np.random.default_rng(len(group)).normal(size=shape) * 100).astype(dtype)
    out_type = np.float64 if dtype == np.float64 else np.float32
    group = symmetry.point_group(group)
    on_cpu = symmetry.symmetrize(values, group, nc.zeros(shape, out_type)).numpy()
    on_gpu = symmetry.symmetrize(nc.asarray(values).to("cuda"), group, nc.zeros(shape, out_type, device="cuda"))
    assert on_gpu.device == "cuda"
    if out_type == np.float32:  # float64 sums rounded to float32: the same bits (on an H200 too)
        np.testing.assert_array_equal(on_gpu.to("cpu").numpy(), on_cpu)
    else:  # a GPU's compiler fuses multiply-adds (the simulator, NumPy's arithmetic, does not): the last bits differ
        np.testing.assert_allclose(on_gpu.to("cpu").numpy(), on_cpu, rtol=1e-14, atol=0)


def test_noa_symmetrize_with_device_cuda_writes_what_the_cpu_writes(tmp_path):
    import mrcfile

    from noa_core import operations
    from noa_core.run import local

    data = np.random.default_rng(4).normal(size=(5, 6, 6)).astype(np.float32)
    mrcfile.new(tmp_path / "map.mrc", data).close()
    for device in ("cpu", "cuda"):
        local.write(operations.get("symmetrize").task(sym="C7", device=device), tmp_path / "map.mrc",
                    tmp_path / f"{device}.mrc")
    with mrcfile.open(tmp_path / "cpu.mrc") as cpu, mrcfile.open(tmp_path / "cuda.mrc") as gpu:
        np.testing.assert_array_equal(gpu.data, cpu.data)
        assert np.abs(cpu.data[:, :, 0]).max() > 0  # the faces are there to compare

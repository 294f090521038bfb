"""The CUDA transform kernels and the FFT's CuPy requirement, on tiny shapes under numba's CUDA simulator
(run by tests/kernels/test_cuda_sim.py with NUMBA_ENABLE_CUDASIM=1)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from numba import cuda

import noa_core as nc
from noa_core.errors import DeviceError
from noa_core.fourier import fft
from noa_core.geometry import transforms

# Where this process has no GPU: test_cuda_sim.py runs these tests under the simulator, in a process of their own.
NO_CUDA = ("run under numba-cuda's simulator by tests/kernels/test_cuda_sim.py (in its own process); here: no GPU"
           if importlib.util.find_spec("numba_cuda") else "needs numba-cuda (pip install -e '.[cuda]') or a GPU")
pytestmark = pytest.mark.skipif(not cuda.is_available(), reason=NO_CUDA)


@pytest.mark.parametrize("interp", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("border", ["zero", "clamp", "mirror"])
def test_transform_2d_on_cuda_equals_the_cpu(interp, border):
    rng = np.random.default_rng(len(interp) * 7 + len(border))
    values = rng.normal(size=(2, 1, 5, 6)).astype(np.float32)
    matrices = np.stack([transforms.affine_2d((5, 6), rotate=a, shift=(0.5, -1), scale=1.1) for a in (25.0, -140.0)])
    on_cpu = transforms.transform_2d(values, nc.zeros((2, 1, 4, 7)), matrices, interp, border)
    on_gpu = transforms.transform_2d(nc.asarray(values).to("cuda"), nc.zeros((2, 1, 4, 7), device="cuda"), matrices,
                                   interp, border)
    np.testing.assert_allclose(on_gpu.to("cpu").numpy(), on_cpu.numpy(), atol=1e-5)


@pytest.mark.parametrize("interp", ["linear", "cubic"])
def test_transform_3d_on_cuda_equals_the_cpu(interp):
    values = np.random.default_rng(3).normal(size=(1, 3, 4, 5)).astype(np.float32)
    matrix = transforms.affine_3d(values.shape, euler=(20.0, 40.0, 60.0), shift=(0.2, 0.3, -0.4))
    on_cpu = transforms.transform_3d(values, nc.zeros((1, 3, 4, 5)), matrix, interp, "mirror")
    view = nc.asarray(values).to("cuda")
    on_gpu = transforms.transform_3d(view, nc.zeros((1, 3, 4, 5), device="cuda"), matrix, interp, "mirror")
    np.testing.assert_allclose(on_gpu.to("cpu").numpy(), on_cpu.numpy(), atol=1e-5)


def test_integer_input_on_cuda_is_converted_first():
    values = np.arange(20, dtype=np.int16).reshape(1, 1, 4, 5)
    matrix = transforms.affine_2d((4, 5), rotate=90)
    on_cpu = transforms.transform_2d(values, nc.zeros((1, 1, 4, 5)), matrix)
    on_gpu = transforms.transform_2d(nc.asarray(values).to("cuda"), nc.zeros((1, 1, 4, 5), device="cuda"), matrix)
    np.testing.assert_allclose(on_gpu.to("cpu").numpy(), on_cpu.numpy(), atol=1e-6)


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed: cuFFT runs")
def test_ffts_on_cuda_without_cupy_name_what_to_install():
    x = nc.zeros((1, 1, 4, 4), device="cuda")
    with pytest.raises(DeviceError, match=r"CuPy.*pip install"):
        fft.rfft(x)


def test_noa_transform_with_device_cuda_writes_what_the_cpu_writes(tmp_path):
    import mrcfile

    from noa_core import operations
    from noa_core.run import local

    data = np.random.default_rng(5).normal(size=(2, 6, 7)).astype(np.float32)
    with mrcfile.new(tmp_path / "in.mrcs", data) as f:
        f.set_image_stack()
    for device in ("cpu", "cuda"):
        task = operations.get("transform").task(rotate=30.0, shift=(0.5, -1.0), interp="cubic", device=device)
        local.write(task, tmp_path / "in.mrcs", tmp_path / f"{device}.mrcs")
    with mrcfile.open(tmp_path / "cpu.mrcs") as cpu, mrcfile.open(tmp_path / "cuda.mrcs") as gpu:
        np.testing.assert_allclose(gpu.data, cpu.data, atol=1e-5)


def test_noa_transform_like_relion_with_device_cuda_writes_what_the_cpu_writes(tmp_path):
    """--like relion computes on the host (RELION's projector transcribed in NumPy) and writes the device's tile."""
    import mrcfile

    from noa_core import operations
    from noa_core.run import local

    data = np.random.default_rng(6).normal(size=(7, 7, 7)).astype(np.float32)
    mrcfile.new(tmp_path / "map.mrc", data).close()
    for device in ("cpu", "cuda"):
        task = operations.get("transform").task(euler=(20.0, 50.0, -70.0), shift=(1.0, 0.0, -2.0), like="relion",
                                                device=device)
        local.write(task, tmp_path / "map.mrc", tmp_path / f"{device}.mrc")
    with mrcfile.open(tmp_path / "cpu.mrc") as cpu, mrcfile.open(tmp_path / "cuda.mrc") as gpu:
        np.testing.assert_array_equal(gpu.data, cpu.data)
        expected = transforms.relion_rotated(data, (20.0, 50.0, -70.0), (1.0, 0.0, -2.0))
        np.testing.assert_allclose(cpu.data, expected, atol=1e-6 * np.abs(expected).max())

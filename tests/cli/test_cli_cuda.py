"""`--device cuda` from file to file on a real GPU: the same output as the CPU's (bit for bit where the
arithmetic is the same, within float32 rounding where interpolation sums in another order)."""

from __future__ import annotations

import json

import mrcfile
import numba
import numpy as np
import pytest

from helpers import noa
from noa_core.array.devices import cuda_available

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(bool(numba.config.ENABLE_CUDASIM) or not cuda_available(),
                                                  reason="needs a CUDA GPU: pip install -e '.[cuda]'")]

COMMANDS = {  # name -> the command line after `noa`, IN and OUT filled in; exact: bit for bit
    "copy": (["copy", "{IN}", "{OUT}"], True),
    "permute": (["permute", "{IN}", "{OUT}", "--axes", "0,3,1,2"], True),
    "ewise": (["ewise", "a * 2 - 1", "{IN}", "-o", "{OUT}"], True),
    "symmetrize": (["symmetrize", "{IN}", "{OUT}", "--sym", "D3"], False),
    "transform": (["transform", "{IN}", "{OUT}", "--euler", "30,60,90", "--shift", "1.5,-2,0.25"], False),
}


@pytest.fixture(scope="module")
def volume(tmp_path_factory) -> tuple:
    path = tmp_path_factory.mktemp("cuda") / "in.mrc"
    values = np.random.default_rng(3).standard_normal((40, 44, 48)).astype(np.float32)
    with mrcfile.new(path) as mrc:
        mrc.set_data(values)
        mrc.voxel_size = 1.25
    return path, values


@pytest.mark.parametrize("name", COMMANDS)
def test_a_command_on_the_gpu_writes_what_the_cpu_writes(name, volume, tmp_path):
    src, _ = volume
    line, exact = COMMANDS[name]
    outputs = {}
    for device in ("cpu", "cuda"):
        out = tmp_path / f"{device}.mrc"
        result = noa(*[a.format(IN=src, OUT=out) for a in line], "--device", device)
        assert result.returncode == 0, result.stderr
        with mrcfile.open(out, permissive=False) as mrc:
            outputs[device] = (mrc.data.copy(), float(mrc.voxel_size.x))
    (cpu, cpu_pixel), (gpu, gpu_pixel) = outputs["cpu"], outputs["cuda"]
    assert gpu.shape == cpu.shape and gpu.dtype == cpu.dtype and gpu_pixel == cpu_pixel
    if exact:
        np.testing.assert_array_equal(gpu, cpu)
    else:
        np.testing.assert_allclose(gpu, cpu, rtol=0, atol=1e-5 * float(np.abs(cpu).max()))


def test_statistics_on_the_gpu(volume):
    src, values = volume
    stats = {device: json.loads(noa("stats", src, "--json", "--device", device).stdout) for device in ("cpu", "cuda")}
    for key in ("min", "max"):
        assert stats["cuda"][key] == stats["cpu"][key] == float(getattr(values, key)())
    for key, expected in (("mean", values.astype(np.float64).mean()), ("std", values.astype(np.float64).std())):
        assert stats["cuda"][key] == pytest.approx(expected, rel=1e-6)

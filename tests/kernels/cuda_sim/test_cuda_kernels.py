"""CUDA kernels on tiny shapes; run by tests/kernels/test_cuda_sim.py with NUMBA_ENABLE_CUDASIM=1.

Tests marked ``gpu`` need real hardware and are skipped under the simulator and without a GPU.
"""

from __future__ import annotations

import importlib.util

import numba
import numpy as np
import pytest
from numba import cuda

import noa_core as nc
from noa_core.errors import DeviceError, OverlapError, StrideError

SIMULATOR = bool(numba.config.ENABLE_CUDASIM)
# Where this process has no GPU: test_cuda_sim.py runs these tests under the simulator, in a process of their own.
NO_CUDA = ("run under numba-cuda's simulator by tests/kernels/test_cuda_sim.py (in its own process); here: no GPU"
           if importlib.util.find_spec("numba_cuda") else "needs numba-cuda (pip install -e '.[cuda]') or a GPU")
pytestmark = pytest.mark.skipif(not cuda.is_available(), reason=NO_CUDA)
gpu = pytest.mark.skipif(SIMULATOR or not cuda.is_available(), reason="needs a real CUDA GPU")


def host(a: nc.Array) -> np.ndarray:
    return a.to("cpu").numpy()


@pytest.fixture
def x() -> np.ndarray:
    return np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5) - 50


def test_transfer_round_trip_and_factories(x):
    a = nc.asarray(x).to("cuda")
    assert a.device == "cuda" and a.shape == x.shape
    np.testing.assert_array_equal(host(a), x)
    np.testing.assert_array_equal(host(nc.asarray(x)[:, 1:, ::2].to("cuda")), x[:, 1:, ::2])
    np.testing.assert_array_equal(host(nc.zeros((1, 2, 3, 4), device="cuda")), np.zeros((1, 2, 3, 4), np.float32))
    np.testing.assert_array_equal(host(nc.full((2, 3), 7, "int16", device="cuda")), np.full((1, 1, 2, 3), 7, np.int16))
    np.testing.assert_array_equal(host(nc.arange((2, 3), device="cuda")),
                                  np.arange(6, dtype=np.float32).reshape(1, 1, 2, 3))
    assert nc.ones((2, 2), order="F", device="cuda").order == "F"


def test_copy_permute_astype_fill(x):
    a = nc.asarray(x).to("cuda")
    f = a.copy("F")
    assert f.order == "F"
    np.testing.assert_array_equal(host(f), x)
    np.testing.assert_array_equal(host(a.permute_copy((0, 1, 3, 2))), x.transpose(0, 1, 3, 2))
    np.testing.assert_array_equal(host(a[:, ::2].permute_copy((3, 2, 1, 0))), x[:, ::2].transpose(3, 2, 1, 0))
    np.testing.assert_array_equal(host(a.astype("int16")), x.astype(np.int16))
    np.testing.assert_array_equal(host(a.astype("float16")), x.astype(np.float16))
    np.testing.assert_array_equal(host((a * 1e6).astype("int8", clamp=True)),
                                  np.clip(x * 1e6, -128, 127).astype(np.int8))
    a.fill(3)
    np.testing.assert_array_equal(host(a), np.full(x.shape, 3, np.float32))


@pytest.mark.parametrize("shape,perm,dtype", [
    ((1, 2, 40, 35), (0, 1, 3, 2), "float32"),  # partial tiles along both edges, two planes
    ((2, 9, 1, 33), (3, 1, 2, 0), "complex64"),  # the input's contiguous dimension moves outermost
    ((1, 1, 8, 64), (0, 1, 3, 2), "int8"),
])
def test_tiled_transpose(shape, perm, dtype):
    values = np.arange(np.prod(shape)).reshape(shape) % 97
    x = values.astype(dtype) * (1 + 1j if dtype == "complex64" else 1)
    a = nc.asarray(x).to("cuda")
    np.testing.assert_array_equal(host(a.permute_copy(perm)), np.transpose(x, perm))
    from noa_core.kernels import cuda as cuda_kernels

    assert any(key[0] == "transpose" for key in cuda_kernels._KERNELS)  # the tiled path ran
    np.testing.assert_array_equal(host(a.permute(perm).astype("float64" if dtype != "complex64" else "complex128")),
                                  np.transpose(x, perm).astype(np.complex128 if dtype == "complex64" else np.float64))


def test_vector_elements(x):
    v = nc.empty((1, 2, 3, 4), nc.vector("float32", 3), device="cuda")
    v.fill([1, 2, 3])
    np.testing.assert_array_equal(host(v.permute_copy((0, 1, 3, 2))),
                                  np.broadcast_to(np.float32([1, 2, 3]), (1, 2, 4, 3, 3)))


def test_arithmetic_and_user_ewise(x):
    a, b = nc.asarray(x).to("cuda"), nc.asarray(x[:1, :1]).to("cuda")
    np.testing.assert_array_equal(host(a * b + 1), x * x[:1, :1] + 1)
    np.testing.assert_allclose(host(2 / (a - 0.5)), 2 / (x - 0.5), rtol=1e-6)
    np.testing.assert_array_equal(host(-a), -x)
    s, d = nc.empty(x.shape, device="cuda"), nc.empty(x.shape, "float64", device="cuda")
    nc.ewise([a, b, 2.0], [s, d], lambda u, v, k: (u + v, u * k))
    np.testing.assert_array_equal(host(s), x + x[:1, :1])
    np.testing.assert_array_equal(host(d), x * 2.0)


def test_reductions(x):
    a = nc.asarray(x).to("cuda")
    for axes in [None, (0,), (2, 3), (1, 3)]:
        ax = (0, 1, 2, 3) if axes is None else axes
        np.testing.assert_allclose(host(nc.sum(a, axes)), x.sum(axis=ax, keepdims=True), rtol=1e-6)
        np.testing.assert_allclose(host(nc.mean(a, axes)), x.mean(axis=ax, keepdims=True), rtol=1e-6)
        np.testing.assert_array_equal(host(nc.min(a, axes)), x.min(axis=ax, keepdims=True))
        np.testing.assert_array_equal(host(nc.max(a, axes)), x.max(axis=ax, keepdims=True))
        np.testing.assert_allclose(host(nc.std(a, axes, ddof=1)), x.std(axis=ax, keepdims=True, ddof=1), rtol=1e-5)
    total = nc.reduce_ewise(a, 0.0, lambda p, q: p + q, preprocess=lambda v: v * v)
    np.testing.assert_allclose(host(total).ravel()[0], (x.astype(np.float64) ** 2).sum())


@pytest.mark.parametrize("shape", [(1, 1, 1, 1003), (2, 1, 3, 1001)], ids=["one run", "a run per output"])
def test_long_runs_reduce_over_every_thread(shape):
    # runs longer than the threads per output (the simulator's 64): each thread adds several, the last fewer
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    a = nc.asarray(x).to("cuda")
    axes = None if shape[0] == 1 else (3,)
    ax = (0, 1, 2, 3) if axes is None else axes
    np.testing.assert_allclose(host(nc.sum(a, axes)), x.astype(np.float64).sum(axis=ax, keepdims=True), rtol=1e-6)
    np.testing.assert_array_equal(host(nc.max(a, axes)), x.max(axis=ax, keepdims=True))
    np.testing.assert_array_equal(host(nc.min(a, axes)), x.min(axis=ax, keepdims=True))
    np.testing.assert_allclose(host(nc.std(a, axes)), x.astype(np.float64).std(axis=ax, keepdims=True), rtol=1e-5)


def test_iwise():
    out = nc.zeros((1, 2, 3, 4), "int32", device="cuda")

    def index(b, d, h, w, o, k):
        o[b, d, h, w] = d * 100 + h * 10 + w + k

    nc.iwise(out.shape, index, out, 1)
    expected = np.fromfunction(lambda b, d, h, w: d * 100 + h * 10 + w + 1, (1, 2, 3, 4)).astype(np.int32)
    np.testing.assert_array_equal(host(out), expected)


def test_errors(x):
    a = nc.asarray(x).to("cuda")
    with pytest.raises(DeviceError, match="cuda and cpu"):
        a + nc.asarray(x)
    with pytest.raises(StrideError, match="broadcast"):
        nc.ewise([1.0], nc.zeros((1, 1, 1, 4), device="cuda").broadcast((1, 1, 3, 4)), "identity")
    with pytest.raises(OverlapError):
        nc.ewise([a[:, :, :3]], a[:, :, 1:], "identity")


@gpu
@pytest.mark.gpu
def test_large_copy_and_sum_on_gpu():
    x = np.random.default_rng(0).random((4, 8, 256, 512), dtype=np.float32)
    a = nc.asarray(x).to("cuda")
    np.testing.assert_array_equal(host(a.permute_copy((0, 1, 3, 2))), x.transpose(0, 1, 3, 2))
    np.testing.assert_allclose(host(nc.sum(a)).ravel()[0], x.astype(np.float64).sum(), rtol=1e-6)

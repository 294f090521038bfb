"""Kernels launched from many Python threads at once (as a web server does) stay correct."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

import noa_core as nc
from noa_core.kernels.runtime import SERIAL_THRESHOLD


def work(seed: int) -> None:
    rng = np.random.default_rng(seed)
    # Sizes on both sides of the serial threshold, so parallel and serial kernels interleave.
    shape = (2, 1, -(-SERIAL_THRESHOLD // 400), 200) if seed % 2 else (1, 1, 30, 40)
    x = rng.random(shape, dtype=np.float32)
    y = rng.random((1, 1) + shape[2:], dtype=np.float32)
    a, b = nc.asarray(x), nc.asarray(y)
    np.testing.assert_array_equal((a * b).numpy(), x * y)
    np.testing.assert_array_equal(a.copy("F").numpy(), x)
    np.testing.assert_array_equal(a.permute_copy((0, 1, 3, 2)).numpy(), x.transpose(0, 1, 3, 2))
    np.testing.assert_allclose(nc.sum(a).numpy().ravel()[0], x.astype(np.float64).sum(), rtol=1e-6)
    np.testing.assert_allclose(nc.mean(a, (2, 3)).numpy(), x.mean(axis=(2, 3), keepdims=True), rtol=1e-5)
    out = nc.empty(shape, "float64")
    nc.ewise([a, b], out, "add")
    np.testing.assert_allclose(out.numpy(), x.astype(np.float64) + y, rtol=1e-6)


def test_concurrent_kernels_from_a_thread_pool():
    work(0)  # compile once up front; the pool then exercises the launches themselves
    work(1)
    with ThreadPoolExecutor(max_workers=8) as pool:
        for future in [pool.submit(work, seed) for seed in range(200)]:
            future.result()
    # tbb where its wheel is installed (a dependency on Linux x86-64), OpenMP otherwise.
    from noa_core.kernels.runtime import load_tbb

    assert numba.threading_layer() == ("tbb" if load_tbb() else "omp")


def test_users_threading_layer_is_respected():
    script = ("import numpy as np, numba, noa_core as nc; nc.asarray(np.ones((1, 1, 1024, 1024))).copy('F');"
              "print(numba.threading_layer())")
    env = dict(os.environ, NUMBA_THREADING_LAYER="omp")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "omp"

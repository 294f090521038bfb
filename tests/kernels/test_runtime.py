"""Kernels launched from many Python threads at once (as a web server does) stay correct; a launch's parts."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import noa_core as nc
from noa_core.kernels import runtime
from noa_core.kernels.runtime import SERIAL_THRESHOLD, compile_parted, parts_of


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


@given(total=st.integers(0, 10_000), parts=st.integers(1, 64))
def test_parts_cover_every_task_once_in_order(total, parts):
    bounds = [runtime.part_bounds(total, part, parts) for part in range(parts)]
    assert bounds[0][0] == 0 and bounds[-1][1] == total
    assert all(first <= last for first, last in bounds)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
    assert max(last - first for first, last in bounds) - min(last - first for first, last in bounds) <= 1


def count_tasks(out, control):
    for task in parts_of(out.shape[0]):
        out[task] += 1


COUNT_TASKS = compile_parted(count_tasks, {})


@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("tasks", [0, 1, 7, 1000])
def test_a_launch_runs_every_task_once(parallel, tasks):
    out = np.zeros(tasks, np.int64)
    runtime.launch(COUNT_TASKS, parallel, out)
    assert (out == 1).all()


def test_a_launch_never_waits_for_a_helper_that_has_not_started():
    """Every helper thread busy elsewhere (a server's other launches, a thread the machine does not schedule):
    the launching thread takes every part itself and returns, its queued helpers cancelled."""
    if numba.get_num_threads() < 2:
        pytest.skip("one thread: launches are serial")
    release = threading.Event()
    pool = runtime._helpers()
    blockers = [pool.submit(release.wait, 30) for _ in range(pool._max_workers)]
    try:
        out = np.zeros(10_000, np.int64)
        launched = threading.Thread(target=runtime.launch, args=(COUNT_TASKS, True, out))
        launched.start()
        launched.join(10)
        assert not launched.is_alive()
        assert (out == 1).all()
    finally:
        release.set()
        for blocker in blockers:
            blocker.result()


def test_an_error_in_a_helper_thread_reaches_the_caller():
    if numba.get_num_threads() < 2:
        pytest.skip("one thread: launches are serial")
    launching = threading.current_thread()
    helping = threading.Event()

    def kernel(control):  # a helper takes the first part and fails in it; the launching thread takes the rest
        if threading.current_thread() is not launching:
            runtime.take_part(control)
            helping.set()
            raise ValueError("a helper's part")
        assert helping.wait(10)
        while runtime.take_part(control) < control[1]:
            runtime.part_done(control)

    with pytest.raises(ValueError, match="helper"):
        runtime.launch(kernel, True)


@pytest.mark.parametrize("parallel", [True, False])
def test_a_kernel_that_leaves_parts_undone_is_an_error(parallel):
    with pytest.raises(RuntimeError, match="undone"):
        runtime.launch(lambda control: None, parallel)

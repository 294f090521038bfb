"""Benchmark noa's CUDA kernels against the device-to-device copy (and CuPy when installed).

Float32, on the GPU, medians of several runs timed with CUDA events. Every row prints noa's
bandwidth (bytes read plus written) as a fraction of a plain device-to-device copy of the same
number of bytes, measured in the same run. Goal: copy and permute_copy >= 0.7x. Usage:

    python benchmarks/bench_cuda.py [--repeat N]

Without a GPU it says so and exits with status 0 (nothing to measure).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    import noa_core as nc

    if not nc.cuda_available():
        print("no CUDA GPU found: nothing to measure")
        return
    from numba import cuda

    try:
        import cupy
    except ImportError:
        cupy = None

    def median_ms(func: Callable[[], object]) -> float:
        func()  # compile, allocate
        times = []
        for _ in range(args.repeat):
            start, stop = cuda.event(), cuda.event()
            start.record()
            func()
            stop.record()
            stop.synchronize()
            times.append(cuda.event_elapsed_time(start, stop))
        return statistics.median(times)

    rng = np.random.default_rng(0)
    print(f"{'operation':<30}{'shape':<22}{'noa ms':>9}{'d2d ms':>9}{'vs d2d':>9}{'cupy ms':>10}")
    cases = [("copy C->C", (16, 1, 4096, 4096), None), ("copy F->F", (16, 1, 4096, 4096), "F"),
             ("permute_copy (0,1,3,2)", (1, 1, 16384, 16384), (0, 1, 3, 2)),
             ("permute_copy (0,1,3,2)", (256, 1, 1024, 1024), (0, 1, 3, 2)),
             ("permute_copy (0,3,2,1)", (1, 512, 512, 512), (0, 3, 2, 1))]
    for name, shape, how in cases:
        host = rng.random(shape, dtype=np.float32)
        a = nc.asarray(host).to("cuda")
        if how == "F":
            a = a.copy("F")
            noa_f = lambda: a.copy("F")  # noqa: E731
        elif how is None:
            noa_f = lambda: a.copy("C")  # noqa: E731
        else:
            noa_f = lambda: a.permute_copy(how)  # noqa: E731
        src = cuda.to_device(host.reshape(-1))
        dst = cuda.device_array_like(src)
        t_noa, t_d2d = median_ms(noa_f), median_ms(lambda: dst.copy_to_device(src))
        t_cupy = float("nan")
        if cupy is not None:
            c = cupy.asarray(host)
            cupy_f = (lambda: c.copy()) if how in (None, "F") else (lambda: cupy.ascontiguousarray(c.transpose(how)))
            t_cupy = median_ms(cupy_f)
        print(f"{name:<30}{shape!s:<22}{t_noa:>9.2f}{t_d2d:>9.2f}{t_d2d / t_noa:>8.2f}x{t_cupy:>10.2f}")
        a = src = dst = None  # freed for the next case (rebound, not deleted: the timed closures name them)


if __name__ == "__main__":
    main()

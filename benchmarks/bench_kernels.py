"""Benchmark noa's CPU kernels against NumPy, side by side, on float32.

Every row times the noa operation, its NumPy counterpart and ``np.copyto`` between two arrays of
the operation's output size (the bandwidth reference), interleaved in the same run; the median of
several runs is printed. GB/s counts bytes read plus bytes written. Usage:

    python benchmarks/bench_kernels.py [--quick] [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

import noa_core as nc


def median_times(funcs: list[Callable[[], object]], repeat: int) -> list[float]:
    """Median wall time of each function, calling them in turn so that they see the same machine."""
    for f in funcs:  # warm-up: compilation, page faults of fresh outputs
        f()
    samples: list[list[float]] = [[] for _ in funcs]
    for _ in range(repeat):
        for f, s in zip(funcs, samples):
            t = time.perf_counter()
            f()
            s.append(time.perf_counter() - t)
    return [statistics.median(s) for s in samples]


def row(name: str, shape, noa_f, numpy_f, bytes_moved: int, out_bytes: int, repeat: int) -> dict:
    ref_src = np.ones(out_bytes // 4, np.float32)
    ref_dst = np.empty_like(ref_src)
    t_noa, t_np, t_copy = median_times([noa_f, numpy_f, lambda: np.copyto(ref_dst, ref_src)], repeat)
    return {"name": name, "shape": shape, "noa": t_noa, "np": t_np, "noa_gbs": bytes_moved / t_noa / 1e9,
            "copy_gbs": 2 * out_bytes / t_copy / 1e9}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller shapes (seconds, not minutes)")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    q = args.quick
    rng = np.random.default_rng(0)
    rows = []

    def rand(shape):
        return rng.random(shape, dtype=np.float32)

    # Copies: C -> C and F -> F move the same bytes and must take the same time.
    copy_shape = (4, 1, 512, 512) if q else (16, 1, 1024, 1024)
    x = rand(copy_shape)
    c = nc.asarray(x)
    f = c.copy("F")
    xf = f.numpy()  # NumPy view of the F array (height and width swapped in memory)
    nbytes = x.nbytes
    rows.append(row("copy C->C", copy_shape, lambda: c.copy("C"), lambda: x.copy(order="C"),
                    2 * nbytes, nbytes, args.repeat))
    rows.append(row("copy F->F", copy_shape, lambda: f.copy("F"), lambda: np.array(xf, order="K"),
                    2 * nbytes, nbytes, args.repeat))

    # Transposes of height and width (the NumPy counterpart: ascontiguousarray of the view).
    shapes = [(1, 1, 1024, 1024), (1, 1, 2048, 1024), (16, 1, 256, 256), (1, 64, 128, 128)] if q else \
             [(1, 1, 4096, 4096), (1, 1, 16384, 8192), (64, 1, 512, 512), (1, 256, 256, 256)]
    for shape in shapes:
        x = rand(shape)
        a = nc.asarray(x)
        rows.append(row("permute_copy (0,1,3,2)", shape, lambda: a.permute_copy((0, 1, 3, 2)),
                        lambda: np.ascontiguousarray(x.transpose(0, 1, 3, 2)), 2 * x.nbytes, x.nbytes, args.repeat))
        del x, a

    # Broadcast multiply: a stack of images times one image.
    stack_shape, image_shape = ((16, 1, 512, 512), (1, 1, 512, 512)) if q else ((64, 1, 1024, 1024), (1, 1, 1024, 1024))
    s, i = rand(stack_shape), rand(image_shape)
    sa, ia = nc.asarray(s), nc.asarray(i)
    rows.append(row("ewise multiply (broadcast)", f"{stack_shape}*{image_shape[2:]}", lambda: sa * ia,
                    lambda: s * i, 2 * s.nbytes + i.nbytes, s.nbytes, args.repeat))
    del s, sa

    # Reductions over 256 MB (64 MB quick).
    red_shape = (16, 1, 1024, 1024) if q else (64, 1, 1024, 1024)
    r = rand(red_shape)
    ra = nc.asarray(r)
    rows.append(row("sum", red_shape, lambda: nc.sum(ra), lambda: r.sum(), r.nbytes, r.nbytes, args.repeat))
    rows.append(row("mean", red_shape, lambda: nc.mean(ra), lambda: r.mean(), r.nbytes, r.nbytes, args.repeat))

    header = f"{'operation':<28}{'shape':<30}{'noa ms':>9}{'numpy ms':>10}{'vs numpy':>10}{'noa GB/s':>10}" \
             f"{'copyto GB/s':>13}{'vs copyto':>11}"
    print(header)
    print("-" * len(header))
    for rw in rows:
        print(f"{rw['name']:<28}{str(rw['shape']):<30}{rw['noa'] * 1e3:>9.2f}{rw['np'] * 1e3:>10.2f}"
              f"{rw['np'] / rw['noa']:>9.2f}x{rw['noa_gbs']:>10.1f}{rw['copy_gbs']:>13.1f}"
              f"{rw['noa_gbs'] / rw['copy_gbs']:>10.2f}x")
    cc, ff = rows[0]["noa"], rows[1]["noa"]
    print(f"F->F / C->C time: {ff / cc:.3f}   (threads: {__import__('numba').get_num_threads()}, "
          f"layer: {__import__('numba').threading_layer()})")


if __name__ == "__main__":
    main()

"""Benchmark noa's CPU kernels against NumPy, side by side, on float32.

Every row times the noa operation, its NumPy counterpart and ``np.copyto`` between two arrays of
the operation's output size (the bandwidth reference), one after the other in each of several
rounds. Times are medians over the rounds; ratios are medians of the ratios taken within each round.
Before every timed call a read of twice the last-level cache writes back what the previous call
left dirty. GB/s counts bytes read plus bytes written. Usage:

    python benchmarks/bench_kernels.py [--quick] [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numba
import numpy as np

import noa_core as nc


def last_level_cache_bytes() -> int:
    """The size of the CPU's largest cache (sysfs), or 32 MiB where it cannot be read."""
    sizes = []
    for entry in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = entry.read_text().strip()
        scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
        sizes.append(int(text.rstrip("KM")) * scale)
    return max(sizes, default=32 << 20)


# Read before every timed call: it evicts (writes back) what the previous call left dirty in the
# shared last-level cache, so a function pays little for its predecessor's writes (a sum timed
# right after a 256 MB copy did, and measured 30% slower than on its own). Lines dirty in other
# cores' private caches, or in other sockets' caches, may remain.
_SCRUB = np.ones(2 * last_level_cache_bytes() // 4, np.float32)


def timings(funcs: list[Callable[[], object]], repeat: int) -> list[list[float]]:
    """Wall times of each function over ``repeat`` rounds; a round calls every function once, in
    turn, so that the functions of one round see the same machine."""
    for f in funcs:  # warm-up: compilation, page faults of fresh outputs
        f()
    samples: list[list[float]] = [[] for _ in funcs]
    for _ in range(repeat):
        for f, s in zip(funcs, samples):
            _SCRUB.sum()
            t = time.perf_counter()
            f()
            s.append(time.perf_counter() - t)
    return samples


def paired_ratio(numerator: list[float], denominator: list[float]) -> float:
    """Median over rounds of numerator/denominator time: a ratio taken within one round cancels the
    slower drifts of a shared machine's memory bandwidth, which moves medians by 20-30%."""
    return statistics.median(n / d for n, d in zip(numerator, denominator))


def row(name: str, shape, noa_f, numpy_f, bytes_moved: int, out_bytes: int, repeat: int) -> dict:
    ref_src = np.ones(out_bytes // 4, np.float32)
    ref_dst = np.empty_like(ref_src)
    noa, npy, copy = timings([noa_f, numpy_f, lambda: np.copyto(ref_dst, ref_src)], repeat)
    # noa's bandwidth relative to copyto's: (bytes_moved / noa) / (2 * out_bytes / copy).
    bandwidth_ratio = bytes_moved / (2 * out_bytes) * paired_ratio(copy, noa)
    return {"name": name, "shape": shape, "noa": statistics.median(noa), "np": statistics.median(npy),
            "vs_np": paired_ratio(npy, noa), "vs_copy": bandwidth_ratio,
            "noa_gbs": bytes_moved / statistics.median(noa) / 1e9,
            "copy_gbs": 2 * out_bytes / statistics.median(copy) / 1e9}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller shapes (seconds, not minutes)")
    parser.add_argument("--repeat", type=int, default=11)
    args = parser.parse_args()
    q = args.quick
    rng = np.random.default_rng(0)
    # Touch and free 1 GiB first: on a fresh process the kernel compacts memory into huge pages
    # during the first large allocations, and whichever row came first paid for it (up to 10x).
    np.ones(1 << 28, np.float32)
    rows = []

    def rand(shape):
        return rng.random(shape, dtype=np.float32)

    # Copies: C -> C and F -> F move the same bytes and must take the same time. "new" rows allocate
    # their output (first-touch page faults included, as for NumPy's copy); "into" rows write an
    # existing array, which is what np.copyto, the bandwidth reference, does.
    copy_shape = (4, 1, 512, 512) if q else (16, 1, 1024, 1024)
    x = rand(copy_shape)
    c = nc.asarray(x)
    f = c.copy("F")
    xf = f.numpy()  # NumPy view of the F array (height and width swapped in memory)
    c_out, f_out = nc.empty(copy_shape), nc.empty(copy_shape, order="F")
    c_dst, f_dst = c_out.numpy(), f_out.numpy()
    nbytes = x.nbytes
    rows.append(row("copy C->C new", copy_shape, lambda: c.copy("C"), lambda: x.copy(order="C"),
                    2 * nbytes, nbytes, args.repeat))
    rows.append(row("copy F->F new", copy_shape, lambda: f.copy("F"), lambda: np.array(xf, order="K"),
                    2 * nbytes, nbytes, args.repeat))
    rows.append(row("copy C->C into", copy_shape, lambda: nc.ewise([c], [c_out], "identity"),
                    lambda: np.copyto(c_dst, x), 2 * nbytes, nbytes, args.repeat))
    rows.append(row("copy F->F into", copy_shape, lambda: nc.ewise([f], [f_out], "identity"),
                    lambda: np.copyto(f_dst, xf), 2 * nbytes, nbytes, args.repeat))
    # F->F time over C->C time, taken within each round.
    c_new, f_new, c_into, f_into = timings([lambda: c.copy("C"), lambda: f.copy("F"),
                                            lambda: nc.ewise([c], [c_out], "identity"),
                                            lambda: nc.ewise([f], [f_out], "identity")], args.repeat)
    f_over_c = paired_ratio(f_new, c_new), paired_ratio(f_into, c_into)
    c_out = f_out = c_dst = f_dst = None  # freed for the next case (rebound, not deleted: the timed closures name them)

    # Transposes of height and width (the NumPy counterpart: ascontiguousarray of the view, or
    # copyto into an existing array for the "into" rows).
    shapes = [(1, 1, 1024, 1024), (1, 1, 2048, 1024), (16, 1, 256, 256), (1, 64, 128, 128)] if q else \
             [(1, 1, 4096, 4096), (1, 1, 16384, 8192), (64, 1, 512, 512), (1, 256, 256, 256)]
    for shape in shapes:
        x = rand(shape)
        a = nc.asarray(x)
        view = a.permute((0, 1, 3, 2))
        out = nc.empty(view.shape)
        dst = out.numpy()
        rows.append(row("permute_copy (0,1,3,2) new", shape, lambda: a.permute_copy((0, 1, 3, 2)),
                        lambda: np.ascontiguousarray(x.transpose(0, 1, 3, 2)), 2 * x.nbytes, x.nbytes, args.repeat))
        rows.append(row("permute (0,1,3,2) into", shape, lambda: nc.ewise([view], [out], "identity"),
                        lambda: np.copyto(dst, x.transpose(0, 1, 3, 2)), 2 * x.nbytes, x.nbytes, args.repeat))
        x = a = view = out = dst = None  # freed for the next case (rebound, not deleted: the timed closures name them)

    # Broadcast multiply: a stack of images times one image.
    stack_shape, image_shape = ((16, 1, 512, 512), (1, 1, 512, 512)) if q else ((64, 1, 1024, 1024), (1, 1, 1024, 1024))
    s, i = rand(stack_shape), rand(image_shape)
    sa, ia = nc.asarray(s), nc.asarray(i)
    rows.append(row("ewise multiply (broadcast)", f"{stack_shape}*{image_shape[2:]}", lambda: sa * ia,
                    lambda: s * i, 2 * s.nbytes + i.nbytes, s.nbytes, args.repeat))
    s = sa = None  # freed for the next case (rebound, not deleted: the timed closures name them)

    # Reductions over 256 MB (64 MB quick).
    red_shape = (16, 1, 1024, 1024) if q else (64, 1, 1024, 1024)
    r = rand(red_shape)
    ra = nc.asarray(r)
    rows.append(row("sum", red_shape, lambda: nc.sum(ra), lambda: r.sum(), r.nbytes, r.nbytes, args.repeat))
    rows.append(row("mean", red_shape, lambda: nc.mean(ra), lambda: r.mean(), r.nbytes, r.nbytes, args.repeat))
    ceiling = read_ceiling(r, ra, args.repeat)

    header = f"{'operation':<30}{'shape':<30}{'noa ms':>9}{'numpy ms':>10}{'vs numpy':>10}{'noa GB/s':>10}" \
             f"{'copyto GB/s':>13}{'vs copyto':>11}"
    print(header)
    print("-" * len(header))
    for rw in rows:
        print(f"{rw['name']:<30}{rw['shape']!s:<30}{rw['noa'] * 1e3:>9.2f}{rw['np'] * 1e3:>10.2f}"
              f"{rw['vs_np']:>9.2f}x{rw['noa_gbs']:>10.1f}{rw['copy_gbs']:>13.1f}{rw['vs_copy']:>10.2f}x")
    print(f"F->F / C->C time: new {f_over_c[0]:.3f}, into {f_over_c[1]:.3f}"
          f"   (threads: {numba.get_num_threads()}, layer: {numba.threading_layer()})")
    print(ceiling)
    cold, warm = first_call_latency()
    print(f"first call (import noa_core + a small copy, new process): cold cache {cold:.2f} s, warm cache {warm:.2f} s")


def read_ceiling(r: np.ndarray, ra: nc.Array, repeat: int) -> str:
    """A sum is bound by how fast the threads can read memory: NumPy's own sum, split into one slab
    per thread and run on a thread pool (it releases the GIL), estimates that ceiling here."""
    threads = numba.get_num_threads()
    slabs = np.array_split(r.reshape(-1), threads)
    with ThreadPoolExecutor(threads) as pool:
        def split_sum():
            return sum(pool.map(np.sum, slabs))
        noa, npy, split = timings([lambda: nc.sum(ra), lambda: r.sum(), split_sum], repeat)
    return (f"read ceiling (estimate): NumPy's sum split over {threads} threads "
            f"{statistics.median(split) * 1e3:.2f} ms = "
            f"{paired_ratio(npy, split):.2f}x NumPy's sum; noa's sum {statistics.median(noa) * 1e3:.2f} ms = "
            f"{paired_ratio(npy, noa):.2f}x, {paired_ratio(split, noa):.2f} of the ceiling")


def first_call_latency() -> tuple[float, float]:
    """Seconds for a new process to import noa_core and copy a small array, with an empty cache
    (everything compiled) and then with the cache that run filled."""
    script = "import numpy as np, noa_core as nc; nc.asarray(np.ones((1, 1, 4, 4), np.float32)).copy('F')"
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        times = []
        for _ in range(2):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", script], env=env, check=True)
            times.append(time.perf_counter() - start)
    return times[0], times[1]


if __name__ == "__main__":
    main()

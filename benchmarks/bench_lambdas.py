"""Benchmark cached user kernels: a lambda written inside the loop against a built-in operator.

Each row times, in turns within every round, the same computation on the same arrays through a
built-in operator (the yardstick, whose kernels are cached by name) and through a lambda evaluated
anew at every call (a new function object each time, as in a notebook loop), which noa maps to the
kernel compiled for the first equal lambda (noa_core.compute.user_kernels). Times are medians over the
rounds; the ratio is the median of the ratios taken within each round. The first call of the
lambda (its compilation) is reported once. The goal of issue 19 is a ratio of at most 2.

    python benchmarks/bench_lambdas.py [--size N] [--repeat R]

``--size`` is the edge of the larger image (default 2048; 64x64 is always measured).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

import noa_core as nc
from noa_core.compute import user_kernels
from noa_core.kernels import BUILTIN_OPS


def turns(funcs: list[Callable[[], object]], repeat: int) -> list[list[float]]:
    """Wall times of each function over ``repeat`` rounds, the functions called in turn in each."""
    samples: list[list[float]] = [[] for _ in funcs]
    for _ in range(repeat):
        for f, s in zip(funcs, samples):
            t = time.perf_counter()
            f()
            s.append(time.perf_counter() - t)
    return samples


def paired_ratio(numerator: list[float], denominator: list[float]) -> float:
    return statistics.median(n / d for n, d in zip(numerator, denominator))


def first_call(f: Callable[[], object]) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def rows(edge: int, repeat: int) -> list[dict]:
    rng = np.random.default_rng(0)
    a = nc.asarray(rng.normal(size=(edge, edge)).astype(np.float32))
    out = nc.empty(a.shape, "float32")
    add = BUILTIN_OPS["add"]
    cases = {
        "ewise v * 2": (lambda: nc.ewise([a, np.float32(2)], out, "multiply"),
                        lambda: nc.ewise(a, out, lambda v: v * np.float32(2))),
        "u * v + u (built-in: 2 calls)": (lambda: (nc.ewise([a, a], out, "multiply"), nc.ewise([out, a], out, "add")),
                                      lambda: nc.ewise([a, a], out, lambda u, v: u * v + u)),
        "reduce_ewise sum": (lambda: nc.reduce_ewise(a, np.float64(0), add),
                             lambda: nc.reduce_ewise(a, np.float64(0), lambda x, y: x + y)),
    }
    results = []
    for name, (builtin, fresh_lambda) in cases.items():
        builtin()  # the built-in's kernels: compiled or loaded from numba's cache
        compiled_before = user_kernels.compiled_count()
        compile_time = first_call(fresh_lambda)
        base, cached = turns([builtin, fresh_lambda], repeat)
        results.append({"case": name, "edge": edge, "compile": compile_time, "builtin": statistics.median(base),
                        "lambda": statistics.median(cached), "ratio": paired_ratio(cached, base),
                        "compiled": user_kernels.compiled_count() - compiled_before})
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2048, help="edge of the larger image (default 2048)")
    parser.add_argument("--repeat", type=int, default=0, help="rounds (default: 300 at 64x64, 30 above)")
    args = parser.parse_args()
    print(f"{'case':28} {'image':>11} {'first call':>11} {'built-in':>11} {'lambda':>11} {'ratio':>6} "
          f"{'compiled':>8}  goal <= 2")
    for edge in (64, args.size):
        repeat = args.repeat or (300 if edge <= 64 else 30)
        for r in rows(edge, repeat):
            verdict = "ok" if r["ratio"] <= 2 else "ABOVE"
            print(f"{r['case']:28} {str(edge) + 'x' + str(edge):>11} {r['compile'] * 1e3:9.1f}ms "
                  f"{r['builtin'] * 1e6:9.1f}us {r['lambda'] * 1e6:9.1f}us {r['ratio']:6.2f} {r['compiled']:8d}  "
                  f"{verdict}")


if __name__ == "__main__":
    main()

"""What `--scheduler local` adds to a small batch: Dask's start-up against the same command without it.

Three small MRC files (16 x 64 x 64 float32 each) are copied into a folder by whole `noa copy ... --out-dir`
processes, without a scheduler and with `--scheduler local`, each ROUNDS times (median reported), on a warm
kernel cache. Then the parts of a local cluster's start are timed inside one process: `import distributed`,
the cluster and its client, the first task, the close.

    python benchmarks/bench_dask_start.py [--rounds 3]

Put `bokeh` on PYTHONPATH to see what its dashboard would cost (noa starts the local scheduler without it).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from noa_core import io

NOA = str(Path(sys.executable).parent / "noa")

PARTS = """
import os, sys, time
start = time.perf_counter()
import distributed
from noa_core.run import cluster
imported = time.perf_counter()
if __name__ == "__main__":
    with cluster.connect("local", work_bytes=int(sys.argv[1]) if sys.argv[1] != "None" else None) as client:
        started = time.perf_counter()
        client.submit(os.getpid).result()
        ran = time.perf_counter()
    closed = time.perf_counter()
    print(imported - start, started - imported, ran - started, closed - ran)
"""


def median_seconds(argv: list[str], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(f"failed: {' '.join(argv)}\n{done.stderr[-1500:]}")
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        inputs = []
        for i in range(3):
            inputs.append(root / f"in{i}.mrc")
            io.write(inputs[-1], np.random.default_rng(i).normal(size=(16, 64, 64)).astype(np.float32))
        copy = [NOA, "copy", *map(str, inputs), "--out-dir", str(root / "out"), "--force"]
        subprocess.run(copy, capture_output=True, check=True)  # the kernel cache and the .pyc files warm
        here = median_seconds(copy, args.rounds)
        dask = median_seconds([*copy, "--scheduler", "local"], args.rounds)
        print(f"noa copy, 3 small files: {here:.2f} s here, {dask:.2f} s with --scheduler local "
              f"(+{dask - here:.2f} s; median of {args.rounds})")
        script = root / "parts.py"
        script.write_text(PARTS)
        for label, work in (("small work (threads of this process)", "1"), ("work of unknown size", "None")):
            rows = [list(map(float, subprocess.run([sys.executable, str(script), work], capture_output=True, text=True,
                                                   check=True).stdout.split())) for _ in range(args.rounds)]
            parts = [statistics.median(column) for column in zip(*rows)]
            print(f"local cluster, {label}: import {parts[0]:.2f} s, start {parts[1]:.2f} s, first task "
                  f"{parts[2]:.2f} s, close {parts[3]:.2f} s (medians of {args.rounds})")


if __name__ == "__main__":
    main()

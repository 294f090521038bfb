"""Throughput of a batch of files on Dask (`noa ... --scheduler local`) against a plain loop.

The same operation (permute --axes 0,1,3,2, so every file is transposed section by section) on the
same generated files: a single-process loop calling noa_core.run.local.write in turn, then
noa_core.run.cluster.run_batch
on a LocalCluster of 1 and of 2 single-threaded worker processes. Kernels are warm in every case
(the loop runs once untimed first; the cluster's first task warms the shared cache), and cluster
start-up is reported apart from the batch time. Outputs go to a fresh folder each run; the best of
--repeat runs is shown (shared machines are noisy).

Prints one table: seconds, files/s, speed-up over the single-threaded loop (what one worker runs)
and scaling efficiency (speed-up divided by the number of workers). The loop with every core's
numba threads (what `noa permute --out-dir` does without --scheduler) is shown for reference.
Run: python benchmarks/bench_scale.py [--files 200] [--shape 8,256,256] [--workers 1,2] [--repeat 3]
"""

from __future__ import annotations

import os

# Dask's nanny starts workers with one BLAS/OpenMP thread (distributed.nanny.pre-spawn-environ); the
# loop gets the same, or NumPy's statistics pass (np.dot) spends its time waking BLAS threads and the
# comparison would measure that rather than the scheduling. Set before NumPy is imported.
for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import argparse  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import mrcfile  # noqa: E402
import numba  # noqa: E402
import numpy as np  # noqa: E402

from noa_core import limits, operations  # noqa: E402
from noa_core.run import cluster, local  # noqa: E402


def make_files(folder: Path, count: int, shape: tuple[int, ...]) -> list[Path]:
    rng = np.random.default_rng(0)
    data = rng.normal(0, 1, shape).astype(np.float32)
    paths = []
    for i in range(count):
        path = folder / f"movie{i:03d}.mrcs"
        with mrcfile.new(path, data + i) as f:
            f.set_image_stack()
            f.voxel_size = 1.1
        paths.append(path)
    return paths


def fresh(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--shape", default="8,256,256", help="sections,height,width of each float32 file")
    parser.add_argument("--workers", default="1,2", help="LocalCluster sizes to measure")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each mode; the best is shown")
    args = parser.parse_args()
    shape = tuple(int(n) for n in args.shape.split(","))
    op = operations.get("permute").task(axes=(0, 1, 3, 2))
    with tempfile.TemporaryDirectory(prefix="noa-bench-scale-") as tmp:
        root = Path(tmp)
        inputs = make_files(fresh(root / "in"), args.files, shape)
        size_mib = sum(p.stat().st_size for p in inputs) / 2**20
        print(f"{args.files} files of {shape} float32 ({size_mib:.0f} MiB in all), noa permute --axes 0,1,3,2, "
              f"{limits.available_cores()} cores")

        rows = []
        cores = limits.available_cores()
        for threads in sorted({1, cores}):  # a worker's setting, then the loop as `noa` runs it by default
            numba.set_num_threads(threads)
            out = fresh(root / "warm")
            local.write(op, inputs[0], out / "x.mrcs")  # compile (or load) the kernels before timing the loop
            times = []
            for _ in range(args.repeat):
                out = fresh(root / "out")
                start = time.perf_counter()
                for src in inputs:
                    local.write(op, src, out / src.name)
                times.append(time.perf_counter() - start)
            rows.append((f"loop, {threads} thread(s)", 1, 0.0, min(times)))
        loop = rows[0][3]

        for workers in (int(n) for n in args.workers.split(",")):
            start = time.perf_counter()
            with cluster.connect("local", workers=workers) as client:
                started = time.perf_counter() - start
                times = []
                for _ in range(args.repeat):
                    out = fresh(root / "out")
                    start = time.perf_counter()
                    results = cluster.run_batch(op, [(p, out / p.name) for p in inputs], client)
                    times.append(time.perf_counter() - start)
                    failed = [r for r in results if r.status != "written"]
                    assert not failed, failed[:3]
            rows.append(("dask LocalCluster", workers, started, min(times)))

    print(f"{'mode':<22}{'workers':>8}{'start s':>9}{'batch s':>9}{'files/s':>9}{'speed-up':>10}{'efficiency':>12}")
    for name, workers, started, elapsed in rows:
        speedup = loop / elapsed
        print(f"{name:<22}{workers:>8}{started:>9.2f}{elapsed:>9.2f}{args.files / elapsed:>9.1f}"
              f"{speedup:>10.2f}{speedup / workers:>12.0%}")


if __name__ == "__main__":
    main()

"""File to file, end to end as a user runs it: each `noa` command paired in turns with the least any
file-to-file tool must do, `dd if=IN of=OUT bs=16M conv=fsync` (read the file, write it, make it
durable), on a float32 MRC volume (default 1 GiB, (256, 1024, 1024)).

Every round runs each command once and its yardstick right after it; the ratio of a row is the median
of its per-round ratios (noa time / yardstick time). Peak resident memory of each noa process (file-
backed pages of memory maps included) comes from wait4's rusage. Yardsticks: `dd` for writing
commands, a NumPy memmap script computing min, max, mean and std for `noa stats`, `zcat > /dev/null`
for the gzip row (decompression is the limit there). Goals are those of issue 15, the permutes' of issue 41
(within 2x of dd on tmpfs). Two rows are no noa command, and read against dd. The floor loads numba and its CPU
target alone, which every command running kernels does before it reads a byte (a copy's header statistics need
them). The bound is a copy recording header statistics stripped to what it must do and overlapped as well as it can
be (BOUND_COPY): noa's modules imported, the data copied by the kernel while numba loads, the statistics read from
the input, the rename; no checks, tiles or header. A copy row near it has nothing left to gain but its start.

The 4 GiB row copies a 4 GiB volume (--big-shape; 0 skips it): larger than the 512 MiB that peak
resident memory may reach. A limit on address space (RLIMIT_AS) is not how it is bounded: noa maps
its inputs (views cost nothing to plan) and reads them with pread, so its address space includes the
whole input while its resident memory stays at a few tiles; peak RSS, file-backed pages included, is
what a batch system's memory limit counts, and what the table reports.

    python benchmarks/bench_files.py [--shape 256,1024,1024] [--big-shape 1024,1024,1024] [--rounds 3]
        [--folder DIR] [--only copy,stats]
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from processes import make_volume, paired

NOA = str(Path(sys.executable).parent / "noa")
NUMPY_STATS = ("import sys, numpy as np, mrcfile; d = mrcfile.mmap(sys.argv[1], permissive=True).data; "
               "print(d.min(), d.max(), d.mean(dtype=np.float64), d.std(dtype=np.float64))")

KERNELS_LOADED = "import noa_core.kernels.runtime"  # its import loads numba's CPU target
# A copy that records header statistics, stripped to what it must do: the modules a copy imports; the data copied
# by the kernel (copy_file_range, which needs no GIL) while numba and its CPU target load; then the statistics, read
# from the input; the output renamed into place. No checks, no tiles, no header.
BOUND_COPY = """
import os, sys, threading
import numpy as np
import noa_core.run.local
src, dst = sys.argv[1], sys.argv[2]
head = np.fromfile(src, np.int32, 24)
offset, shape = 1024 + int(head[23]), (1, int(head[2]), int(head[1]), int(head[0]))
fin = os.open(src, os.O_RDONLY)
size = os.fstat(fin).st_size
fout = os.open(dst + ".part", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
def copy():
    done = 0
    while done < size:
        copied = os.copy_file_range(fin, fout, size - done, done, done)
        if copied == 0:
            raise SystemExit(f"{src}: shorter than it was")
        done += copied
copying = threading.Thread(target=copy)
copying.start()
import noa_core as nc
from noa_core.compute import moments
data = np.memmap(src, np.float32, "r", offset=offset, shape=shape)
moments.block_moments(nc.asarray(np.asarray(data)))
copying.join()
os.rename(dst + ".part", dst)
"""


def rows(folder: Path, volume: Path, gz: Path,
         big: Path | None) -> list[tuple[str, list[str] | str, list[str] | str, float]]:
    out_mrc, out_tif = folder / "out.mrc", folder / "out.tif"
    dd = f"dd if={volume} of={folder / 'dd.out'} bs=16M conv=fsync status=none"
    large = [] if big is None else [
        ("noa copy 4 GiB vol.mrc out.mrc", [NOA, "copy", str(big), str(out_mrc), "-f"],
         f"dd if={big} of={folder / 'dd.out'} bs=16M conv=fsync status=none", 1.3)]
    return [
        ("noa copy vol.mrc out.mrc", [NOA, "copy", str(volume), str(out_mrc), "-f"], dd, 1.3),
        ("noa permute --axes 0,1,3,2", [NOA, "permute", str(volume), str(out_mrc), "--axes", "0,1,3,2", "-f"], dd, 2.0),
        ("noa permute --axes 0,2,1,3", [NOA, "permute", str(volume), str(out_mrc), "--axes", "0,2,1,3", "-f"], dd, 2.0),
        ("noa copy --order F", [NOA, "copy", str(volume), str(out_mrc), "--order", "F", "-f"], dd, 1.5),
        ("noa copy --dtype float16", [NOA, "copy", str(volume), str(out_mrc), "--dtype", "float16", "-f"], dd, 1.5),
        ("noa copy vol.mrc out.tif", [NOA, "copy", str(volume), str(out_tif), "-f"], dd, 1.5),
        ("noa stats vol.mrc (vs NumPy memmap)", [NOA, "stats", str(volume)],
         [sys.executable, "-c", NUMPY_STATS, str(volume)], 0.5),
        ("noa copy vol.mrc.gz out.mrc (vs zcat)", [NOA, "copy", str(gz), str(out_mrc), "-f"],
         f"zcat {gz} > /dev/null", None),
        *large,
        # What every command that runs kernels pays before it reads a byte: numba imported and its CPU target
        # loaded (the stats a copy's header records need them). Against dd, it is the floor of the rows above.
        ("floor: numba and its CPU target (vs dd)", [sys.executable, "-c", KERNELS_LOADED], dd, None),
        # noa's start, the statistics and dd's copy overlapped as well as they can be (see BOUND_COPY).
        ("bound: a copy at its least (vs dd)", [sys.executable, "-c", BOUND_COPY, str(volume), str(out_mrc)], dd,
         None),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="256,1024,1024", help="D,H,W of the float32 volume")
    parser.add_argument("--big-shape", default="1024,1024,1024", help="D,H,W of the large volume (0: none)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--folder", type=Path, default=None, help="where the files go (default: a temporary folder)")
    parser.add_argument("--only", default="", help="comma-separated words; keep rows whose name has one")
    args = parser.parse_args()
    shape = tuple(int(n) for n in args.shape.split(","))
    folder = Path(tempfile.mkdtemp(prefix="noa-bench-files-", dir=args.folder))
    try:
        volume, gz = folder / "vol.mrc", folder / "vol.mrc.gz"
        make_volume(volume, shape)
        with open(volume, "rb") as src, gzip.open(gz, "wb", compresslevel=1) as dst:
            shutil.copyfileobj(src, dst, 16 << 20)
        big = None
        if args.big_shape != "0":
            big = folder / "big.mrc"
            make_volume(big, tuple(int(n) for n in args.big_shape.split(",")))
        print(f"volume {shape} float32, {volume.stat().st_size / 2**30:.2f} GiB; gzip {gz.stat().st_size / 2**30:.2f} "
              f"GiB; {os.cpu_count()} cores; {args.rounds} rounds")
        subprocess.run([NOA, "warmup", "-q"], check=True)
        wanted = [w for w in args.only.split(",") if w]
        table = [r for r in rows(folder, volume, gz, big) if not wanted or any(w in r[0] for w in wanted)]
        print(f"{'command':<40}{'noa s':>8}{'yardstick s':>13}{'ratio':>8}{'goal':>7}{'peak RSS MiB':>14}  verdict")
        for name, command, yardstick, goal in table:
            outputs = [folder / "out.mrc", folder / "out.tif", folder / "dd.out"]
            result = paired(command, yardstick, args.rounds, outputs)
            met = result.ratio <= goal and max(result.peaks) <= 512 if goal is not None else False
            verdict = "-" if goal is None else ("met" if met else "MISSED")
            print(f"{name:<40}{statistics.median(result.times):>8.2f}{statistics.median(result.yardsticks):>13.2f}"
                  f"{result.ratio:>8.2f}{goal if goal else '-':>7}{max(result.peaks):>14.0f}  {verdict}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()

"""split, scale, normalize and header, end to end as a user runs them, each paired in turns with a
script doing the same job with mrcfile and NumPy (the way these jobs are scripted today), on a float32
stack of --size sections of --size x --size (default 256: 64 MiB).

Every round runs each noa command once and its yardstick right after it; a row's ratio is the median of
the per-round ratios (noa time / yardstick time; below 1 is faster). Peak resident memory of each
process comes from wait4's rusage. The yardsticks hold the whole stack in memory (NumPy's percentile
sorts a copy); noa streams it in tiles. `header` is set against mrcfile's own header edit (open 'r+',
set voxel_size, close), and against a full rewrite of the file with the new voxel size.

    python benchmarks/bench_split_scale_normalize.py [--size 256] [--rounds 3] [--folder DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from processes import make_volume, paired, run

NOA = str(Path(sys.executable).parent / "noa")
PY = sys.executable

SCALE = """
import sys, mrcfile, numpy as np
d = np.asarray(mrcfile.read(sys.argv[1]), np.float64)
lo, hi = np.percentile(d, (0.1, 99.9))
out = np.rint(np.clip((d - lo) * 255 / (hi - lo), 0, 255)).astype(np.uint8)
with mrcfile.new(sys.argv[2], out, overwrite=True) as f:
    f.voxel_size = 1.0
"""
NORMALIZE = """
import sys, mrcfile, numpy as np
d = np.asarray(mrcfile.read(sys.argv[1]), np.float64)
m, s = d.mean(axis=(1, 2), keepdims=True), d.std(axis=(1, 2), keepdims=True)
with mrcfile.new(sys.argv[2], ((d - m) / s).astype(np.float32), overwrite=True) as f:
    f.set_image_stack()
"""
SPLIT = """
import sys, os, mrcfile, numpy as np
d = mrcfile.mmap(sys.argv[1], mode="r").data
os.makedirs(sys.argv[2], exist_ok=True)
for i in range(0, d.shape[0], 8):
    mrcfile.write(os.path.join(sys.argv[2], f"part_{i // 8:03d}.mrcs"), np.asarray(d[i:i + 8]), overwrite=True)
"""
HEADER = """
import sys, mrcfile
with mrcfile.open(sys.argv[1], mode="r+") as f:
    f.voxel_size = float(sys.argv[2])
"""
REWRITE = """
import sys, mrcfile, numpy as np
d = mrcfile.read(sys.argv[1])
with mrcfile.new(sys.argv[2], d, overwrite=True) as f:
    f.voxel_size = float(sys.argv[3])
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=256, help="sections, height and width of the stack")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--folder", type=Path, default=None, help="where the files go (default: a temporary one)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="noa-bench-stack2-", dir=args.folder))
    try:
        stack = folder / "stack.mrcs"
        make_volume(stack, (args.size,) * 3, varied=True, stack=True, pixel_size=1.0)
        run([NOA, "warmup", "-q"])
        cases = {
            "scale --percentiles -> uint8": (
                lambda: [NOA, "scale", str(stack), str(folder / "a.mrc"), "--to-range", "0,255", "--percentiles",
                         "0.1,99.9", "--dtype", "uint8", "--force", "-q"],
                lambda: [PY, "-c", SCALE, str(stack), str(folder / "b.mrc")]),
            "normalize --per-section": (
                lambda: [NOA, "normalize", str(stack), str(folder / "a.mrcs"), "--per-section", "--force", "-q"],
                lambda: [PY, "-c", NORMALIZE, str(stack), str(folder / "b.mrcs")]),
            "split --every 8": (
                lambda: [NOA, "split", str(stack), "--out-dir", str(folder / "a"), "--every", "8", "--force", "-q"],
                lambda: [PY, "-c", SPLIT, str(stack), str(folder / "b")]),
            "header --pixel-size (vs mrcfile r+)": (
                lambda: [NOA, "header", str(stack), "--pixel-size", "1.5"],
                lambda: [PY, "-c", HEADER, str(stack), "1.5"]),
            "header --pixel-size (vs a rewrite)": (
                lambda: [NOA, "header", str(stack), "--pixel-size", "1.5"],
                lambda: [PY, "-c", REWRITE, str(stack), str(folder / "c.mrcs"), "1.5"]),
        }
        print(f"float32 stack {args.size}^3 ({args.size ** 3 * 4 >> 20} MiB), {args.rounds} rounds, paired in turns")
        print(f"{'command':<38}{'noa s':>9}{'yardstick s':>13}{'ratio':>8}{'noa MiB':>10}{'yard MiB':>11}")
        for name, (ours, theirs) in cases.items():
            print(f"{name:<38}{paired(ours, theirs, args.rounds, warm=False).columns(3)}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()

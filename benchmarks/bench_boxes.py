"""Stack operations file to file (bin, resize, flip, rotx), each paired in turns with the same job done the
way a lab script does it: read with mrcfile (memory-mapped), compute with NumPy, write with mrcfile; on a
float32 MRC volume (default 1 GiB, (256, 1024, 1024)).

Every round runs the noa command, then its NumPy + mrcfile script on the same input; the ratio of a row
is the median of its per-round ratios (noa time / script time: below 1 noa is faster). Both sides write
a new file each time and both are timed as processes (start-up included); peak resident memory of each
comes from wait4's rusage.

    python benchmarks/bench_boxes.py [--size 256,1024,1024] [--rounds 3] [--folder DIR] [--only bin,flip]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from processes import make_volume, paired

NOA = str(Path(sys.executable).parent / "noa")

# The yardsticks: mrcfile.mmap in, NumPy in the middle, mrcfile.new out (as a lab script would).
NUMPY = {
    "bin": """
d = src.data
k = {k}
z, y, x = d.shape
oy, ox = (y % k) // 2, (x % k) // 2
box = d[:, oy:oy + y // k * k, ox:ox + x // k * k]
out = box.reshape(z, y // k, k, x // k, k).mean(axis=(2, 4), dtype=np.float64).astype(np.float32)
voxel = (src.voxel_size.x * k, src.voxel_size.y * k, src.voxel_size.z)
""",
    "bin3": """
d = src.data
k = {k}
z, y, x = (n // k * k for n in d.shape)
oz, oy, ox = ((n % k) // 2 for n in d.shape)
box = d[oz:oz + z, oy:oy + y, ox:ox + x]
out = box.reshape(z // k, k, y // k, k, x // k, k).mean(axis=(1, 3, 5), dtype=np.float64).astype(np.float32)
voxel = tuple(v * k for v in (src.voxel_size.x, src.voxel_size.y, src.voxel_size.z))
""",
    "resize": """
d = src.data
target = {target}
crops, pads = [], []
for n, m in zip(d.shape, target):
    off = n // 2 - m // 2
    lo, hi = max(off, 0), min(off + m, n)
    crops.append(slice(lo, hi))
    pads.append((max(-off, 0), m - (hi - lo) - max(-off, 0)))
out = np.pad(d[tuple(crops)], pads, constant_values=0)
voxel = src.voxel_size
""",
    "flip": """
out = np.ascontiguousarray(np.flip(src.data, {axis}))
voxel = src.voxel_size
""",
    "rotx": """
out = np.ascontiguousarray(np.rot90(src.data, 1, axes=(0, 1)))
voxel = (src.voxel_size.x, src.voxel_size.z, src.voxel_size.y)
""",
}
SCRIPT = """
import sys, mrcfile, numpy as np
with mrcfile.mmap(sys.argv[1], permissive=True) as src:
{body}
    with mrcfile.new(sys.argv[2], out, overwrite=True) as dst:
        dst.voxel_size = voxel
"""


def numpy_script(kind: str, **values) -> str:
    body = NUMPY[kind].format(**values).strip().splitlines()
    return SCRIPT.format(body="\n".join("    " + line for line in body))


def rows(folder: Path, volume: Path, shape: tuple[int, int, int]) -> list[tuple[str, list[str], list[str]]]:
    d, h, w = shape
    out, ref = str(folder / "noa.mrc"), str(folder / "numpy.mrc")
    crop = (max(d * 3 // 4, 1), max(h * 3 // 4, 1), max(w * 3 // 4, 1))
    pad = (d + d // 4, h + h // 4, w + w // 4)

    def numpy(kind: str, **values) -> list[str]:
        return [sys.executable, "-c", numpy_script(kind, **values), str(volume), ref]

    def noa(*args: str) -> list[str]:
        return [NOA, args[0], str(volume), out, *args[1:], "-f"]

    return [
        ("bin --factor 2", noa("bin", "--factor", "2"), numpy("bin", k=2)),
        ("bin --factor 2 --depth", noa("bin", "--factor", "2", "--depth"), numpy("bin3", k=2)),
        ("resize (crop to 3/4)", noa("resize", "--shape", ",".join(map(str, crop)), "--fill", "zero"),
         numpy("resize", target=crop)),
        ("resize (pad to 5/4)", noa("resize", "--shape", ",".join(map(str, pad)), "--fill", "zero"),
         numpy("resize", target=pad)),
        ("flip --axis x", noa("flip", "--axis", "x"), numpy("flip", axis=2)),
        ("flip --axis y", noa("flip", "--axis", "y"), numpy("flip", axis=1)),
        ("flip --axis z", noa("flip", "--axis", "z"), numpy("flip", axis=0)),
        ("rotx", noa("rotx"), numpy("rotx")),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", "--shape", dest="size", default="256,1024,1024", help="D,H,W of the float32 volume")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--folder", type=Path, default=None, help="where the files go (default: a temporary folder)")
    parser.add_argument("--only", default="", help="comma-separated words; keep rows whose name has one")
    args = parser.parse_args()
    shape = tuple(int(n) for n in args.size.split(","))
    if len(shape) != 3 or min(shape) < 2:
        raise SystemExit("--size: three sizes D,H,W of at least 2")
    folder = Path(tempfile.mkdtemp(prefix="noa-bench-stack-", dir=args.folder))
    try:
        volume = folder / "vol.mrc"
        make_volume(volume, shape)
        print(f"volume {shape} float32, {volume.stat().st_size / 2**30:.3f} GiB; {os.cpu_count()} cores; "
              f"{args.rounds} rounds; ratio = noa / (mrcfile + NumPy), below 1: noa faster")
        subprocess.run([NOA, "warmup", "-q"], check=True)
        wanted = [word for word in args.only.split(",") if word]
        table = [r for r in rows(folder, volume, shape) if not wanted or any(word in r[0] for word in wanted)]
        print(f"{'command':<26}{'noa s':>9}{'numpy s':>13}{'ratio':>8}{'noa MiB':>10}{'numpy MiB':>11}")
        for name, command, yardstick in table:
            print(f"{name:<26}{paired(command, yardstick, args.rounds).columns()}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()

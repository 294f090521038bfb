"""Benchmark noa preview: micrograph thumbnails against the script pipelines use, and the central slices of
volumes of growing size (bytes read, time, memory).

Rows:

- thumbnails: ``noa preview MIC... --out-dir DIR --format jpeg --size 1024`` (a batch, one process) against a
  script doing the same picture the way pipelines do it (mrcfile reads each file, NumPy averages k x k blocks
  with reshape, clips at mean ± 3 sd (n - 1) and scales to 0..255, Pillow writes a quality-90 JPEG), paired in
  turns, median of the rounds; the ratio is noa / script (below 1: noa is faster); peak RSS of both. The first
  picture of each is compared (they must agree within JPEG's rounding). Goal (issue 29): ratio <= 0.5,
  noa's peak <= 512 MiB, for 100 micrographs of 4096 x 4096 float32.
- central slices: ``noa_core.pictures.drawing.preview(volume)`` (XY, XZ, YZ) of float32 volumes of N^3, in a
  child process: the bytes it reads (/proc/self/io rchar, before and after), its wall time with the volume in
  the page cache and with its pages dropped first (posix_fadvise DONTNEED: read from the disk), the child's
  peak RSS; and the time of ``noa preview VOL OUT.png`` as a command. An XY or XZ slice reads its plane's
  bytes (one run, or one row per section); a YZ slice needs a value from every row, and rows of a page or less
  (W x 4 <= 4 KiB) put one in every page, so every page of the volume is read, in file order: value by value
  with scattered preadv (mapped.read_view), the bytes between the values passing through a small buffer that
  stays in cache, the values held packed (memory stays bounded). Goal (issue 29): a 4 GiB volume (1024^3)
  under 1 s and 300 MiB RSS.

Usage:

    python benchmarks/bench_preview.py                                  # 100 x 4096^2, volumes 256..1024^3
    python benchmarks/bench_preview.py --count 8 --size 2048 --volumes 128,256 --rounds 3   # a quick check
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from processes import make_volume, paired, run

NOA = str(Path(sys.executable).parent / "noa")

SCRIPT = """
import sys, mrcfile, numpy as np
from pathlib import Path
from PIL import Image
out, size = Path(sys.argv[1]), int(sys.argv[2])
for name in sys.argv[3:]:
    with mrcfile.open(name, permissive=True) as f:
        data = f.data.astype(np.float64).reshape(f.data.shape[-2:])
    k = -(-max(data.shape) // size)
    rows, cols = data.shape[0] // k, data.shape[1] // k
    binned = data[:rows * k, :cols * k].reshape(rows, k, cols, k).mean(axis=(1, 3))
    mean, sd = binned.mean(), binned.std(ddof=1)
    lo, hi = mean - 3 * sd, mean + 3 * sd
    levels = np.floor((np.clip(binned, lo, hi) - lo) / ((hi - lo) / 255)).astype(np.uint8)
    Image.fromarray(levels).save(out / (Path(name).stem + ".jpg"), quality=90)
"""

CENTRAL = """
import os, resource, sys, time
def rchar():
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("rchar")).split()[1])
import numpy as np
from noa_core.pictures import drawing
drawing.encode(drawing.preview(np.zeros((4, 4, 4), np.float32)), "png")  # imports done: rchar counts data alone
if sys.argv[2] == "cold":  # the volume's pages out of the page cache: read from the disk
    fd = os.open(sys.argv[1], os.O_RDONLY)
    os.fsync(fd)  # dirty pages (a volume just written) are not dropped
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
before, start = rchar(), time.perf_counter()
picture = drawing.preview(sys.argv[1])
elapsed, read = time.perf_counter() - start, rchar() - before
print(elapsed, read, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, *picture.shape[:2])
"""


def thumbnails(folder: Path, count: int, size: int, rounds: int) -> None:
    micrographs = []
    for n in range(count):
        path = folder / f"mic{n:03d}.mrc"
        make_volume(path, (1, size, size), varied=True)  # one section: a 2-d image
        micrographs.append(path)
    ours, theirs = folder / "noa", folder / "script"
    ours.mkdir()
    theirs.mkdir()
    outputs = [ours / f"mic{n:03d}.jpg" for n in range(count)] + [theirs / f"mic{n:03d}.jpg" for n in range(count)]
    noa = [NOA, "preview", *map(str, micrographs), "--out-dir", str(ours), "--format", "jpeg", "--size", "1024",
           "--quiet"]
    script = [sys.executable, "-c", SCRIPT, str(theirs), "1024", *map(str, micrographs)]
    result = paired(noa, script, rounds, outputs)
    run(noa)  # the last round removed noa's pictures before the script ran: once more, to compare them
    a = np.asarray(Image.open(ours / "mic000.jpg"), dtype=int)
    b = np.asarray(Image.open(theirs / "mic000.jpg"), dtype=int)
    assert a.shape == b.shape and np.abs(a - b).mean() < 2, "the two thumbnails differ"
    print(f"thumbnails: {count} x {size}^2 float32 -> 1024 px JPEG, sigma:3 ({rounds} rounds, median)")
    print(f"{'':>12}{'noa s':>9}{'script s':>13}{'ratio':>8}{'noa MiB':>10}{'script MiB':>11}")
    print(f"{'':>12}{result.columns()}   (goal: ratio <= 0.5, noa <= 512 MiB)")
    for path in micrographs:
        path.unlink()


def central_slices(folder: Path, sides: list[int], rounds: int) -> None:
    print("central slices (XY, XZ, YZ) of N^3 float32 volumes: drawing.preview in a child process (page cache warm, "
          "and cold), and the command")
    print(f"{'N':>6}{'volume MiB':>12}{'read MiB':>10}{'3 planes MiB':>14}{'render s':>10}{'cold s':>8}"
          f"{'peak MiB':>10}{'noa preview s':>15}")
    for side in sides:
        volume = folder / f"vol{side}.mrc"
        make_volume(volume, (side, side, side))
        def render(cache: str) -> tuple[float, int, float]:
            out = subprocess.run([sys.executable, "-c", CENTRAL, str(volume), cache], capture_output=True, text=True,
                                 check=True).stdout.split()
            return float(out[0]), int(out[1]), float(out[2])

        cold = [render("cold")[0] for _ in range(rounds)]
        timed = [render("warm") for _ in range(rounds + 1)][1:]  # the first warms the page cache for the others
        command = [run([NOA, "preview", str(volume), str(folder / "c.png"), "--quiet"], [folder / "c.png"])[0]
                   for _ in range(rounds)]
        mib = 1 << 20
        print(f"{side:>6}{side ** 3 * 4 / mib:>12.0f}{statistics.median(r[1] for r in timed) / mib:>10.1f}"
              f"{3 * side * side * 4 / mib:>14.1f}{statistics.median(r[0] for r in timed):>10.3f}"
              f"{statistics.median(cold):>8.3f}{max(r[2] for r in timed):>10.0f}{statistics.median(command):>15.3f}")
        volume.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=100, help="micrographs (default 100)")
    parser.add_argument("--size", type=int, default=4096, help="micrograph side in pixels (default 4096)")
    parser.add_argument("--volumes", default="256,512,1024", help="volume sides N (default 256,512,1024)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds, in turns (default 3)")
    parser.add_argument("--skip-thumbnails", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as scratch:
        if not args.skip_thumbnails:
            thumbnails(Path(scratch), args.count, args.size, args.rounds)
        if args.volumes:
            central_slices(Path(scratch), [int(n) for n in args.volumes.split(",")], args.rounds)


if __name__ == "__main__":
    main()

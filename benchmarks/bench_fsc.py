"""Benchmark ``noa fsc`` against ``relion_image_handler --fsc`` (RELION 3.1.3) on the same half maps, in one run.

Each size: two float32 half maps of N^3 voxels (one smoothed random density plus independent noise in each),
compared by ``noa fsc HALF1 HALF2 -o noa.star`` and by ``relion_image_handler --i HALF1 --fsc HALF2`` (its
STAR on stdout, discarded). The two run in turns, ``--rounds`` times (noa once untimed first, so the page
cache holds the maps for both); printed: the median wall seconds of each, the median of the per-round ratios
noa / RELION (goal: at most 0.5) and their spread (lowest-highest, with those of the wall seconds), the peak RSS
of each (MiB, of the child process), and the largest
|noa - RELION| of the FSC columns (RELION prints 6 decimals).

Usage:

    python benchmarks/bench_fsc.py                  # 256^3, 3 rounds
    python benchmarks/bench_fsc.py --sizes 128,256
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from processes import paired, run

NOA = str(Path(sys.executable).parent / "noa")
MAKE_HALVES = """
import sys, mrcfile, numpy as np
from scipy import ndimage
n = int(sys.argv[3])
rng = np.random.default_rng(0)
signal = ndimage.gaussian_filter(rng.normal(size=(n, n, n)).astype(np.float32), 2.0) * 10
for path in sys.argv[1:3]:
    with mrcfile.new(path, signal + rng.normal(size=signal.shape).astype(np.float32), overwrite=True) as f:
        f.voxel_size = 1.2
"""
DIFFERENCE = """
import sys, starfile, numpy as np
ours = starfile.read(sys.argv[1])["rlnFourierShellCorrelation"].to_numpy()
theirs = starfile.read(sys.argv[2])["rlnFourierShellCorrelation"].to_numpy()
print(float(np.abs(ours - theirs).max()))
"""


def one_size(folder: Path, n: int, rounds: int) -> None:
    one, two, ours, theirs = (folder / f"{name}{n}{ext}" for name, ext in
                              (("half1_", ".mrc"), ("half2_", ".mrc"), ("noa", ".star"), ("relion", ".star")))
    # A child writes the maps: the benchmark's own pages stay out of the peaks of the commands it starts.
    subprocess.run([sys.executable, "-c", MAKE_HALVES, str(one), str(two), str(n)], check=True)
    noa_command = [NOA, "fsc", str(one), str(two), "-o", str(ours)]
    relion_command = ["relion_image_handler", "--i", str(one), "--fsc", str(two)]
    result = paired(noa_command, relion_command, rounds, outputs=(ours,))
    run(noa_command, (ours,))
    with open(theirs, "w") as out:
        subprocess.run(relion_command, check=True, stdout=out, stderr=subprocess.DEVNULL)
    difference = subprocess.run([sys.executable, "-c", DIFFERENCE, str(ours), str(theirs)], check=True,
                                capture_output=True, text=True).stdout.strip()
    verdict = "met" if result.ratio <= 0.5 else "NOT met"
    ratios = [t / y for t, y in zip(result.times, result.yardsticks, strict=True)]
    print(f"{n:>4}^3{result.columns()}   {float(difference):.1e}   (goal <= 0.50: {verdict}; ratios "
          f"{min(ratios):.2f}-{max(ratios):.2f}, noa {min(result.times):.2f}-{max(result.times):.2f} s, RELION "
          f"{min(result.yardsticks):.2f}-{max(result.yardsticks):.2f} s)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="256", help="map edges N, comma-separated (default 256)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds run in turns (default 3; the median is kept)")
    args = parser.parse_args()
    if shutil.which("relion_image_handler") is None:
        raise SystemExit("relion_image_handler not found: install RELION (apt-get install relion)")
    print(f"noa fsc vs relion_image_handler --fsc, median of {args.rounds} rounds")
    print(f"{'size':>6}{'noa s':>9}{'RELION s':>13}{'ratio':>8}{'noa MiB':>10}{'RELION MiB':>11}   max |diff|")
    with tempfile.TemporaryDirectory() as scratch:
        os.chdir(scratch)  # RELION leaves a scratch file (.spi) where it runs
        for n in (int(s) for s in args.sizes.split(",")):
            one_size(Path(scratch), n, args.rounds)


if __name__ == "__main__":
    main()

"""Benchmark ``noa mask`` against ``relion_mask_create`` (RELION 3.1.3) on the same map, in one run.

Each size: a float32 map of N^3 voxels (a particle-like density: 300 smoothed points within a ball of radius
0.3 N, scaled to a
maximum of 1, plus noise of standard deviation 0.01),
masked with ``--threshold T --extend 3 --soft-edge 6`` by noa and with ``--ini_threshold T
--extend_inimask 3 --width_soft_edge 6`` by RELION (its default --j 1; noa's distance transform is
single-threaded too), T = 0.2. The two run in turns, ``--rounds`` times (noa once
untimed first, so the page cache holds the map for both); printed: the median wall seconds of each,
the median of the per-round ratios noa / RELION (goal: at most 0.2), the peak RSS of each (MiB), and the
largest |noa - RELION| of the two masks.

RELION searches a cube of (2 x 6 + 1)^3 neighbours around every voxel outside the mask, so it takes
minutes at 256^3; the default size is 128. Usage:

    python benchmarks/bench_mask.py                     # 128^3, 3 rounds
    python benchmarks/bench_mask.py --sizes 128,256     # the issue's 256^3 as well
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from processes import make_particle_map, paired, run

NOA = str(Path(sys.executable).parent / "noa")
EXTEND, SOFT_EDGE = 3, 6
DIFFERENCE = """
import sys, mrcfile, numpy as np
a, b = (mrcfile.open(p).data.astype(np.float64) for p in sys.argv[1:3])
print(float(np.abs(a - b).max()))
"""


def one_size(folder: Path, n: int, rounds: int) -> None:
    path, ours, theirs = folder / f"map{n}.mrc", folder / f"noa{n}.mrc", folder / f"relion{n}.mrc"
    make_particle_map(path, n)
    threshold = "0.2"  # takes the particle (see make_particle_map)
    noa_command = [NOA, "mask", str(path), str(ours), "--threshold", threshold, "--extend", str(EXTEND),
                   "--soft-edge", str(SOFT_EDGE)]
    relion_command = ["relion_mask_create", "--i", str(path), "--o", str(theirs), "--ini_threshold", threshold,
                      "--extend_inimask", str(EXTEND), "--width_soft_edge", str(SOFT_EDGE)]
    result = paired(noa_command, relion_command, rounds, outputs=(ours, theirs))
    run(noa_command, (ours,))  # each command removes both outputs first: RELION's last one is still there
    difference = subprocess.run([sys.executable, "-c", DIFFERENCE, str(ours), str(theirs)], check=True,
                                capture_output=True, text=True).stdout.strip()
    verdict = "met" if result.ratio <= 0.2 else "NOT met"
    print(f"{n:>4}^3{result.columns()}   {float(difference):.2e}   (goal <= 0.20: {verdict})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="128", help="map edges N, comma-separated (default 128)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds run in turns (default 3; the median is kept)")
    args = parser.parse_args()
    if shutil.which("relion_mask_create") is None:
        raise SystemExit("relion_mask_create not found: install RELION (apt-get install relion)")
    print(f"noa mask --extend {EXTEND} --soft-edge {SOFT_EDGE} vs relion_mask_create, median of {args.rounds} rounds")
    print("   box    noa (s)   RELION (s)   ratio  noa MiB  RELION MiB   max |noa - RELION|")
    with tempfile.TemporaryDirectory() as scratch:
        for n in (int(s) for s in args.sizes.split(",")):
            one_size(Path(scratch), n, args.rounds)


if __name__ == "__main__":
    main()

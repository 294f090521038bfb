"""Benchmark ``noa symmetrize`` against ``relion_image_handler --sym`` (RELION 3.1.3) on the same map, in one run.

Each size: a float32 map of N^3 voxels (300 smoothed points within a ball of radius 0.3 N, plus noise of
standard deviation 0.01), symmetrized with ``--sym G`` (default I1: 60 operators, 59 trilinear
interpolations of the whole map) by both, as processes (start-up and file writing included). They run in
turns, ``--rounds`` times (noa once untimed first, so the page cache holds the map for both); printed: the
median wall seconds of each, the median of the per-round ratios noa / RELION (goal: at most 0.5), the
peak RSS of each (MiB), and the largest |noa - RELION| inside the sphere of radius N//2 - 1 and over the
whole box, relative to the map's peak (noa transcribes RELION's rule at the faces; the box's figure is a
sample within 1e-6 of a face that RELION's 6- to 14-digit axes put on the other side, at a few corners).
RELION runs on one thread; noa's numba kernels on every core (``NUMBA_NUM_THREADS``). Usage:

    python benchmarks/bench_symmetrize.py                       # 128^3 and 256^3, I1, 3 rounds
    python benchmarks/bench_symmetrize.py --sizes 128 --sym O
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
DIFFERENCE = """
import sys, mrcfile, numpy as np
a, b, m = (mrcfile.open(p).data.astype(np.float64) for p in sys.argv[1:4])
n = a.shape[0]
z, y, x = np.ogrid[:n, :n, :n]
inside = (z - n // 2) ** 2 + (y - n // 2) ** 2 + (x - n // 2) ** 2 < (n // 2 - 1) ** 2
d = np.abs(a - b) / np.abs(m).max()
print(f"{d[inside].max():.1e} {d.max():.1e}")
"""


def one_size(folder: Path, n: int, group: str, rounds: int) -> None:
    path, ours, theirs = folder / f"map{n}.mrc", folder / f"noa{n}.mrc", folder / f"relion{n}.mrc"
    make_particle_map(path, n)
    noa_command = [NOA, "symmetrize", str(path), str(ours), "--sym", group]
    relion_command = ["relion_image_handler", "--i", str(path), "--o", str(theirs), "--sym", group]
    result = paired(noa_command, relion_command, rounds, outputs=(ours, theirs))
    run(noa_command, (ours,))  # each command removes both outputs first: RELION's last one is still there
    inside, whole = subprocess.run([sys.executable, "-c", DIFFERENCE, str(ours), str(theirs), str(path)], check=True,
                                   capture_output=True, text=True).stdout.split()
    verdict = "met" if result.ratio <= 0.5 else "NOT met"
    print(f"{n:>4}^3{result.columns()}   {inside:>9} {whole:>9}   (goal <= 0.50: {verdict})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="128,256", help="map edges N, comma-separated (default 128,256)")
    parser.add_argument("--sym", default="I1", help="point group (default I1)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds run in turns (default 3; the median is kept)")
    args = parser.parse_args()
    if shutil.which("relion_image_handler") is None:
        raise SystemExit("relion_image_handler not found: install RELION (apt-get install relion)")
    import numba

    print(f"noa symmetrize --sym {args.sym} vs relion_image_handler --sym {args.sym}, median of {args.rounds} rounds; "
          f"numba threads {numba.config.NUMBA_NUM_THREADS}, RELION 1")
    print("   box    noa (s)   RELION (s)   ratio  noa MiB  RELION MiB   |diff| in sphere, box (of the peak)")
    with tempfile.TemporaryDirectory() as scratch:
        for n in (int(s) for s in args.sizes.split(",")):
            one_size(Path(scratch), n, args.sym, args.rounds)


if __name__ == "__main__":
    main()

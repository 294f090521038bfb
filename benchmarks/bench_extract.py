"""noa extract against relion_preprocess --extract and dd (issue 43 item 5).

Writes MICS synthetic float32 micrographs of SIZE² pixels with PICKS particles each, then runs, in turns within one
run (ROUNDS rounds, each tool once per round): ``noa extract``, ``relion_preprocess --extract`` on the same
micrographs STAR and coordinate files, and ``dd`` reading the micrographs and writing the bytes of the stacks;
and ``noa start``: ``noa extract`` of one box from one micrograph, the fixed cost of a run (start-up, imports).
Prints each tool's median wall time, noa's ratios to RELION and to dd (and without its start-up), and the peak RSS
of each child (RUSAGE_CHILDREN, taken from a fresh process per run).

    .venv/bin/python benchmarks/bench_extract.py                      # 4096², 300 particles, box 256, 4 micrographs
    .venv/bin/python benchmarks/bench_extract.py --size 1024 --picks 50 --box 64 --mics 2 --rounds 3
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import mrcfile
import numpy as np
from processes import in_turns

NOA = str(Path(sys.executable).parent / "noa")


def make_project(folder: Path, mics: int, size: int, picks: int, box: int) -> None:
    rng = np.random.default_rng(0)
    (folder / "Mics").mkdir()
    names = []
    for i in range(mics):
        name = f"Mics/mic{i:03d}.mrc"
        with mrcfile.new(folder / name) as f:
            f.set_data(rng.normal(size=(size, size)).astype(np.float32))
            f.voxel_size = 1.0
        xy = rng.uniform(box // 2, size - box // 2, size=(picks, 2))
        (folder / f"Mics/mic{i:03d}_pick.star").write_text(
            "data_\nloop_\n_rlnCoordinateX\n_rlnCoordinateY\n" + "".join(f"{x:.2f} {y:.2f}\n" for x, y in xy))
        names.append(name)
    (folder / "mics.star").write_text(
        "data_optics\nloop_\n_rlnOpticsGroupName\n_rlnOpticsGroup\n_rlnMicrographPixelSize\n_rlnVoltage\n"
        "_rlnSphericalAberration\n_rlnAmplitudeContrast\nopticsGroup1 1 1.0 300 2.7 0.1\n\n"
        "data_micrographs\nloop_\n_rlnMicrographName\n_rlnOpticsGroup\n" + "".join(f"{n} 1\n" for n in names))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--picks", type=int, default=300)
    parser.add_argument("--box", type=int, default=256)
    parser.add_argument("--mics", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-extract-", dir=".") as scratch:
        folder = Path(scratch).resolve()
        make_project(folder, args.mics, args.size, args.picks, args.box)
        stack_bytes = args.picks * args.box * args.box * 4 + 1024
        inputs = sorted(str(p.relative_to(folder)) for p in folder.glob("Mics/*.mrc"))
        dd = ["sh", "-c", " && ".join(f"dd if={m} of=/dev/null bs=4M status=none && dd if=/dev/zero of=dd_{i}.mrcs "
                                      f"bs={stack_bytes} count=1 conv=fsync status=none"
                                      for i, m in enumerate(inputs))]
        tools = {
            "noa": [NOA, "extract", "mics.star", "--coord-suffix", "_pick.star", "--box", str(args.box), "--force",
                    "-o", "noa/parts.star", "--quiet"],
            "relion": ["relion_preprocess", "--i", "mics.star", "--coord_dir", "./", "--coord_suffix", "_pick.star",
                       "--part_dir", "Relion/", "--part_star", "relion.star", "--extract", "--extract_size",
                       str(args.box)],
            "dd": dd,
            "noa start": [NOA, "extract", inputs[0], "--coords", "one.txt", "--box", str(args.box), "--force", "-o",
                          "start/one.star", "--quiet"],
        }
        (folder / "one.txt").write_text(f"{args.size // 2} {args.size // 2}\n")
        (folder / "noa").mkdir()
        (folder / "start").mkdir()  # its own stack: not the one noa replaces
        if shutil.which("relion_preprocess") is None:
            del tools["relion"]
            print("relion_preprocess not found: RELION left out")
        print(f"{args.mics} micrographs {args.size}² float32, {args.picks} particles each, box {args.box}; "
              f"median of {args.rounds} rounds")
        medians, _ = in_turns(tools, args.rounds, folder)
        work = medians["noa"] - medians["noa start"]
        for other in ("relion", "dd"):
            if other in medians:
                print(f"  noa / {other}: {medians['noa'] / medians[other]:.2f}x   "
                      f"(without its start-up: {work / medians[other]:.2f}x)")


if __name__ == "__main__":
    main()

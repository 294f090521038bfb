"""noa tiltseries against dd copying the same bytes (issue 45: a 61-tilt 4096² series streams, peak RSS below
512 MiB, at >= 0.7x the speed of dd).

Writes a SerialEM-like stack of TILTS float32 tilts of SIZE² pixels (dose-symmetric angles, in acquisition order)
and its mdoc, then runs, in turns within one run (ROUNDS rounds, each tool once per round): ``noa tiltseries`` (the
stack sorted by angle, every file beside it), ``dd`` copying the stack's bytes into a new file (fsync'd, as noa's
outputs are), and ``noa start``: ``noa tiltseries`` of a 3-tilt 16² series, the fixed cost of a run (start-up,
imports). Each tool's outputs are removed (untimed) before each of its runs, so that both write a new file: dd into
the file it wrote before would truncate it first and fill the page cache with the pages it just freed, which on a
virtual machine cost a fraction of fresh ones (1 GiB written: 0.4 s of system time against 1.6-2.4 s), while noa
writes a temporary file beside its old output and removes that after its commit. Prints each tool's median wall
time, noa's ratio to dd (and without its start-up), and the peak RSS of each child (RUSAGE_CHILDREN, taken from a
fresh process per run).

    .venv/bin/python benchmarks/bench_tiltseries.py                     # 61 tilts of 4096², 4 GiB
    .venv/bin/python benchmarks/bench_tiltseries.py --size 1024 --rounds 3
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
from pathlib import Path

import mrcfile
import numpy as np
from processes import in_turns

NOA = str(Path(sys.executable).parent / "noa")


def dose_symmetric(tilts: int, step: float = 3.0) -> list[float]:
    """Angles in acquisition order: 0, then +-step, +-2 step, ... alternating (Hagen's scheme, simplified)."""
    angles = [0.0]
    k = 1
    while len(angles) < tilts:
        angles.extend(a for a in (k * step, -k * step) if len(angles) < tilts)
        k += 1
    return angles


def make_series(folder: Path, name: str, tilts: int, size: int) -> None:
    """``name``.mrc (float32 tilts, written a tilt at a time) and ``name``.mrc.mdoc, as SerialEM writes them."""
    rng = np.random.default_rng(0)
    with mrcfile.new_mmap(folder / f"{name}.mrc", (tilts, size, size), mrc_mode=2) as stack:
        stack.set_image_stack()
        stack.voxel_size = 2.0
        for z in range(tilts):
            stack.data[z] = rng.normal(size=(size, size)).astype(np.float32)
    sections = "".join(f"[ZValue = {z}]\nTiltAngle = {angle}\nExposureDose = 3\nPixelSpacing = 2\n"
                       f"DateTime = 01-Jan-24  10:{z // 60:02d}:{z % 60:02d}\n\n"
                       for z, angle in enumerate(dose_symmetric(tilts)))
    (folder / f"{name}.mrc.mdoc").write_text(
        f"PixelSpacing = 2\nImageFile = {name}.mrc\nImageSize = {size} {size}\nDataMode = 2\n\n"
        "[T = SerialEM: bench]\n\n[T =     Tilt axis angle = 85.3, binning = 1  spot = 8  camera = 1]\n\n" + sections)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--tilts", type=int, default=61)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-tiltseries-", dir=".") as scratch:
        folder = Path(scratch).resolve()
        # written by a child: a process starts with its parent's peak RSS, which the tools' figures would then show
        spawn = multiprocessing.get_context("spawn")
        for name, tilts, size in (("TS", args.tilts, args.size), ("tiny", 3, 16)):
            maker = spawn.Process(target=make_series, args=(folder, name, tilts, size))
            maker.start()
            maker.join()
            if maker.exitcode != 0:
                raise SystemExit(f"writing the {name} series failed")
        tools = {
            "noa": [NOA, "tiltseries", "TS.mrc.mdoc", "-o", "out.st", "--quiet"],
            "dd": ["dd", "if=TS.mrc", "of=dd.st", "bs=4M", "conv=fsync", "status=none"],
            "noa start": [NOA, "tiltseries", "tiny.mrc.mdoc", "-o", "tiny_out.st", "--quiet"],
        }
        beside = (".st", ".rawtlt", ".tlt", ".st.mdoc", ".star")  # noa's outputs: the stack and its side files
        outputs = {"noa": [folder / f"out{suffix}" for suffix in beside], "dd": [folder / "dd.st"],
                   "noa start": [folder / f"tiny_out{suffix}" for suffix in beside]}
        gib = args.tilts * args.size * args.size * 4 / (1 << 30)
        print(f"{args.tilts} tilts {args.size}² float32 ({gib:.2f} GiB); median of {args.rounds} rounds")
        medians, _ = in_turns(tools, args.rounds, folder, outputs)
        work = medians["noa"] - medians["noa start"]
        print(f"  dd / noa (speed of noa relative to dd): {medians['dd'] / medians['noa']:.2f}x   "
              f"(without its start-up: {medians['dd'] / work:.2f}x)")


if __name__ == "__main__":
    main()

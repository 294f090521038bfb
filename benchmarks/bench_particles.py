"""Operations on a particle STAR against the same operation on one .mrcs holding the same particles (issue 42:
goal >= 0.8x its speed, i.e. a time ratio STAR / stack <= 1.25).

    python benchmarks/bench_particles.py CACHE_DIR [--stacks 200] [--per-stack 50] [--box 128] [--rounds 3]

A RELION 3.1 particle set is cached in CACHE_DIR: ``--stacks`` stacks of ``--per-stack`` float32 particles of
``--box``^2, a particles.star naming them in row order (as relion_preprocess writes it), and all.mrcs, the same
particles in one stack. Each case runs ``noa OP particles.star out.star`` and ``noa OP all.mrcs out.mrcs`` in
paired rounds; printed: median seconds of both, the ratio (median of the rounds' ratios) and the peak RSS of
both. The cases: bin --factor 2 (reading is most of the work), normalize (RELION's background normalisation),
stats (a report, nothing written), and the rows shuffled (every particle a seek of its own).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from processes import paired

NOA = str(Path(sys.executable).parent / "noa")

MAKE = """
import sys, mrcfile, numpy as np
folder, stacks, per, box = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(0)
with mrcfile.new_mmap(f"{folder}/all.mrcs", (stacks * per, box, box), mrc_mode=2, overwrite=True) as whole:
    whole.set_image_stack()
    whole.voxel_size = 1.5
    for s in range(stacks):
        data = rng.normal(0, 1, (per, box, box)).astype(np.float32)
        whole.data[s * per:(s + 1) * per] = data
        with mrcfile.new(f"{folder}/Particles/mic{s:05d}.mrcs", data, overwrite=True) as m:
            m.set_image_stack()
            m.voxel_size = 1.5
"""


def make_set(folder: Path, stacks: int, per: int, box: int) -> None:
    if (folder / "particles.star").exists():
        return
    import subprocess

    (folder / "Particles").mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-c", MAKE, str(folder), str(stacks), str(per), str(box)], check=True)
    rows = stacks * per
    names = [f"{i % per + 1:06d}@Particles/mic{i // per:05d}.mrcs" for i in range(rows)]
    head = ("\n# version 30001\n\ndata_optics\n\nloop_ \n_rlnOpticsGroupName #1 \n_rlnOpticsGroup #2 \n"
            "_rlnImagePixelSize #3 \n_rlnImageSize #4 \n_rlnImageDimensionality #5 \n"
            f"opticsGroup1 1 1.500000 {box} 2 \n \n\n# version 30001\n\ndata_particles\n\nloop_ \n"
            "_rlnImageName #1 \n_rlnOpticsGroup #2 \n_rlnDefocusU #3 \n")
    rng = np.random.default_rng(1)
    body = "".join(f"{name} 1 {d:12.6f} \n" for name, d in zip(names, rng.uniform(5e3, 3e4, rows)))
    (folder / "particles.star").write_text(head + body + " \n")
    order = rng.permutation(rows)
    shuffled = "".join(f"{names[i]} 1 1.0 \n" for i in order)
    (folder / "shuffled.star").write_text(head + shuffled + " \n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("cache", type=Path)
    parser.add_argument("--stacks", type=int, default=200)
    parser.add_argument("--per-stack", type=int, default=50)
    parser.add_argument("--box", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    folder = args.cache / f"particles_{args.stacks}x{args.per_stack}x{args.box}"
    make_set(folder, args.stacks, args.per_stack, args.box)
    gib = args.stacks * args.per_stack * args.box ** 2 * 4 / 2**30
    print(f"{args.stacks} stacks x {args.per_stack} particles of {args.box}^2 float32 ({gib:.2f} GiB); "
          f"median of {args.rounds} paired rounds")
    print(f"{'case':<28}{'STAR s':>9}{'.mrcs s':>13}{'ratio':>8}{'STAR MiB':>10}{'.mrcs MiB':>11}")
    out_star, out_stack = folder / "out.star", folder / "out.mrcs"
    cases = [("bin --factor 2", ["bin"], ["--factor", "2"], "particles.star"),
             ("normalize --bg-radius", ["normalize"], ["--bg-radius", str(args.box // 3)], "particles.star"),
             ("stats", ["stats"], [], "particles.star"),
             ("bin, rows shuffled", ["bin"], ["--factor", "2"], "shuffled.star")]
    for label, op, options, source in cases:
        writes = op[0] != "stats"
        project = ["--project-dir", str(folder)]
        star_cmd = [NOA, *op, str(folder / source), *([str(out_star)] if writes else []), *options, *project,
                    "--force"] if writes else [NOA, *op, str(folder / source), *project]
        stack_cmd = [NOA, *op, str(folder / "all.mrcs"), *([str(out_stack)] if writes else []), *options, "--force"
                     ] if writes else [NOA, *op, str(folder / "all.mrcs")]
        result = paired(star_cmd, stack_cmd, args.rounds)
        spread = " ".join(f"{t / y:.2f}" for t, y in zip(result.times, result.yardsticks))
        print(f"{label:<28}{result.columns()}   rounds: {spread}")


if __name__ == "__main__":
    main()

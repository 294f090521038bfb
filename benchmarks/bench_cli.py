"""Start-up: each `noa` command on a small file against the mrcfile + NumPy one-liner that does the same
job, as pipelines run them (one process per file).

Every round runs each noa command, then its yardstick right after it (paired in turns, so both share the
machine's noise); a row's ratio is the median of its per-round ratios (noa / one-liner; goals of issue 27:
at most 1.5 for the stack commands, 2 for ewise and the Fourier operations). The file is a 3 x 64 x 64
float32 image stack. noa's bytecode is compiled first, as an install compiles it (`pip install` does; an
editable checkout with PYTHONDONTWRITEBYTECODE set would compile noa's sources in every process).

`--crossover` measures instead where NumPy stops paying (noa_core.compute.compute_path.SMALL_BYTES): `noa copy`
and `noa stats` of float32 volumes of growing size with NOA_COMPUTE=numpy and NOA_COMPUTE=numba, paired
in turns, each a whole process (numba's import and kernel loading included, from a warm cache).

    python benchmarks/bench_cli.py [--rounds 7] [--crossover]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from processes import make_volume, paired

ROOT = Path(__file__).resolve().parents[1]
NOA = str(Path(sys.executable).parent / "noa")
PY = sys.executable

ONE_LINERS = {
    "stats": "import sys, numpy, mrcfile; d = mrcfile.read(sys.argv[1]); print(d.min(), d.max(), d.mean(), d.std())",
    "info": ("import sys, mrcfile\nwith mrcfile.open(sys.argv[1], header_only=True) as f:\n"
             "    h = f.header; print(h.nx, h.ny, h.nz, h.mode, f.voxel_size)"),
    "copy": "import sys, mrcfile; mrcfile.write(sys.argv[2], mrcfile.read(sys.argv[1]), overwrite=True)",
    "permute": ("import sys, numpy as np, mrcfile; d = mrcfile.read(sys.argv[1])\n"
                "mrcfile.write(sys.argv[2], np.ascontiguousarray(d.transpose(0, 2, 1)), overwrite=True)"),
    "flip": ("import sys, numpy as np, mrcfile; d = mrcfile.read(sys.argv[1])\n"
             "mrcfile.write(sys.argv[2], np.ascontiguousarray(d[..., ::-1]), overwrite=True)"),
    "bin": ("import sys, numpy as np, mrcfile; d = mrcfile.read(sys.argv[1]); n, h, w = d.shape\n"
            "b = d.reshape(n, h // 2, 2, w // 2, 2).mean(axis=(2, 4), dtype=np.float64).astype(np.float32)\n"
            "mrcfile.write(sys.argv[2], b, overwrite=True)"),
    "sections": ("import sys, numpy as np, mrcfile; d = mrcfile.read(sys.argv[1])\n"
                 "mrcfile.write(sys.argv[2], np.ascontiguousarray(d[[0, 2]]), overwrite=True)"),
    "header": "import sys, mrcfile\nwith mrcfile.open(sys.argv[1], 'r+') as f:\n    f.voxel_size = 1.5",
    "ewise": ("import sys, numpy as np, mrcfile; a = mrcfile.read(sys.argv[1]); b = mrcfile.read(sys.argv[3])\n"
              "mrcfile.write(sys.argv[2], a * b, overwrite=True)"),
    "filter": ("import sys, numpy as np, mrcfile; d = mrcfile.read(sys.argv[1]); h, w = d.shape[1:]\n"
               "k = np.hypot(*np.meshgrid(np.fft.fftfreq(h), np.fft.rfftfreq(w), indexing='ij'))\n"
               "f = np.fft.irfft2(np.fft.rfft2(d) * (k <= 1.0 / 8), s=(h, w)).astype(np.float32)\n"
               "mrcfile.write(sys.argv[2], f, overwrite=True)"),
    "powerspectrum": ("import sys, numpy as np, mrcfile; d = mrcfile.read(sys.argv[1])\n"
                      "p = np.fft.fftshift(np.abs(np.fft.fft2(d)) ** 2 / d[0].size, axes=(1, 2)).astype(np.float32)\n"
                      "mrcfile.write(sys.argv[2], p, overwrite=True)"),
}


def rows(folder: Path, small: Path, other: Path) -> list[tuple[str, list[str], list[str], float | None]]:
    out = str(folder / "out.mrcs")

    def noa(*args: str) -> list[str]:
        return [NOA, *args]

    def script(name: str, *args: str) -> list[str]:
        return [PY, "-c", ONE_LINERS[name], *args]

    s = str(small)
    return [
        ("noa stats", noa("stats", s), script("stats", s), 1.5),
        ("noa info", noa("info", s), script("info", s), 1.5),
        ("noa copy", noa("copy", s, out, "-f", "-q"), script("copy", s, out), 1.5),
        ("noa permute --axes 0,1,3,2", noa("permute", s, out, "--axes", "0,1,3,2", "-f", "-q"),
         script("permute", s, out), 1.5),
        ("noa flip --axis x", noa("flip", s, out, "--axis", "x", "-f", "-q"), script("flip", s, out), 1.5),
        ("noa bin --factor 2", noa("bin", s, out, "--factor", "2", "-f", "-q"), script("bin", s, out), 1.5),
        ("noa sections --keep 0,2", noa("sections", s, out, "--keep", "0,2", "-f", "-q"), script("sections", s, out),
         1.5),
        ("noa header --pixel-size 1.5", noa("header", s, "--pixel-size", "1.5"), script("header", s), 1.5),
        ('noa ewise "a * b"', noa("ewise", "a * b", s, str(other), "--output", out, "-f", "-q"),
         script("ewise", s, out, str(other)),
         2.0),
        ("noa filter --lowpass", noa("filter", s, out, "--lowpass", "8", "--angpix", "1", "-f", "-q"),
         script("filter", s, out), 2.0),
        ("noa powerspectrum", noa("powerspectrum", s, out, "-f", "-q"), script("powerspectrum", s, out), 2.0),
        ("noa --help (vs python -c pass)", noa("--help"), [PY, "-c", "pass"], None),
        ("noa permute --help (vs pass)", noa("permute", "--help"), [PY, "-c", "pass"], None),
    ]


def small_stack(path: Path) -> None:
    subprocess.run([PY, "-c", "import sys, numpy as np, mrcfile\n"
                    "d = np.random.default_rng(0).normal(size=(3, 64, 64)).astype(np.float32)\n"
                    "with mrcfile.new(sys.argv[1], d, overwrite=True) as f:\n"
                    "    f.set_image_stack(); f.voxel_size = 1.0",
                    str(path)], check=True)


def compare(args: argparse.Namespace, folder: Path) -> None:
    small, other = folder / "small.mrcs", folder / "other.mrcs"
    small_stack(small)
    small_stack(other)
    print(f"3 x 64 x 64 float32 stack; {os.cpu_count()} cores; {args.rounds} rounds paired in turns; "
          "ratio = noa / mrcfile + NumPy one-liner")
    print(f"{'command':<30}{'noa s':>9}{'one-liner s':>13}{'ratio':>8}{'noa MiB':>10}{'script MiB':>11}"
          f"{'spread':>14}{'goal':>6}  verdict")
    for name, command, yardstick, goal in rows(folder, small, other):
        result = paired(command, yardstick, args.rounds)
        ratios = sorted(t / y for t, y in zip(result.times, result.yardsticks))
        verdict = "-" if goal is None else ("met" if result.ratio <= goal else "MISSED")
        print(f"{name:<30}{result.columns(3)}{f'{ratios[0]:.2f}-{ratios[-1]:.2f}':>14}{goal or '-':>6}  {verdict}")


def crossover(args: argparse.Namespace, folder: Path) -> None:
    print(f"noa copy and noa stats, NOA_COMPUTE=numpy vs numba (each a whole process); {os.cpu_count()} cores; "
          f"{args.rounds} rounds paired in turns; ratio = numpy path / numba path (above 1: numba pays)")
    print(f"{'MiB':>6}  {'command':<10}{'numpy s':>9}{'numba s':>13}{'ratio':>8}")
    for mib in (1, 4, 16, 32, 64, 128):
        volume = folder / f"vol{mib}.mrc"
        side = 512
        make_volume(volume, (max(1, mib * (1 << 20) // (4 * side * side)), side, side))
        for name, extra in (("copy", [str(folder / "out.mrc"), "-f", "-q"]), ("stats", [])):
            def command(path: str) -> str:
                return f"NOA_COMPUTE={path} {NOA} {name} {volume} {' '.join(extra)}"

            result = paired(command("numpy"), command("numba"), args.rounds)
            print(f"{mib:>6}  {name:<10}{statistics.median(result.times):>9.3f}"
                  f"{statistics.median(result.yardsticks):>13.3f}{result.ratio:>8.2f}")
        volume.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--crossover", action="store_true", help="measure where the numba path starts to pay")
    parser.add_argument("--folder", type=Path, default=None, help="where the files go (default: a temporary folder)")
    args = parser.parse_args()
    subprocess.run([PY, "-m", "compileall", "-q", str(ROOT / "noa_core"), str(ROOT / "noa_cli"), str(ROOT / "server")],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run([NOA, "warmup", "-q"], check=True)  # a warm kernel cache: what the numba path loads
    folder = Path(tempfile.mkdtemp(prefix="noa-bench-cli-", dir=args.folder))
    try:
        (crossover if args.crossover else compare)(args, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Reading and writing a particles STAR of a million rows (RELION 3.1: optics and particles tables, 26 columns
as a refinement writes them), paired in turns with the starfile library (teamtomo) doing the same.

Each round times, in this process, noa reading the file (noa_core.io.star.read: the text and its index) and
writing it back whole (byte for byte, atomically, fsync included), then starfile.read + starfile.write of the
same file; and noa_core.particles.select keeping half the rows by a condition. The figures are the medians of
the rounds; the ratio is noa's time over starfile's (below 1 noa is faster).

    python benchmarks/bench_particle_tables.py [--rows 1000000] [--rounds 3] [--folder DIR] [--no-starfile]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

OPTICS_LABELS = ["rlnOpticsGroupName", "rlnOpticsGroup", "rlnMtfFileName", "rlnMicrographOriginalPixelSize",
                 "rlnVoltage", "rlnSphericalAberration", "rlnAmplitudeContrast", "rlnImagePixelSize", "rlnImageSize",
                 "rlnImageDimensionality"]
OPTICS_ROW = "opticsGroup1 1 mtf_k2_200kV.star 0.885000 200.000000 1.400000 0.100000 1.770000 64 2"


def head(name: str, labels: list[str]) -> str:
    """A loop's lines before its rows, as RELION writes them (a blank after each word)."""
    return f"\n# version 30001\n\ndata_{name}\n\nloop_ \n" + "".join(f"_{label} #{i + 1} \n"
                                                                  for i, label in enumerate(labels))


LABELS = ["rlnCoordinateX", "rlnCoordinateY", "rlnClassNumber", "rlnAnglePsi", "rlnAutopickFigureOfMerit",
          "rlnImageName", "rlnMicrographName", "rlnOpticsGroup", "rlnCtfMaxResolution", "rlnCtfFigureOfMerit",
          "rlnDefocusU", "rlnDefocusV", "rlnDefocusAngle", "rlnCtfBfactor", "rlnCtfScalefactor", "rlnPhaseShift",
          "rlnGroupNumber", "rlnAngleRot", "rlnAngleTilt", "rlnOriginXAngst", "rlnOriginYAngst",
          "rlnNormCorrection", "rlnLogLikeliContribution", "rlnMaxValueProbDistribution",
          "rlnNrOfSignificantSamples", "rlnRandomSubset"]


def generate(path: Path, rows: int) -> None:
    """A particles STAR of ``rows`` rows, 100 per micrograph and stack, values as RELION formats them."""
    rng = np.random.default_rng(0)

    def fixed(values):
        return np.char.mod("%12.6f", values)

    with open(path, "w") as out:
        out.write(head("optics", OPTICS_LABELS) + OPTICS_ROW + " \n \n" + head("particles", LABELS))
        for start in range(0, rows, 100_000):
            k = min(100_000, rows - start)
            index = np.arange(start, start + k)
            mic = index // 100
            columns = [
                fixed(rng.uniform(0, 4000, k)), fixed(rng.uniform(0, 4000, k)),
                np.char.mod("%12d", rng.integers(1, 10, k)),
                fixed(rng.uniform(-180, 180, k)), fixed(rng.uniform(0, 1, k)),
                np.char.add(np.char.mod("%06d@", index % 100 + 1),
                            np.char.mod("Extract/job007/Movies/mic_%05d.mrcs", mic)),
                np.char.mod("MotionCorr/job002/Movies/mic_%05d.mrc", mic), np.char.mod("%12d", np.ones(k, int)),
                fixed(rng.uniform(3, 6, k)), fixed(rng.uniform(0, 1, k)), fixed(rng.uniform(5000, 30000, k)),
                fixed(rng.uniform(5000, 30000, k)), fixed(rng.uniform(-90, 90, k)), fixed(np.zeros(k)),
                fixed(np.ones(k)),
                fixed(np.zeros(k)), np.char.mod("%12d", mic % 50 + 1), fixed(rng.uniform(-180, 180, k)),
                fixed(rng.uniform(0, 180, k)), fixed(rng.uniform(-5, 5, k)), fixed(rng.uniform(-5, 5, k)),
                fixed(rng.uniform(0.5, 1.5, k)), fixed(rng.uniform(1e5, 2e5, k)), fixed(rng.uniform(0, 1, k)),
                np.char.mod("%12d", rng.integers(1, 20, k)), np.char.mod("%12d", index % 2 + 1)]
            lines = columns[0]
            for column in columns[1:]:
                lines = np.char.add(np.char.add(lines, " "), column)
            out.write("\n".join(lines.tolist()) + " \n")
        out.write(" \n")


def noa_read_write(src: Path, dst: Path) -> tuple[float, float]:
    from noa_core.io import star

    start = time.perf_counter()
    table = star.read(src)
    read = time.perf_counter() - start
    star.write(dst, table.edited(), overwrite=True)
    return read, time.perf_counter() - start


def noa_select(src: Path, dst: Path) -> float:
    from noa_core.particles.select import select

    start = time.perf_counter()
    select(src, dst, where="rlnRandomSubset == 1", overwrite=True)
    return time.perf_counter() - start


def starfile_read_write(src: Path, dst: Path) -> tuple[float, float]:
    import starfile

    start = time.perf_counter()
    tables = starfile.read(src, always_dict=True)
    read = time.perf_counter() - start
    starfile.write(tables, dst, overwrite=True)
    return read, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--folder", type=Path, default=None, help="Where the files go (default: a temporary folder).")
    parser.add_argument("--no-starfile", action="store_true", help="Time noa alone (starfile takes ~40 s a round).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.folder) as scratch:
        folder = Path(scratch)
        src = folder / "particles.star"
        start = time.perf_counter()
        generate(src, args.rows)
        print(f"generated {src.stat().st_size / 2**20:.0f} MiB, {args.rows} rows in "
              f"{time.perf_counter() - start:.1f} s", flush=True)
        from noa_core.io import star

        star.read(src)  # the kernels loaded from numba's cache, the file in the page cache
        times: dict[str, list[float]] = {"noa read": [], "noa read+write": [], "noa select half": [],
                                         "starfile read": [], "starfile read+write": [], "ratio": []}
        for round_ in range(args.rounds):
            read, total = noa_read_write(src, folder / "noa.star")
            assert (folder / "noa.star").stat().st_size == src.stat().st_size
            times["noa read"].append(read)
            times["noa read+write"].append(total)
            times["noa select half"].append(noa_select(src, folder / "half.star"))
            line = f"round {round_ + 1}: noa read {read:.2f} s, read+write {total:.2f} s"
            if not args.no_starfile:
                read_sf, total_sf = starfile_read_write(src, folder / "starfile.star")
                times["starfile read"].append(read_sf)
                times["starfile read+write"].append(total_sf)
                times["ratio"].append(total / total_sf)
                line += f"; starfile read {read_sf:.2f} s, read+write {total_sf:.2f} s"
            print(line, flush=True)
        print(f"medians of {args.rounds} rounds, {args.rows} rows:")
        for name, values in times.items():
            if values:
                print(f"  {name:22s} {statistics.median(values):8.3f}" + ("" if name == "ratio" else " s"))


if __name__ == "__main__":
    main()

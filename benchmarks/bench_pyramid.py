"""An OME-Zarr pyramid from one read of an MRC volume, end to end as a user runs it: a float32 volume of --shape
Z,Y,X (default 512,1024,1024: 2 GiB) to five levels (issue 46, item 1: >= 0.5x the speed of dd, <= 512 MiB).

Rows, each paired in turns with its yardstick (median of the per-round ratios; below 1 is faster):

- ``noa --levels 5``: ``noa copy v.mrc p.ome.zarr --levels 5`` (NGFF 0.4, zarr v2, Blosc lz4; every level halving
  z, y and x by the mean of each 2x2x2 box, made from the tile just read), against ``dd if=v.mrc of=dd.out bs=16M
  conv=fsync`` (read the input, write it, make it durable).
- ``ome-zarr-py``: ``ome_zarr.writer.write_image`` with its default scaler (five levels; NGFF 0.4) given the volume
  as a Dask array over the MRC file's memory map, against ``noa --levels 5`` measured right before it in the same
  round (``--no-ome-zarr-py`` leaves it out).

Peak resident memory of each process comes from wait4's rusage (the input is read, not mapped, by noa and dd).

    python benchmarks/bench_pyramid.py [--shape 512,1024,1024] [--rounds 3] [--folder DIR] [--no-ome-zarr-py]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import zarr
from processes import make_volume, paired, run

NOA = str(Path(sys.executable).parent / "noa")

# ome-zarr-py's writer as its documentation shows it: the default scale factors (2, 4, 8, 16) and method
OME_ZARR_PY = """
import sys, dask.array, mrcfile, zarr
from ome_zarr.writer import write_image
data = dask.array.from_array(mrcfile.mmap(sys.argv[1], mode="r").data, chunks=(16, 1024, 1024))
write_image(data, zarr.open_group(sys.argv[2], mode="w", zarr_format=2), axes="zyx")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="512,1024,1024", help="Z,Y,X of the float32 volume")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--folder", type=Path, default=None, help="where the files go (default: a temporary folder)")
    parser.add_argument("--no-ome-zarr-py", action="store_true", help="leave ome-zarr-py's writer out")
    args = parser.parse_args()
    shape = tuple(int(v) for v in args.shape.split(","))
    if len(shape) != 3 or min(shape) < 1:
        raise SystemExit(f"--shape: {args.shape!r} is not Z,Y,X")
    folder = Path(tempfile.mkdtemp(prefix="bench-pyramid-", dir=args.folder))
    try:
        source = folder / "v.mrc"
        make_volume(source, shape, varied=True)
        pyramid = folder / "p.ome.zarr"
        noa = [NOA, "copy", str(source), str(pyramid), "--levels", "5"]
        dd = f"dd if={source} of={folder / 'dd.out'} bs=16M conv=fsync status=none"
        against_dd = paired(noa, dd, args.rounds, [pyramid, folder / "dd.out"])
        nbytes = 4 * shape[0] * shape[1] * shape[2]
        print(f"float32 volume {shape} ({nbytes / 2**20:.0f} MiB) to 5 levels, {args.rounds} rounds in turns, "
              "median of per-round ratios")
        print(f"{'row':<16}{'median s':>9}{'yardstick s':>13}{'ratio':>8}{'peak MiB':>10}{'yard. MiB':>11}  yardstick")
        print(f"{'noa --levels 5':<16}{against_dd.columns()}  dd bs=16M conv=fsync (speed vs dd: "
              f"{1 / against_dd.ratio:.2f}x)")
        if not args.no_ome_zarr_py:
            other = folder / "o.ome.zarr"
            ome_zarr_py = [sys.executable, "-c", OME_ZARR_PY, str(source), str(other)]
            times, noa_times, peaks, noa_peaks = [], [], [], []
            for _ in range(args.rounds):
                t_noa, rss_noa = run(noa, [pyramid])
                t, rss = run(ome_zarr_py, [other])
                noa_times.append(t_noa)
                times.append(t)
                noa_peaks.append(rss_noa)
                peaks.append(rss)
            ratio = statistics.median(t / n for t, n in zip(times, noa_times))
            print(f"{'ome-zarr-py':<16}{statistics.median(times):>9.2f}{statistics.median(noa_times):>13.2f}"
                  f"{ratio:>8.2f}{max(peaks):>10.0f}{max(noa_peaks):>11.0f}  noa --levels 5")
            group = zarr.open_group(str(other), mode="r")
            print("ome-zarr-py levels:", [group[k].shape for k in sorted(group.array_keys())])
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()

"""OME-Zarr copies against an MRC copy of the same volume, end to end as a user runs them: a float32
volume of --shape Z,Y,X (default 256,1024,1024: 1 GiB).

Rows, each paired in turns with its yardstick (the plain MRC -> MRC copy by noa, measured right
after it in the same round); a ratio is the median of the per-round ratios (below 1 is faster):

- ``mrc -> ome.zarr``: ``noa copy v.mrc out.ome.zarr`` (NGFF 0.4, zarr v2, Blosc lz4 chunks).
- ``ome.zarr -> mrc``: ``noa copy v.ome.zarr out.mrc`` (decoded chunk by chunk into a mapped file).
  ``mrc -> ome.zarr`` writes each tile straight into its chunks.
- ``zarr script``: the same MRC -> OME-Zarr job scripted with mrcfile and zarr (the same chunks and
  codec, one block of whole chunks at a time), set against ``mrc -> ome.zarr`` rather than the MRC copy.

Peak resident memory of each process comes from wait4's rusage: both noa directions stay bounded
(neither loads the volume).

    python benchmarks/bench_omezarr.py [--shape 256,1024,1024] [--rounds 3] [--folder DIR]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from processes import make_volume, run

NOA = str(Path(sys.executable).parent / "noa")
PY = sys.executable

# The job without noa: chunks and codec as noa writes them, NGFF 0.4 metadata, one block at a time.
ZARR = """
import sys, shutil, mrcfile, numcodecs, zarr
from noa_core.io.omezarr import default_chunks, _blocks, BLOCK_BYTES
data = mrcfile.mmap(sys.argv[1], mode="r").data
shutil.rmtree(sys.argv[2], ignore_errors=True)
chunks = default_chunks(data.shape, 4)
group = zarr.open_group(sys.argv[2], mode="w", zarr_format=2)
array = group.create_array("0", shape=data.shape, chunks=chunks, dtype="float32",
                           compressors=numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE))
for block in _blocks(data.shape, chunks, 4, BLOCK_BYTES):
    array[block] = data[block]
axes = [{"name": a, "type": "space", "unit": "angstrom"} for a in "zyx"]
group.attrs["multiscales"] = [{"version": "0.4", "axes": axes, "datasets": [
    {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1.5, 1.5, 1.5]}]}]}]
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="256,1024,1024", help="Z,Y,X of the float32 volume")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--folder", type=Path, default=None, help="where the files go (default: a temporary folder)")
    args = parser.parse_args()
    shape = tuple(int(v) for v in args.shape.split(","))
    if len(shape) != 3 or min(shape) < 1:
        raise SystemExit(f"--shape: {args.shape!r} is not Z,Y,X")
    folder = Path(tempfile.mkdtemp(prefix="bench-omezarr-", dir=args.folder))
    try:
        source = folder / "v.mrc"
        make_volume(source, tuple(int(n) for n in args.shape.split(",")), varied=True)
        subprocess.run([NOA, "copy", str(source), str(folder / "v.ome.zarr")], check=True, capture_output=True)
        rows = {
            "mrc -> ome.zarr": [NOA, "copy", str(source), str(folder / "out.ome.zarr"), "-f"],
            "ome.zarr -> mrc": [NOA, "copy", str(folder / "v.ome.zarr"), str(folder / "out2.mrc"), "-f"],
            "zarr script": [PY, "-c", ZARR, str(source), str(folder / "script.ome.zarr")],
        }
        yardstick = [NOA, "copy", str(source), str(folder / "out.mrc"), "-f"]
        # every command writes to a path that does not exist (removed untimed before it): replacing an
        # output of the same size costs differently on each side (memory the host backs anew, see bench_files)
        outputs = {"mrc -> ome.zarr": folder / "out.ome.zarr", "ome.zarr -> mrc": folder / "out2.mrc",
                   "zarr script": folder / "script.ome.zarr"}
        ratios: dict[str, list[float]] = {name: [] for name in rows}
        times: dict[str, list[float]] = {name: [] for name in [*rows, "mrc -> mrc"]}
        peaks: dict[str, int] = dict.fromkeys(times, 0)
        for _ in range(args.rounds):
            measured = {}
            for name, command in rows.items():
                if name == "zarr script":  # set against noa's own OME-Zarr copy, measured right before it
                    t_noa, rss = run(rows["mrc -> ome.zarr"], [outputs["mrc -> ome.zarr"]])
                    t_script, rss_script = run(command, [outputs[name]])
                    measured[name] = t_script
                    ratios[name].append(t_noa / t_script)
                    peaks[name] = max(peaks[name], rss_script)
                    times[name].append(t_script)
                    continue
                t, rss = run(command, [outputs[name]])
                t_ref, rss_ref = run(yardstick, [folder / "out.mrc"])
                ratios[name].append(t / t_ref)
                times[name].append(t)
                times["mrc -> mrc"].append(t_ref)
                peaks[name] = max(peaks[name], rss)
                peaks["mrc -> mrc"] = max(peaks["mrc -> mrc"], rss_ref)
        nbytes = 4 * shape[0] * shape[1] * shape[2]
        print(f"float32 volume {shape} ({nbytes / 2**20:.0f} MiB), {args.rounds} rounds, median of per-round ratios")
        print(f"{'row':<18}{'median s':>10}{'peak RSS MiB':>14}  ratio")
        for name in [*rows, "mrc -> mrc"]:
            against = "noa / zarr script" if name == "zarr script" else "/ noa mrc -> mrc copy"
            ratio = f"{statistics.median(ratios[name]):.2f} {against}" if name in ratios else "(yardstick)"
            print(f"{name:<18}{statistics.median(times[name]):>10.2f}{peaks[name]:>14.0f}  {ratio}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()

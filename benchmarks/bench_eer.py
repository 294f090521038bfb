"""EER movie -> fractions of MRC with a gain: noa against a tifffile + imagecodecs + NumPy script doing the same.

    python benchmarks/bench_eer.py CACHE_DIR [--frames 1000] [--size 4096] [--group 40] [--dose 0.02]
                                   [--pages 100000] [--upsampling 1 2]

A synthetic movie (``--frames`` frames of ``--size``^2 pixels at ``--dose`` events per pixel per frame; 50
distinct frames repeated, which costs the decoders as much as distinct ones) and a .gain reference are
cached in CACHE_DIR. Each run writes float32 fractions (counts x gain), at each ``--upsampling``; the script
is what users write today: each page decoded by tifffile (imagecodecs' eer_decode), summed in NumPy,
multiplied by the gain, written with mrcfile. Printed: median seconds of 3 paired rounds, the ratio noa /
script (goal <= 0.5; the median of the rounds' ratios, each round's ratio below it: the spread) and peak RSS
in MiB (goal <= 512). First, ``noa info`` on a movie of ``--pages`` pages of 4 x 4 pixels, which reads only
the pages' table of strips: seconds and peak RSS (goal: about a second, tens of MiB).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import tifffile

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "io"))
from eer_encoder import encode_frame, random_frame, write_eer
from processes import paired, run

SCRIPT = """
import sys, mrcfile, numpy as np, tifffile
path, gain_path, out, group, superres = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
gain = tifffile.imread(gain_path).astype(np.float32)
factor = 1 << superres
gain = np.repeat(np.repeat(gain, factor, 0), factor, 1)
with tifffile.TiffFile(path, superres=superres) as tif:
    pages = tif.pages
    count = len(pages) // group
    with mrcfile.new_mmap(out, (count,) + gain.shape, mrc_mode=2, overwrite=True) as mrc:
        for i in range(count):
            total = np.zeros(gain.shape, np.uint16)
            for page in pages[i * group:(i + 1) * group]:
                total += page.asarray()
            mrc.data[i] = total * gain
"""


def make_movie(folder: Path, frames: int, size: int, dose: float) -> tuple[Path, Path]:
    movie = folder / f"movie_{size}_{frames}_{dose:g}.eer"
    gain = folder / f"gain_{size}.gain"
    if not movie.exists():
        rng = np.random.default_rng(0)
        distinct = [[encode_frame(*random_frame(rng, size, size, dose, (7, 2, 2)), size * size, (7, 2, 2))]
                    for _ in range(min(frames, 50))]
        write_eer(movie.with_suffix(".part"), (distinct[i % len(distinct)] for i in range(frames)), size, size,
                  frame_count=frames)
        movie.with_suffix(".part").rename(movie)
    if not gain.exists():
        tifffile.imwrite(gain, np.random.default_rng(1).uniform(0.8, 1.2, (size, size)).astype(np.float32))
    return movie, gain


def make_pages(folder: Path, pages: int) -> Path:
    """A movie of ``pages`` frames of 4 x 4 pixels, one event each."""
    movie = folder / f"pages_{pages}.eer"
    if not movie.exists():
        frames = [[encode_frame([i], [0], [0], 16, (7, 2, 2))] for i in range(16)]
        write_eer(movie.with_suffix(".part"), (frames[i % 16] for i in range(pages)), 4, 4, frame_count=pages)
        movie.with_suffix(".part").rename(movie)
    return movie


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cache", type=Path)
    parser.add_argument("--frames", type=int, default=1000)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--group", type=int, default=40)
    parser.add_argument("--dose", type=float, default=0.02)
    parser.add_argument("--pages", type=int, default=100_000)
    parser.add_argument("--upsampling", type=int, nargs="+", choices=(1, 2), default=[1, 2])
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    movie, gain = make_movie(args.cache, args.frames, args.size, args.dose)
    script = args.cache / "script.py"
    script.write_text(SCRIPT)
    noa = Path(sys.executable).with_name("noa")
    pages = make_pages(args.cache, args.pages)
    seconds, mib = run([str(noa), "info", str(pages)])  # first: a child's peak RSS starts from its parent's
    print(f"noa info on {args.pages} pages of 4 x 4: {seconds:.2f} s, {mib:.0f} MiB")
    out = args.cache / "noa.mrc"
    theirs = args.cache / "script.mrc"
    print(f"{args.frames} frames of {args.size}^2 at {args.dose} e/px/frame, fractions of {args.group}, with gain")
    print(f"{'upsampling':<12}{'noa s':>8}{'script s':>10}{'ratio':>8}{'noa MiB':>10}{'script MiB':>11}")
    for upsampling in args.upsampling:
        result = paired([str(noa), "copy", str(movie), str(out), "--eer-group", str(args.group), "--eer-upsampling",
                         str(upsampling), "--gain", str(gain), "--force", "-q"],
                        [sys.executable, str(script), str(movie), str(gain), str(theirs), str(args.group),
                         str(upsampling - 1)], rounds=3, outputs=[out, theirs])
        print(f"{upsampling:<12}{result.columns()}")
        print(f"{'':<12}rounds: " + ", ".join(f"{t:.1f} s / {y:.1f} s = {t / y:.2f}"
                                             for t, y in zip(result.times, result.yardsticks)), flush=True)


if __name__ == "__main__":
    main()

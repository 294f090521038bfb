#!/usr/bin/env bash
# Gain correction of a movie in a shell pipeline:
#   1. make a small synthetic movie (8 frames of 64x64 electron counts, uint16) and the detector's
#      gain reference (one 64x64 float32 image), so that the example needs nothing but the repo;
#   2. multiply every frame by the gain with `noa ewise`: the (1,1,64,64) gain is broadcast over the
#      (8,1,64,64) movie without being repeated on disk;
#   3. write an F-ordered copy (each frame stored column-major, recorded in the MRC header) and
#      inspect it with `noa info`.
# With real data, start at step 2 with your movie and gain (noa reads .mrc/.mrcs/.tif).
#
# Usage: bash examples/gain_pipeline.sh [OUTPUT_DIR]
#   needs `noa` on PATH; PYTHON (for step 1): a Python with numpy and mrcfile, default noa's own.
set -euo pipefail

noa_bin="$(command -v noa)" || { echo "gain_pipeline.sh: error: noa is not on PATH" >&2; exit 1; }
python="${PYTHON:-$(dirname "$noa_bin")/python}"
[[ -x $python ]] || python=python3
out="${1:-$(mktemp -d)}"
mkdir -p "$out"

echo "== 1. a synthetic movie and its gain reference"
"$python" - "$out" <<'EOF'
import sys
import mrcfile
import numpy as np

out = sys.argv[1]
rng = np.random.default_rng(3197)
# A detector whose columns and a corner differ in sensitivity; the gain reference undoes it.
y, x = np.mgrid[0:64, 0:64]
sensitivity = (0.8 + 0.4 * (x % 4) / 3) * np.where((y < 16) & (x < 16), 0.5, 1.0)
movie = rng.poisson(6.0 * sensitivity, size=(8, 64, 64)).astype(np.uint16)
gain = (1.0 / sensitivity).astype(np.float32)
with mrcfile.new(f"{out}/movie.mrcs", overwrite=True) as m:
    m.set_data(movie)
    m.set_image_stack()
    m.voxel_size = 1.06
with mrcfile.new(f"{out}/gain.mrc", overwrite=True) as m:
    m.set_data(gain)
    m.voxel_size = 1.06
EOF
noa info "$out/movie.mrcs" "$out/gain.mrc"

echo; echo "== 2. gain-correct every frame (the gain is broadcast over the frames)"
noa ewise "a * b" "$out/movie.mrcs" "$out/gain.mrc" -o "$out/corrected.mrcs" --dtype float32 --force --quiet
noa stats "$out/corrected.mrcs" --per-batch

echo; echo "== 3. an F-ordered copy, then what it is"
noa copy "$out/corrected.mrcs" "$out/corrected_F.mrcs" --order F --force --quiet
noa info "$out/corrected_F.mrcs"

echo; echo "outputs are in $out"

#!/usr/bin/env bash
# The main job on the bundled example map (EMD-3197, a 20^3 float32 volume):
# describe it, reorder its axes, convert it to an F-ordered TIFF, and check the results.
# Usage: bash examples/quickstart.sh [OUTPUT_DIR]   (needs `noa` on PATH; scripts/demo sets that up)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
map="$here/data/emd_3197.map"
out="${1:-$(mktemp -d)}"
mkdir -p "$out"

echo "== noa info $map"
noa info "$map"

echo; echo "== swap depth and width (a view written out; the header's voxel size follows the axes)"
noa permute "$map" "$out/emd_3197_whd.mrc" --axes 0,3,2,1 --force
noa info "$out/emd_3197_whd.mrc"

echo; echo "== an F-ordered TIFF copy (height and width swapped in memory, recorded in the file)"
noa copy "$map" "$out/emd_3197_F.tif" --order F --force
noa info "$out/emd_3197_F.tif"

echo; echo "== rescale with an element-wise expression, then statistics from the data"
noa ewise "(a - 0.5) * 2" "$map" -o "$out/emd_3197_scaled.mrc" --force
noa stats "$out/emd_3197_scaled.mrc"

echo; echo "outputs are in $out"

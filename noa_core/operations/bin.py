"""noa bin: means of K x K (K x K x K with --depth) blocks; the pixel size grows K times."""

from __future__ import annotations

from noa_core.operations.spec import READING, REQUIRED, SIDE_FILES, Flag, Integer, Param, Writes, implemented


def warmup(dtype: str, shape: tuple[int, ...]) -> list[tuple[str, dict]]:
    return [(dtype, {"factor": 2}), (dtype, {"factor": 2, "depth": True})]


OPERATION = Writes(
    name="bin",
    summary="Mean of KxK blocks (KxKxK with --depth); pixel size times K; a remainder is cropped evenly.",
    examples=("noa bin tomogram.rec tomogram_bin4.rec --factor 4 --depth",),
    details="The element type is kept (integers rounded to nearest); sums are taken in float64.",
    params=(Param("factor", Integer(1, 1 << 20), "Binning factor K.", default=REQUIRED),
            Param("depth", Flag(), "Also bin the depth of volumes (3-d binning).", default=False),
            *READING, SIDE_FILES),
    plan=implemented("bin", "plan"),
    warmup=warmup,
)

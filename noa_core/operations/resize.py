"""noa resize: crop or pad about the centre (centre N//2, as RELION and IMOD's clip resize); the origin
moves so that the content stays where it was."""

from __future__ import annotations

from noa_core.operations.spec import READING, REQUIRED, SIDE_FILES, Integers, Param, Text, Writes, implemented

OPERATION = Writes(
    name="resize",
    summary="Crop or pad about the centre (N//2, as RELION and clip resize); the origin moves so the content "
            "stays in place.",
    examples=("noa resize volume.mrc boxed.mrc --shape 256,256,256 --fill mean",),
    details="SHAPE gives H,W, or D,H,W, or B,D,H,W; axes not given keep their size. New voxels take --fill: "
            "mean (of the input, one extra pass over it; noa's default), zero (what RELION's --new_box pads "
            "with: give --fill zero for RELION's output), or a number. The pixel size is kept (RELION writes 0 "
            "on some outputs).",
    params=(Param("shape", Integers(2, 4, 1, 2**31 - 1), "New size: H,W or D,H,W or B,D,H,W.", default=REQUIRED),
            Param("fill", Text(1, 40), "Value of new voxels: mean (default), zero (as RELION pads) or a number.",
                  default="mean"),
            *READING, SIDE_FILES),
    plan=implemented("resize", "plan"),
)

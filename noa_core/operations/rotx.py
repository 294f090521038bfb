"""noa rotx: rotate volumes by -90 degrees about X, as IMOD's clip rotx (keeps the hand, unlike a Y/Z swap)."""

from __future__ import annotations

from noa_core.operations.spec import READING, Writes, implemented

OPERATION = Writes(
    name="rotx",
    summary="Rotate volumes by -90 degrees about X, as clip rotx: (B,D,H,W) -> (B,H,D,W), keeping the hand.",
    examples=("noa rotx tomogram.rec tomogram_zup.rec",),
    details="Output section z' is input row H-1-z', its rows the input sections in order (y' = z, z' = -y): "
            "a rotation, unlike a Y/Z swap (noa permute --axes 0,2,1,3), which mirrors the volume.",
    params=(*READING,),
    plan=implemented("rotx", "plan"),
)

"""noa permute: reorder the BDHW axes; the header (pixel size, origin) follows the axes."""

from __future__ import annotations

from noa_core.operations.spec import DEVICE, READING, REQUIRED, SIDE_FILES, Integers, Param, Writes, implemented


def warmup(dtype: str, shape: tuple[int, ...]) -> list[tuple[str, dict]]:
    return [(dtype, {"axes": (0, 1, 3, 2)})]


OPERATION = Writes(
    name="permute",
    summary="Reorder the BDHW axes; the header (pixel size, origin) follows the axes.",
    examples=("noa permute volume.mrc volume_xzy.mrc --axes 0,3,2,1",),
    params=(Param("axes", Integers(4, 4, 0, 3), "New order of the BDHW axes, a permutation of 0,1,2,3.",
                  default=REQUIRED),
            *READING, SIDE_FILES, DEVICE),
    plan=implemented("permute", "plan"),
    warmup=warmup,
)

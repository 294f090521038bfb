"""noa flip: mirror one axis (x, y or z) of every image or volume, reversed or about the centre."""

from __future__ import annotations

from noa_core.operations.spec import READING, REQUIRED, SIDE_FILES, Choice, Param, Writes, implemented

OPERATION = Writes(
    name="flip",
    summary="Mirror one axis: x (columns), y (rows) or z (sections of a volume), reversed or about the centre "
            "(hand inversion).",
    details="--about box (the default) reverses the axis: index i takes index N-1-i, a mirror about the middle "
            "of the box, exactly RELION's relion_image_handler --flipX, --flipY, --flipZ. --about centre mirrors "
            "about the voxel N//2 (the centre RELION and noa rotate about, which keeps its place and value): "
            "index i takes index 2*(N//2)-i. For an even N this is RELION's --invert_hand (with --axis x; any "
            "axis inverts the hand), which differs from the reversal by one voxel (the reversal rolled by one); "
            "at the edge, index 0 has no mirror inside the box and keeps its own value, as RELION wraps it. For "
            "an odd N it equals the reversal; RELION's --invert_hand there takes index (N-i) mod N, which moves "
            "the centre voxel by one, and noa does not copy that. Either way the box stays in place: pixel size "
            "and origin are kept, and MRC section records follow a z mirror.",
    examples=("noa flip volume.mrc mirrored.mrc --axis z",
              "noa flip map.mrc other_hand.mrc --axis z --about centre"),
    params=(Param("axis", Choice(("x", "y", "z"), str.lower), "Axis to mirror: x, y or z (z: volumes only).",
                  default=REQUIRED),
            Param("about", Choice(("box", "centre"), lambda word: {"center": "centre"}.get(word.lower(), word.lower())),
                  "box: reverse the axis (RELION's --flipX/Y/Z); centre: mirror about the voxel N//2, which stays "
                  "in place (hand inversion; RELION's --invert_hand for an even N).", default="box"),
            *READING, SIDE_FILES),
    plan=implemented("flip", "plan"),
)

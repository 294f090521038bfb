"""noa flip: mirror one axis (x, y or z) of every image or volume."""

from __future__ import annotations

from pathlib import Path

from noa_core.operations.spec import READING, REQUIRED, Choice, Operation, Options, Param


def plan(inputs: list[Path], options: Options):
    from noa_core import stack
    from noa_core.operations.plan import make_plan

    array, meta = options.open_input(inputs[0])
    axis = stack.flip_axis(array.shape, options.axis)
    out_meta = stack.derived(meta, array.shape)  # mirrored about the box's centre: the box stays in place
    if axis == 1:  # z reverses the sections, and their records with them
        d = array.shape[1]
        picks = [b * d + (d - 1 - z) for b in range(array.shape[0]) for z in range(d)]
    else:
        picks = list(range(array.shape[0] * array.shape[1]))
    out_meta = stack.follow_sections(out_meta, meta, picks, "")
    return make_plan(inputs, [array], [array], None, out_meta, f"noa flip --axis {options.axis}", array.dtype,
                     shape=array.shape, reads=stack.flip_reads(array, axis), read_factor=1.0)


OPERATION = Operation(
    name="flip",
    summary="Mirror one axis: x (columns), y (rows) or z (sections of a volume).",
    examples=("noa flip volume.mrc mirrored.mrc --axis z",),
    params=(Param("axis", Choice(("x", "y", "z"), str.lower), "Axis to mirror: x, y or z (z: volumes only).",
                  default=REQUIRED),
            *READING),
    plan=plan,
)

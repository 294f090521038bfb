"""noa permute: reorder the BDHW axes; the header (pixel size, origin) follows the axes."""

from __future__ import annotations


from noa_core.operations.spec import DEVICE, READING, REQUIRED, Inputs, Integers, Options, Param, Writes


def plan(inputs: Inputs, options: Options):
    from noa_core.array import layout
    from noa_core.operations.plan import converter, tiled_plan

    array, meta = inputs.open(inputs[0])  # a missing or unreadable file is named first
    perm = layout.check_permutation(options.axes)
    return tiled_plan(options, inputs=inputs, read=[array], sources=[array.permute(perm)], compute=converter("checked"),
                      meta=meta.permute(perm))


def warmup(dtype: str, shape: tuple[int, ...]) -> list[tuple[str, dict]]:
    return [(dtype, {"axes": (0, 1, 3, 2)})]


OPERATION = Writes(
    name="permute",
    summary="Reorder the BDHW axes; the header (pixel size, origin) follows the axes.",
    examples=("noa permute volume.mrc volume_xzy.mrc --axes 0,3,2,1",),
    params=(Param("axes", Integers(4, 4, 0, 3), "New order of the BDHW axes, a permutation of 0,1,2,3.",
                  default=REQUIRED),
            *READING, DEVICE),
    plan=plan,
    warmup=warmup,
)

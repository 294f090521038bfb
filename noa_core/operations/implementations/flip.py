"""noa flip: one axis mirrored, reversed or about the voxel N//2; the box stays in place, and MRC section records
follow a z mirror."""

from __future__ import annotations

from noa_core.images import boxes
from noa_core.operations.plan import region_plan
from noa_core.operations.spec import Inputs, Options


def plan(inputs: Inputs, options: Options):
    array, meta = inputs.open(inputs[0])
    axis = boxes.flip_axis(array.shape, options.axis)
    last = boxes.mirror_sum(array.shape[axis], options.about)
    # Both mirrors keep the box where it is, so the origin is kept: the reversal is about the box's middle,
    # the centre mirror about the voxel n // 2, which keeps its place and value.
    out_meta = meta.derived(array.shape)
    if axis == 1:  # z reorders the sections, and their records with them
        d = array.shape[1]
        picks = [b * d + (last - z) % d for b in range(array.shape[0]) for z in range(d)]
    else:
        picks = list(range(array.shape[0] * array.shape[1]))
    return region_plan(options, inputs=inputs, read=[array], meta=out_meta.with_sections(meta, picks),
                       shape=array.shape, reads=boxes.flip_reads(array, axis, options.about))

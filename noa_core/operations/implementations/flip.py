"""noa flip: one axis mirrored, reversed or about the voxel N//2; the box stays in place, and MRC section records
follow a z mirror."""

from __future__ import annotations

from noa_core.images import boxes
from noa_core.operations.plan import region_plan
from noa_core.operations.spec import Inputs, Options


def plan(inputs: Inputs, options: Options):
    array, meta = inputs.open(inputs[0], tiles=True)  # read by region_plan alone
    axis = boxes.flip_axis(array.shape, options.axis)
    out_meta = boxes.flip_metadata(meta, array.shape, axis, options.about)
    return region_plan(options, inputs=inputs, read=[array], meta=out_meta, shape=array.shape,
                       reads=boxes.flip_reads(array, axis, options.about))

"""noa rotx: volumes rotated by -90 degrees about X, as IMOD's clip rotx: (B,D,H,W) -> (B,H,D,W), the centres
kept."""

from __future__ import annotations

from noa_core.images import boxes
from noa_core.operations.plan import region_plan
from noa_core.operations.spec import Inputs, Options


def plan(inputs: Inputs, options: Options):
    array, meta = inputs.open(inputs[0], tiles=True)  # read by region_plan alone
    boxes.check_volume(array.shape, "rotx")
    out_meta = boxes.rotx_metadata(meta, array.shape)
    return region_plan(options, inputs=inputs, read=[array], meta=out_meta, shape=out_meta.shape,
                       reads=boxes.rotx_reads(array), detail="-90 degrees about X")

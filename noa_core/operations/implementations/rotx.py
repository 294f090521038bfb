"""noa rotx: volumes rotated by -90 degrees about X, as IMOD's clip rotx: (B,D,H,W) -> (B,H,D,W), the centres
kept."""

from __future__ import annotations

import dataclasses

from noa_core.images import boxes
from noa_core.operations.plan import region_plan
from noa_core.operations.spec import Inputs, Options


def plan(inputs: Inputs, options: Options):
    array, meta = inputs.open(inputs[0])
    boxes.check_volume(array.shape, "rotx")
    shape = boxes.rotx_shape(array.shape)
    out_meta = meta.permute((0, 2, 1, 3))  # pixel size, sampling, start and angles of Y and Z exchanged
    (pz, py, _), (oz, oy, ox) = meta.pixel_size, meta.origin
    if py > 0 and pz > 0:  # IMOD clip_flip (rotx): centres kept, y' = z and z' = -y
        ycen = array.shape[2] / 2 - oy / py
        zcen = array.shape[1] / 2 - oz / pz
        out_meta.origin = ((shape[1] / 2 + ycen) * py, (shape[2] / 2 - zcen) * pz, ox)
    if out_meta.mrc is not None and out_meta.mrc.dropped:
        out_meta.mrc = dataclasses.replace(out_meta.mrc, dropped="the volume was rotated about X")
    return region_plan(options, inputs=inputs, read=[array], meta=out_meta, shape=shape,
                       reads=boxes.rotx_reads(array), detail="-90 degrees about X")

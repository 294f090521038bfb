"""noa flip: one axis mirrored, reversed or about the voxel N//2; the box stays in place, and MRC section records
follow a z mirror, as a tilt series' angle, mdoc and STAR files do (a y or x mirror writes none of them)."""

from __future__ import annotations

from noa_core.images import boxes, stacks
from noa_core.operations.plan import region_plan
from noa_core.operations.spec import Inputs, Options
from noa_core.tomography import beside


def plan(inputs: Inputs, options: Options):
    array, meta = inputs.open(inputs[0], tiles=True)  # read by region_plan alone
    axis = boxes.flip_axis(array.shape, options.axis)
    out_meta = boxes.flip_metadata(meta, array.shape, axis, options.about)
    sections = stacks.section_axis(array.shape)
    if axis == sections:  # a volume's z mirror: its sections in the mirrored order
        count = array.shape[sections]
        last = boxes.mirror_sum(count, options.about)
        kept = [(last - z) % count for z in range(count)]
        side_files, notices = beside.in_step(inputs, options, array.shape, kept)
    else:  # mirrored images turn the other way about their tilt axis: the files' axis no longer says theirs
        side_files, notices = beside.in_step(inputs, options, array.shape, None, why_not=beside.MIRRORED)
    return region_plan(options, inputs=inputs, read=[array], meta=out_meta, shape=array.shape,
                       reads=boxes.flip_reads(array, axis, options.about), notices=notices, side_files=side_files)

"""noa sections: the sections kept (in the order listed) or left (in their order), with their extended-header
records; a volume's first kept slice becomes its first section. A tilt series' angle, mdoc and STAR files keep the
rows of the sections kept, in their order."""

from __future__ import annotations

from noa_core.images import stacks
from noa_core.operations.plan import region_plan
from noa_core.operations.spec import Inputs, Options
from noa_core.tomography import beside


def plan(inputs: Inputs, options: Options):
    array, meta = inputs.open(inputs[0], tiles=True)  # read by region_plan alone
    indices = stacks.selected_sections(array.shape, options.keep, options.drop)
    out_meta = stacks.sections_metadata(meta, array.shape, indices)
    side_files, notices = beside.in_step(inputs, options, array.shape, indices)
    return region_plan(options, inputs=inputs, read=[array], meta=out_meta, shape=out_meta.shape,
                       reads=stacks.sections_reads(array, indices), notices=notices, side_files=side_files)

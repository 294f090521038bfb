"""noa sections: the sections kept (in the order listed) or left (in their order), with their extended-header
records; a volume's first kept slice becomes its first section."""

from __future__ import annotations

from noa_core.images import stacks
from noa_core.io.metadata import stored_sections
from noa_core.operations.plan import region_plan
from noa_core.operations.spec import Inputs, Options


def plan(inputs: Inputs, options: Options):
    array, meta = inputs.open(inputs[0])
    indices = stacks.selected_sections(array.shape, options.keep, options.drop)
    axis = stacks.section_axis(array.shape)
    shape = list(array.shape)
    shape[axis] = len(indices)
    origin = meta.origin
    if axis == 1:  # depth slices: the first one kept is the new first section
        origin = (meta.origin[0] - indices[0] * meta.pixel_size[0], *meta.origin[1:])
    out_meta = meta.derived(shape, origin=origin).with_sections(
        meta, lambda: stored_sections(array.shape, axis, indices))
    return region_plan(options, inputs=inputs, read=[array], meta=out_meta, shape=shape,
                       reads=stacks.sections_reads(array, indices))

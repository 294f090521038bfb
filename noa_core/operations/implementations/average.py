"""noa average: groups of N consecutive sections become one section, their mean (or sum)."""

from __future__ import annotations

from noa_core.images import stacks
from noa_core.io.metadata import stored_sections
from noa_core.operations.plan import region_plan
from noa_core.operations.spec import Inputs, Options


def plan(inputs: Inputs, options: Options):
    array, meta = inputs.open(inputs[0])
    shape, axis, left = stacks.average_layout(array.shape, options.group)
    dtype = stacks.average_dtype(array.dtype)
    pixel, origin = meta.pixel_size, meta.origin
    if axis == 1:  # depth slices of a volume: N slices become one, N times thicker
        pixel = (pixel[0] * options.group, *pixel[1:])
    out_meta = meta.derived(shape, pixel_size=pixel, origin=origin)
    notices = [f"average --group {options.group}: the last {left} of {array.shape[axis]} sections make no "
               "complete group and are left out"] if left else []
    firsts = [g * options.group for g in range(shape[axis])]  # each group takes its first section's record
    out_meta = out_meta.with_sections(meta, stored_sections(array.shape, axis, firsts))
    return region_plan(options, inputs=inputs, read=[array], meta=out_meta, shape=shape, dtype=dtype,
                       reads=stacks.average_reads(array, options.group, options.sum),
                       read_factor=options.group * array.dtype.itemsize / dtype.itemsize, notices=notices)

"""noa average: groups of N consecutive sections become one section, their mean (or sum); a tilt series' angle, mdoc
and STAR files are not written beside it (a notice says so)."""

from __future__ import annotations

from noa_core.images import stacks
from noa_core.operations.plan import region_plan
from noa_core.operations.spec import Inputs, Options
from noa_core.tomography import beside


def plan(inputs: Inputs, options: Options):
    array, meta = inputs.open(inputs[0], tiles=True)  # read by region_plan alone
    shape, axis, left = stacks.average_layout(array.shape, options.group)
    dtype = stacks.average_dtype(array.dtype)
    notices = [f"average --group {options.group}: the last {left} of {array.shape[axis]} sections make no "
               "complete group and are left out"] if left else []
    notices += beside.in_step(inputs, options, array.shape, None, why_not="averaging joins its sections")[1]
    out_meta = stacks.average_metadata(meta, array.shape, options.group)
    return region_plan(options, inputs=inputs, read=[array], meta=out_meta, shape=shape, dtype=dtype,
                       reads=stacks.average_reads(array, options.group, options.sum),
                       read_factor=options.group * array.dtype.itemsize / dtype.itemsize, notices=notices)

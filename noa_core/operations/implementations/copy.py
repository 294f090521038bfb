"""noa copy: the same values in another memory order, element type (checked or clamped) or format, rows reversed
on request; a tilt series' angle, mdoc and STAR files follow as they are (not when rows are reversed)."""

from __future__ import annotations

from noa_core.array import dtypes, resolve_copy_order
from noa_core.operations.plan import converter, reversing, tiled_plan
from noa_core.operations.spec import Inputs, Options
from noa_core.tomography import beside

HEIGHT = 2  # the BDHW axis of rows (Y)


def plan(inputs: Inputs, options: Options):
    array, meta = inputs.open(inputs[0], tiles=True)  # read by tiled_plan alone
    out_dtype = None if options.dtype is None else dtypes.scalar_dtype(options.dtype)
    out_order = resolve_copy_order(array, options.order)
    compute = converter("clamp" if options.clamp else "checked")
    if options.flip_y:  # a reversed read of whole columns: noa has no negative strides
        compute = reversing(compute, (HEIGHT,))
    side_files, notices = beside.in_step(inputs, options, array.shape, None, why_not=beside.MIRRORED) \
        if options.flip_y else beside.unchanged(inputs, options, array.shape)
    return tiled_plan(options, inputs=inputs, read=[array], compute=compute, meta=meta, dtype=out_dtype,
                      order=out_order, whole_axes=(HEIGHT,) if options.flip_y else (), notices=notices,
                      side_files=side_files)

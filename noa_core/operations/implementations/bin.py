"""noa bin: each K x K (K x K x K) block becomes its mean; the pixel size grows K times, a remainder is cropped
evenly from both ends. A tilt series' angle, mdoc and STAR files follow, their pixel size K times too (none where
the depth of a volume is binned too, joining its sections)."""

from __future__ import annotations

from noa_core.array import layout
from noa_core.images import boxes, stacks
from noa_core.operations.plan import region_plan
from noa_core.operations.spec import Inputs, Options
from noa_core.tomography import beside


def plan(inputs: Inputs, options: Options):
    array, meta = inputs.open(inputs[0], tiles=True)  # read by region_plan alone
    factors = boxes.bin_factors(array.shape, options.factor, options.depth)
    shape, starts = boxes.bin_layout(array.shape, factors)
    cropped = [f"{layout.AXIS_NAMES[i]} {array.shape[i] % k}" for i, k in enumerate(factors)
               if array.shape[i] % k]
    notices = [f"bin --factor {options.factor}: {', '.join(cropped)} pixel(s) left over, cropped evenly from "
               "both ends"] if cropped else []
    out_meta = boxes.bin_metadata(meta, array.shape, factors, starts)
    sections = stacks.section_axis(array.shape)
    side_files, told = beside.in_step(
        inputs, options, array.shape, None if factors[sections] > 1 else range(array.shape[sections]),
        image_size=(shape[3], shape[2]), pixel_scale=factors[3], why_not="binning the depth too joins its sections")
    notices.extend(told)
    return region_plan(options, inputs=inputs, read=[array], meta=out_meta, shape=shape,
                       reads=boxes.bin_reads(array, factors, starts), read_factor=factors[1] * factors[2] * factors[3],
                       notices=notices, side_files=side_files)

"""noa bin: each K x K (K x K x K) block becomes its mean; the pixel size grows K times, a remainder is cropped
evenly from both ends."""

from __future__ import annotations

from noa_core.array import layout
from noa_core.images import boxes
from noa_core.io.metadata import stored_sections
from noa_core.operations.plan import region_plan
from noa_core.operations.spec import Inputs, Options


def plan(inputs: Inputs, options: Options):
    array, meta = inputs.open(inputs[0])
    factors = boxes.bin_factors(array.shape, options.factor, options.depth)
    shape, starts = boxes.bin_layout(array.shape, factors)
    pixel = tuple(p * k for p, k in zip(meta.pixel_size, factors[1:]))
    # Bins cover voxels [start + j K, start + (j + 1) K): the binned box starts where the kept region starts.
    origin = tuple(o - s * p for o, s, p in zip(meta.origin, starts[1:], meta.pixel_size))
    out_meta = meta.derived(shape, pixel_size=pixel, origin=origin, grown_axes=(2, 3))
    cropped = [f"{layout.AXIS_NAMES[i]} {array.shape[i] % k}" for i, k in enumerate(factors)
               if array.shape[i] % k]
    notices = [f"bin --factor {options.factor}: {', '.join(cropped)} pixel(s) left over, cropped evenly from "
               "both ends"] if cropped else []
    if options.depth:  # K sections become one: it takes the first one's record
        picks = stored_sections(array.shape, 1, [starts[1] + z * factors[1] for z in range(shape[1])])
    else:
        picks = list(range(array.shape[0] * array.shape[1]))
    out_meta = out_meta.with_sections(meta, picks, pixel_scale=options.factor)
    return region_plan(options, inputs=inputs, read=[array], meta=out_meta, shape=shape,
                       reads=boxes.bin_reads(array, factors, starts), read_factor=factors[1] * factors[2] * factors[3],
                       notices=notices)

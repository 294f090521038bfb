"""noa average: average (or sum) groups of N consecutive sections, e.g. movie frames into fractions."""

from __future__ import annotations


from noa_core.operations.spec import READING, REQUIRED, Flag, Inputs, Integer, Options, Param, Writes


def plan(inputs: Inputs, options: Options):
    from noa_core.images import stacks
    from noa_core.io.metadata import stored_sections
    from noa_core.operations.plan import region_plan

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


OPERATION = Writes(
    name="average",
    summary="Average (or --sum) groups of N consecutive sections: movie frames into fractions.",
    examples=("noa average movie.mrcs fractions.mrcs --group 4",),
    details="Integer and float16 data give float32; sums are taken in float64. An incomplete last group is "
            "left out (with a notice); each group keeps the extended-header record of its first section.",
    params=(Param("group", Integer(1, 1 << 20), "Sections per group (N).", default=REQUIRED),
            Param("sum", Flag(), "Sum the groups instead of averaging them.", default=False),
            *READING),
    plan=plan,
)

"""noa sections: keep or drop sections (batch entries of a stack, depth slices of a volume)."""

from __future__ import annotations


from noa_core.operations.spec import READING, Inputs, Options, Param, Text, Writes


def plan(inputs: Inputs, options: Options):
    from noa_core.images import stacks
    from noa_core.io.metadata import stored_sections
    from noa_core.operations.plan import region_plan

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


OPERATION = Writes(
    name="sections",
    summary="Keep or drop sections (entries of a stack, slices of a volume); FEI/SERI records follow.",
    examples=("noa sections tilts.st kept.st --keep 0-9,12", "noa sections movie.mrcs fewer.mrcs --drop 0,1"),
    details="A range list counts from 0: '0-9,12'. --keep writes the sections in the order listed (repeats "
            "allowed); --drop writes the others in their order.",
    params=(Param("keep", Text(1, 10_000), "Sections to keep, in this order, e.g. 0-9,12."),
            Param("drop", Text(1, 10_000), "Sections to leave out, e.g. 3,7."),
            *READING),
    plan=plan,
)

"""noa split: one output per section (or per N sections) of a stack, or per Z section of a volume, each named
after the input and the number of its part, with its sections' header records."""

from __future__ import annotations

from noa_core.images import stacks
from noa_core.io.formats import strip_image_suffix
from noa_core.operations.plan import converter, tiled_plan
from noa_core.operations.spec import Inputs, Options


def plans(inputs: Inputs, options: Options):
    array, meta = inputs.open(inputs[0])
    every = options.every
    axis = stacks.section_axis(array.shape)
    ranges = stacks.split_ranges(array.shape, every)
    digits = max(3, len(str(len(ranges) - 1)))
    extension = _extension(inputs[0].name, strip_image_suffix(inputs[0].name))
    planned = []
    for index, (start, stop) in enumerate(ranges):
        key = [slice(None)] * 4
        key[axis] = slice(start, stop)
        part = array[tuple(key)]
        if axis == stacks.DEPTH:  # a volume's Z sections become an image stack
            part = part.permute((1, 0, 2, 3))
        part_meta = meta.section_part(axis, start, stop)
        what = "sections" if axis == stacks.DEPTH else "entries"
        planned.append((f"_{index:0{digits}d}{extension}", tiled_plan(
            options, inputs=inputs, read=[array], sources=[part], compute=converter("checked"), meta=part_meta,
            detail=f"{what} {start}..{stop - 1} of {inputs[0].name}")))
    return planned


def _extension(name: str, stem: str) -> str:
    """The input's image extension without its compression suffix ('a.mrcs.gz' -> '.mrcs')."""
    rest = name[len(stem):]
    for suffix in (".gz", ".bz2"):
        if rest.lower().endswith(suffix):
            rest = rest[:-len(suffix)]
    return rest or ".mrc"

"""noa permute: the BDHW axes reordered; the header (pixel size, origin) follows the axes. A tilt series' angle, mdoc
and STAR files follow where its sections and their images stay as they are (a stack made a volume, or back); none
where the sections' axis or the images' turn (a notice says so)."""

from __future__ import annotations

from noa_core.array import layout
from noa_core.images import stacks
from noa_core.operations.plan import converter, tiled_plan
from noa_core.operations.spec import Inputs, Options
from noa_core.tomography import beside


def plan(inputs: Inputs, options: Options):
    array, meta = inputs.open(inputs[0])  # a missing or unreadable file is named first
    perm = layout.check_permutation(options.axes)
    permuted = array.permute(perm)
    count = array.shape[stacks.section_axis(array.shape)]
    kept = perm[stacks.section_axis(permuted.shape)] == stacks.section_axis(array.shape) and perm[2:] == (2, 3)
    side_files, notices = beside.in_step(inputs, options, array.shape, range(count) if kept else None,
                                            why_not="the permutation moves its sections or turns their images")
    return tiled_plan(options, inputs=inputs, read=[array], sources=[permuted], compute=converter("checked"),
                      meta=meta.permute(perm), notices=notices, side_files=side_files)

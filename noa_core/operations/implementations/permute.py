"""noa permute: the BDHW axes reordered; the header (pixel size, origin) follows the axes."""

from __future__ import annotations

from noa_core.array import layout
from noa_core.operations.plan import converter, tiled_plan
from noa_core.operations.spec import Inputs, Options


def plan(inputs: Inputs, options: Options):
    array, meta = inputs.open(inputs[0])  # a missing or unreadable file is named first
    perm = layout.check_permutation(options.axes)
    return tiled_plan(options, inputs=inputs, read=[array], sources=[array.permute(perm)], compute=converter("checked"),
                      meta=meta.permute(perm))

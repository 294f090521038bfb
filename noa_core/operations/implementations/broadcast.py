"""noa broadcast: size-1 dimensions repeated to reach a shape; the header follows the new shape."""

from __future__ import annotations

from noa_core.array import layout
from noa_core.operations.plan import converter, tiled_plan
from noa_core.operations.spec import Inputs, Options


def plan(inputs: Inputs, options: Options):
    array, meta = inputs.open(inputs[0])  # a missing or unreadable file is named first
    target = layout.as_shape4(options.shape)
    return tiled_plan(options, inputs=inputs, read=[array], sources=[array.broadcast(target)],
                      compute=converter("checked"), meta=meta.broadcast(target))

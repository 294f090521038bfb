"""noa ewise: an element-wise expression over files a, b, c, ..., each broadcast onto the output's shape; the
output describes the pixels of the first input of that shape."""

from __future__ import annotations

import numpy as np

from noa_core.array import dtypes, layout
from noa_core.compute.expr import compile_expression
from noa_core.errors import ParameterError
from noa_core.operations.plan import evaluator, tiled_plan
from noa_core.operations.spec import Inputs, Options


def plan(inputs: Inputs, options: Options):
    opened = [inputs.open(src) for src in inputs]  # missing or unreadable files are named first
    compiled = compile_expression(options.expression, len(inputs))
    arrays = [array for array, _ in opened]
    shape = layout.broadcast_shapes(*(a.shape for a in arrays))
    if not options.broadcast and all(a.shape != shape for a in arrays):
        sizes = ", ".join(f"{path} {' x '.join(map(str, a.shape))}" for path, a in zip(inputs, arrays))
        raise ParameterError(f"no input has the output's shape {' x '.join(map(str, shape))}: the inputs ({sizes}) "
                             "grow each other; give this option to write that", "broadcast")
    out_dtype = compiled.result_dtype([a.dtype for a in arrays])  # typing refuses bad constants before any output
    if options.dtype is not None:
        out_dtype = dtypes.scalar_dtype(options.dtype)
    elif out_dtype == np.bool_:
        out_dtype = np.dtype("uint8")  # image formats store no booleans: 0 and 1
    # The output describes the pixels of the first input that has the full shape.
    meta = next((m for a, m in opened if a.shape == shape), None) or opened[0][1].broadcast(shape)
    return tiled_plan(options, inputs=inputs, read=arrays, sources=[a.broadcast(shape) for a in arrays],
                      compute=evaluator(compiled), meta=meta, dtype=out_dtype)

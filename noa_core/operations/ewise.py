"""noa ewise: an element-wise expression over files (a, b, c, ...), broadcasting size-1 dimensions."""

from __future__ import annotations


from noa_core.operations.spec import (
    Inputs,
    DEVICE,
    ELEMENT_TYPES,
    READING,
    REQUIRED,
    UINT8_MODE,
    Choice,
    Flag,
    Writes,
    Options,
    Param,
    element_type_name,
    Text,
)

# noa_core.compute.expr.MAX_INPUTS and MAX_LENGTH (that module loads numba; a test keeps these equal)
MAX_INPUTS = 26
MAX_LENGTH = 2000


def plan(inputs: Inputs, options: Options):
    import numpy as np

    from noa_core.array import dtypes
    from noa_core.array import layout
    from noa_core.errors import ParameterError
    from noa_core.compute.expr import compile_expression
    from noa_core.operations.plan import evaluator, tiled_plan

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


OPERATION = Writes(
    name="ewise",
    summary="Compute an element-wise expression over files, broadcasting size-1 dimensions.",
    details="Inputs are named a, b, c, ... in order. The language has + - * / // % **, comparisons, "
            "and/or/not, 'x if cond else y', pi, e, and abs sqrt exp log log10 sin cos tan floor ceil "
            "min max clip where.",
    examples=('noa ewise "a * b" movie.mrc gain.mrc -o corrected.mrc',
              'noa ewise "a * b" movies/*.mrc --with gain.mrc --out-dir corrected/'),
    params=(Param("expression", Text(1, MAX_LENGTH), "Expression over the inputs a, b, c, ... e.g. 'a * b'.",
                  default=REQUIRED, argument=True),
            Param("dtype", Choice(ELEMENT_TYPES, element_type_name),
                  "Output element type (default: NumPy's result type)."),
            Param("broadcast", Flag(), "Allow inputs of which none has the output's shape, each growing the others "
                  "(a volume against a stack of images); without it they are refused. An input of the full shape "
                  "with others broadcast onto it (a gain over a movie) needs no option.", default=False),
            UINT8_MODE, *READING, DEVICE),
    max_inputs=MAX_INPUTS,
    plan=plan,
    chooses_format=True,
)

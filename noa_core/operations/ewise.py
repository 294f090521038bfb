"""noa ewise: an element-wise expression over files (a, b, c, ...), broadcasting size-1 dimensions."""

from __future__ import annotations

from noa_core.operations.spec import (
    DEVICE,
    ELEMENT_TYPES,
    READING,
    REQUIRED,
    UINT8_MODE,
    Choice,
    Flag,
    Param,
    Text,
    Writes,
    element_type_name,
    implemented,
)

# noa_core.compute.expr.MAX_INPUTS and MAX_LENGTH (that module loads numba; a test keeps these equal)
MAX_INPUTS = 26
MAX_LENGTH = 2000


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
    plan=implemented("ewise", "plan"),
    chooses_format=True,
)

"""noa copy: copy an image file, optionally to another order, element type or format."""

from __future__ import annotations


from noa_core.operations.spec import (
    Inputs,
    DEVICE,
    ELEMENT_TYPES,
    READING,
    UINT8_MODE,
    Choice,
    Flag,
    Writes,
    Options,
    Param,
    element_type_name,
)

HEIGHT = 2  # the BDHW axis of rows (Y)


def plan(inputs: Inputs, options: Options):
    from noa_core.array import dtypes
    from noa_core.array import resolve_copy_order
    from noa_core.operations.plan import converter, reversing, tiled_plan

    array, meta = inputs.open(inputs[0], tiles=True)  # read by tiled_plan alone
    out_dtype = None if options.dtype is None else dtypes.scalar_dtype(options.dtype)
    out_order = resolve_copy_order(array, options.order)
    compute = converter("clamp" if options.clamp else "checked")
    if options.flip_y:  # a reversed read of whole columns: noa has no negative strides
        compute = reversing(compute, (HEIGHT,))
    return tiled_plan(options, inputs=inputs, read=[array], compute=compute, meta=meta, dtype=out_dtype,
                      order=out_order, whole_axes=(HEIGHT,) if options.flip_y else ())


def warmup(dtype: str, shape: tuple[int, ...]) -> list[tuple[str, dict]]:
    """F order, and conversions between each type and float32 (both ways, checked and clamped)."""
    if dtype.startswith("complex"):
        return [(dtype, {"order": "F"}), (dtype, {"dtype": "float32", "clamp": True})]  # the real part
    return ([(dtype, {"order": "F"})] + [(dtype, {"dtype": "float32", "clamp": c}) for c in (False, True)]
            + [("float32", {"dtype": dtype, "clamp": c}) for c in (False, True)])


OPERATION = Writes(
    name="copy",
    summary="Copy an image file, optionally to another order, element type or format (chosen by OUT's "
            "extension).",
    examples=("noa copy stack.tif stack.mrc --order F --dtype float32",),
    params=(Param("order", Choice(("C", "F", "K"), str.upper), "Memory order of the output: C, F, or K (keep the input's).",
                  default="C"),
            Param("dtype", Choice(ELEMENT_TYPES, element_type_name),
                  "Convert to this element type (e.g. float32, int16, uint8)."),
            Param("clamp", Flag(), "Clamp values to the range of dtype (NaN -> 0 for integers); without it, "
                  "values that do not fit are refused.", default=False),
            Param("flip_y", Flag(), "Reverse the rows (Y). MRC's first row is the bottom of the image, TIFF's the "
                  "top: IMOD, EMAN2, SerialEM and MotionCor2 flip Y whenever they read or write TIFF; RELION and "
                  "tifffile do not, and noa keeps rows as stored unless asked.", default=False),
            UINT8_MODE, *READING, DEVICE),
    plan=plan,
    chooses_format=True,
    warmup=warmup,
)

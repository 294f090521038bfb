"""noa copy: copy an image file, optionally to another order, element type or format."""

from __future__ import annotations

from noa_core.operations.spec import (
    DEVICE,
    ELEMENT_TYPES,
    READING,
    SIDE_FILES,
    UINT8_MODE,
    Choice,
    Flag,
    Param,
    Writes,
    element_type_name,
    implemented,
)


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
    params=(Param("order", Choice(("C", "F", "K"), str.upper),
                  "Memory order of the output: C, F, or K (keep the input's).", default="C"),
            Param("dtype", Choice(ELEMENT_TYPES, element_type_name),
                  "Convert to this element type (e.g. float32, int16, uint8)."),
            Param("clamp", Flag(), "Clamp values to the range of dtype (NaN -> 0 for integers); without it, "
                  "values that do not fit are refused.", default=False),
            Param("flip_y", Flag(), "Reverse the rows (Y). MRC's first row is the bottom of the image, TIFF's the "
                  "top: IMOD, EMAN2, SerialEM and MotionCor2 flip Y whenever they read or write TIFF; RELION and "
                  "tifffile do not, and noa keeps rows as stored unless asked.", default=False),
            UINT8_MODE, *READING, SIDE_FILES, DEVICE),
    plan=implemented("copy", "plan"),
    chooses_format=True,
    warmup=warmup,
)

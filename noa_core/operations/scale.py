"""noa scale: a linear rescale of the values, from their minimum and maximum or from two percentiles,
onto a target range (newstack -scale/-float, e2proc2d --fixintscaling)."""

from __future__ import annotations

from noa_core.operations.spec import (
    ELEMENT_TYPES,
    READING,
    REQUIRED,
    SIDE_FILES,
    UINT8_MODE,
    Choice,
    Param,
    Reals,
    Writes,
    element_type_name,
    implemented,
)


def warmup(dtype: str, shape: tuple[int, ...]) -> list[tuple[str, dict]]:
    """float32 outputs, and uint8 outputs from float32 (8-bit display copies)."""
    if dtype.startswith("complex"):
        return []
    return [(dtype, {"to_range": (0.0, 1.0)}), ("float32", {"to_range": (0.0, 255.0), "dtype": "uint8"})]


OPERATION = Writes(
    name="scale",
    summary="Rescale values linearly from their min/max (or two percentiles, beyond which they are clamped) "
            "onto a range.",
    details="The output is --dtype (default float32; float64 data stay float64); integer outputs are rounded "
            "to the nearest value. Two passes read the data first (minimum and maximum, then for --percentiles a "
            "histogram of 2**20 bins: exact for 8- and 16-bit data, within (max - min) / 2**20 otherwise). Data "
            "holding NaN or infinite values are refused. Constant data go to the low end.",
    examples=("noa scale tomo.mrc tomo8.mrc --to-range 0,255 --percentiles 0.1,99.9 --dtype uint8",
              "noa scale map.mrc map01.mrc --to-range 0,1"),
    params=(Param("to_range", Reals(2, 2), "Target range LOW,HIGH (e.g. 0,255).", default=REQUIRED),
            Param("percentiles", Reals(2, 2, 0, 100), "Map these percentiles LOW,HIGH of the data (e.g. "
                  "0.1,99.9) onto the range instead of the minimum and maximum; values beyond are clamped."),
            Param("dtype", Choice(ELEMENT_TYPES, element_type_name),
                  "Output element type (default float32; float64 data stay float64)."),
            UINT8_MODE, *READING, SIDE_FILES),
    plan=implemented("scale", "plan"),
    chooses_format=True,
    warmup=warmup,
)

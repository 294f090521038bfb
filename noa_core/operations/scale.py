"""noa scale: a linear rescale of the values, from their minimum and maximum or from two percentiles,
onto a target range (newstack -scale/-float, e2proc2d --fixintscaling)."""

from __future__ import annotations

from pathlib import Path

from noa_core.operations.spec import (
    Inputs,
    ELEMENT_TYPES,
    READING,
    REQUIRED,
    UINT8_MODE,
    Choice,
    Writes,
    Options,
    Param,
    Reals,
    element_type_name,
)


def source_range(array, path: Path, percentiles) -> tuple[float, float]:
    """The values mapped onto the target's ends: the data's minimum and maximum, or its percentiles
    (streamed: see :mod:`noa_core.images.statistics`), remembered per file."""
    from noa_core.images import statistics

    def compute() -> tuple[float, float]:
        stats = statistics.whole_statistics(array)
        statistics.check_finite(stats, str(path))
        if percentiles is None:
            return float(stats.moments.min), float(stats.moments.max)
        return statistics.percentiles(array, percentiles, stats)

    return statistics.remembered(path, ("range", array.shape, percentiles), compute)


def plan(inputs: Inputs, options: Options):
    from noa_core.images import intensity
    from noa_core.array import asarray
    from noa_core.compute.conversion import convert_into
    from noa_core.errors import ShapeError
    from noa_core.operations.plan import tiled_plan

    array, meta = inputs.open(inputs[0])
    intensity.check_real_input(array.dtype, str(inputs[0]))
    out_dtype = intensity.real_output_dtype(array.dtype, options.dtype)
    target = intensity.check_to_range(options.to_range, out_dtype)
    qs = intensity.check_percentiles(options.percentiles)
    if array.size == 0:
        raise ShapeError(f"{inputs[0]}: the array of shape {array.shape} is empty")
    ends = source_range(array, inputs[0], qs)
    integral = out_dtype.kind in "iu"

    def compute(blocks, out) -> None:
        convert_into(asarray(intensity.scaled(blocks[0].numpy(), ends, target, integral)), out, mode="checked")

    return tiled_plan(options, inputs=inputs, read=[array], compute=compute, meta=meta, dtype=out_dtype,
                      detail=f"{ends[0]:.6g}..{ends[1]:.6g} -> {target[0]:g}..{target[1]:g}")


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
            UINT8_MODE, *READING),
    plan=plan,
    chooses_format=True,
    warmup=warmup,
)

"""noa scale: values mapped linearly from their minimum and maximum (or two percentiles, beyond which they are
clamped) onto a target range, in the output's element type; a tilt series' angle, mdoc and STAR files follow as they
are."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from noa_core.array import asarray
from noa_core.compute.conversion import convert_into
from noa_core.errors import ShapeError
from noa_core.images import intensity, statistics
from noa_core.operations.plan import tiled_plan
from noa_core.operations.spec import Inputs, Options
from noa_core.tomography import beside


def source_range(array, path: Path, percentiles) -> tuple[float, float]:
    """The values mapped onto the target's ends: the data's minimum and maximum, or its percentiles
    (streamed: see :mod:`noa_core.images.statistics`), remembered per file."""

    def compute() -> tuple[float, float]:
        stats = statistics.whole_statistics(array)
        statistics.check_finite(stats, str(path))
        if percentiles is None:
            return float(cast(float, stats.moments.min)), float(cast(float, stats.moments.max))  # real, finite
        low, high = statistics.percentiles(array, percentiles, stats)
        return low, high

    return statistics.remembered(path, ("range", array.shape, percentiles), compute)


def plan(inputs: Inputs, options: Options):
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

    side_files, notices = beside.unchanged(inputs, options, array.shape)
    return tiled_plan(options, inputs=inputs, read=[array], compute=compute, meta=meta, dtype=out_dtype,
                      detail=f"{ends[0]:.6g}..{ends[1]:.6g} -> {target[0]:g}..{target[1]:g}", notices=notices,
                      side_files=side_files)

"""noa normalize: values shifted and scaled to a mean and standard deviation measured over the file or per
section, or each particle image from its own background as relion_preprocess --norm does; a tilt series' angle, mdoc
and STAR files follow as they are."""

from __future__ import annotations

from typing import cast

import numpy as np

from noa_core.array import asarray
from noa_core.compute.conversion import convert_into
from noa_core.errors import ShapeError, ValueRangeError
from noa_core.images import intensity, statistics
from noa_core.operations.plan import region_plan, whole_image_plan
from noa_core.operations.spec import Inputs, Options
from noa_core.tomography import beside


def plan(inputs: Inputs, options: Options):
    # RELION's normalisation reads its images by tiles alone; the others measure the whole input first
    array, meta = inputs.open(inputs[0], tiles=options.bg_radius is not None)
    intensity.check_real_input(array.dtype, str(inputs[0]))
    intensity.check_normal(options.mean, options.std)
    intensity.check_background_options(options.bg_radius, options.ramp, options.white_dust, options.black_dust)
    if array.size == 0:
        raise ShapeError(f"{inputs[0]}: the array of shape {array.shape} is empty")
    side_files, notices = beside.unchanged(inputs, options, array.shape)
    if options.bg_radius is not None:
        return background_plan(inputs, options, array, meta, notices, side_files)
    b, d, _h, _w = array.shape

    def measure() -> list[tuple[float, float]]:
        found = statistics.section_statistics(array) if options.per_section else [statistics.whole_statistics(array)]
        for stats in found:
            statistics.check_finite(stats, str(inputs[0]))
        return [(float(cast(float, s.moments.mean)), cast(float, s.result().rms)) for s in found]  # real, finite

    what = ("mean-std", array.shape, options.per_section)
    moments: list[tuple[float, float]] = statistics.remembered(inputs[0], what, measure)
    out_dtype = intensity.real_output_dtype(array.dtype)
    to_mean, to_std = options.mean, options.std

    def reads(key):
        def compute(blocks, out) -> None:
            values = blocks[0].numpy()
            if not options.per_section:
                result = intensity.normalized(values, *moments[0], to_mean, to_std)
            else:  # each section of the tile with its own mean and standard deviation
                result = values.astype("float64")
                for i, bi in enumerate(range(*key[0].indices(b))):
                    for j, di in enumerate(range(*key[1].indices(d))):
                        mean, std = moments[bi * d + di]
                        result[i, j] = intensity.normalized(values[i, j], mean, std, to_mean, to_std)
            convert_into(asarray(result), out, mode="checked")

        return [array[key]], compute

    return region_plan(options, inputs=inputs, read=[array], meta=meta, shape=array.shape, reads=reads,
                       dtype=out_dtype, read_factor=3.0, notices=notices, side_files=side_files)


def background_plan(inputs: Inputs, options: Options, array, meta, notices: list[str], side_files):
    """RELION's particle normalisation: whole images (volumes) per tile, each from its own background."""
    images = intensity.particle_images(array.shape, options.per_section)
    bg = intensity.background(images[1:], options.bg_radius, options.ramp)
    per_entry = array.shape[1] if len(images) == 3 else 1  # images in one batch entry

    def normalised(block, key):
        values = block.numpy()
        if not np.isfinite(values).all():
            raise ValueRangeError(f"{inputs[0]}: the data hold NaN or infinite values; this needs finite values")
        first = key[0].indices(array.shape[0])[0] * per_entry  # the index of the tile's first image
        t = intensity.background_normalized(values.reshape(-1, *images[1:]), bg, options.white_dust,
                                            options.black_dust, first, options.mean, options.std)
        return t.reshape(values.shape)

    return whole_image_plan(options, inputs=inputs, array=array, shape=array.shape, meta=meta, images=normalised,
                            working=2.0, dtype=intensity.real_output_dtype(array.dtype), notices=notices,
                            side_files=side_files)

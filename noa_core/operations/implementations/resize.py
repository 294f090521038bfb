"""noa resize: a crop or pad about the centre N//2; new voxels take the fill value (the input's mean by default),
and the origin moves so that the content stays where it was. A tilt series' angle, mdoc and STAR files follow with
the new image size where its sections are kept."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from noa_core import limits
from noa_core.compute.tiles import plan_tile, tiles
from noa_core.images import boxes, stacks
from noa_core.io import mapped
from noa_core.operations.plan import region_plan
from noa_core.operations.spec import Inputs, Options
from noa_core.tomography import beside


def plan(inputs: Inputs, options: Options):
    array, meta = inputs.open(inputs[0])  # a missing or unreadable file is named first
    target = boxes.resize_shape(array.shape, options.shape)
    limits.check_output_size(target, array.itemsize, str(inputs[0]))  # before anything sized by it is made
    value = boxes.fill_value(options.fill, array.dtype, lambda: 0.0)  # a bad --fill is refused before any output
    if any(m > n for m, n in zip(target, array.shape)):  # it pads: the mean is read now, before any tile
        value = boxes.fill_value(options.fill, array.dtype, _input_mean(inputs[0], options, array))
    out_meta = boxes.resize_metadata(meta, array.shape, target)
    same_sections = tuple(target[:2]) == tuple(array.shape[:2])
    kept = range(array.shape[stacks.section_axis(array.shape)]) if same_sections else None
    side_files, notices = beside.in_step(inputs, options, array.shape, kept, image_size=(target[3], target[2]),
                                            why_not="it changes the number of sections")
    return region_plan(options, inputs=inputs, read=[array], meta=out_meta, shape=target,
                       reads=boxes.resize_reads(array, target, lambda: value), notices=notices, side_files=side_files)


_MEANS: dict[tuple, complex | float] = {}


def _input_mean(path: Path, options: Options, array):
    """The mean of the input's data (one streaming pass, bounded memory), remembered per file version so
    that the split tasks of one output (each plans again) compute it once per process."""

    def compute() -> float | complex:
        try:
            info = os.stat(path)
            key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, options.as_stack, options.series,
                   options.channel, options.level)
        except OSError:
            key = None
        if key is not None and key in _MEANS:
            return _MEANS[key]
        # Tile by tile with pread (bounded memory; a file truncated meanwhile is an error, not SIGBUS),
        # summed in float64 (complex128), as NumPy's mean.
        total = np.complex128(0) if array.dtype.kind == "c" else np.float64(0)
        tile = plan_tile(array.shape, [(array.strides, array.itemsize)])
        with mapped.scratch_buffers():
            for region in tiles(array.shape, tile, array.strides):
                block = mapped.read_view(array[region].numpy())
                total += np.add.reduce(block, axis=None, dtype=total.dtype)
        mean = total / max(array.size, 1)
        if key is not None:
            if len(_MEANS) > 64:
                _MEANS.clear()
            _MEANS[key] = mean
        return mean

    return compute

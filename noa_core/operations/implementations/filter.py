"""noa filter: each image (volume) multiplied in Fourier space by RELION's band-pass and B-factor weights; the
output is float32 of the input's shape and header; a tilt series' angle, mdoc and STAR files follow as they are."""

from __future__ import annotations

import numpy as np

from noa_core.errors import ParameterError
from noa_core.fourier import spectral
from noa_core.operations.plan import whole_image_plan
from noa_core.operations.spec import Inputs, Options
from noa_core.tomography import beside


def plan(inputs: Inputs, options: Options):
    array, meta = inputs.open_real(inputs[0], "filter")
    # relion_image_handler reads --angpix and --bfactor as float32 (textToFloat), so these are too: a sample
    # exactly at Nyquist then lands on the side of RELION's test that RELION's does (--angpix 1.3 at N = 20 keeps
    # |k| = N/2; a header's 1.3, double(float32 cell) / N as RELION reads it too, does not).
    bfactor = float(np.float32(options.bfactor or 0.0))
    pixel = options.input_pixel_size(meta)
    if options.get("angpix") is not None:
        pixel = float(np.float32(pixel))
    try:
        pixel = spectral.check_bandpass(options.lowpass, options.highpass, pixel, options.edge_width, bfactor)
    except ParameterError as exc:
        if exc.param == "pixel_size":  # the file's: say which option gives it
            raise ParameterError(f"{inputs[0]}: the pixel size is unknown; give it with angpix (Å)", "angpix") from None
        raise
    ndim = 3 if array.shape[1] > 1 else 2
    weights = None

    def images(block, key):
        nonlocal weights
        if weights is None:  # the same for every tile: computed once per plan
            sizes = block.shape[4 - ndim:]
            weights = spectral.bandpass_weights(sizes, pixel, options.lowpass, options.highpass, options.edge_width,
                                                bfactor, spectral.weights_module(block))
        axes = (2, 3) if ndim == 2 else (1, 2, 3)
        return spectral.multiply_spectrum(block, axes, weights).numpy()

    side_files, notices = beside.unchanged(inputs, options, array.shape)
    return whole_image_plan(options, inputs=inputs, array=array, shape=array.shape, meta=meta, images=images,
                            working=3.0, notices=notices, side_files=side_files)

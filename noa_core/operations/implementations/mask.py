"""noa mask: a float32 mask in the input's box, from the map's values as relion_mask_create makes it (low-pass,
threshold, extend, soft edge) or a sphere or cylinder about the centre N//2."""

from __future__ import annotations

from noa_core.errors import ParameterError, ShapeError
from noa_core.fourier import spectral
from noa_core.geometry import masks
from noa_core.operations.plan import whole_image_plan
from noa_core.operations.spec import Inputs, Options

SHAPES = ("threshold", "sphere", "cylinder")  # what the mask is made from: one of them
MAP_ONLY = ("extend", "lowpass", "angpix")  # what only a mask of the map's values takes
THRESHOLD_WORKING = 12.0  # float32-output-sized buffers: the low-passed map, distance transforms (see masks.py)
SHAPE_WORKING = 5.0  # the distances from the centre and the mask, float64


def check_options(options: Options) -> str:
    """Which of :data:`SHAPES` the options ask for, after checking they fit together."""
    given = [name for name in SHAPES if options.get(name) is not None]
    if len(given) != 1:
        said = f": {' and '.join(given)} were given" if given else ""
        raise ParameterError(f"give one of threshold (a mask of the map's values), sphere or cylinder{said}",
                             given[-1] if given else "threshold")
    kind = given[0]
    if options.get("height") is not None and kind != "cylinder":
        raise ParameterError("a height is the length of a cylinder: give it with cylinder", "height")
    if kind != "threshold":
        for name in MAP_ONLY:
            if options.get(name):
                raise ParameterError(f"applies to a mask of the map's values (threshold), not to a {kind}", name)
    return kind


def plan(inputs: Inputs, options: Options):
    kind = check_options(options)
    array, meta = inputs.open_real(inputs[0], "mask")
    batch, depth = array.shape[0], array.shape[1]
    if batch > 1:
        what = "volumes" if depth > 1 else "images"
        raise ShapeError(f"{inputs[0]}: the input of shape {array.shape} is a stack of {batch} {what}; noa mask "
                         "takes one volume or one image (pick one with noa sections)")
    box = array.shape[1:] if depth > 1 else array.shape[2:]
    if kind == "cylinder" and depth == 1:
        raise ShapeError(f"{inputs[0]}: the input of shape {array.shape} is an image; a cylinder runs along Z "
                         "through a volume: give sphere for a disc")
    pixel = None
    if options.get("lowpass") is not None:
        try:
            pixel = spectral.check_bandpass(options.lowpass, None, options.input_pixel_size(meta))
        except ParameterError as exc:
            if exc.param == "pixel_size":  # the file's: say which option gives it
                raise ParameterError(f"{inputs[0]}: the pixel size is unknown; give it with angpix (Å)",
                                     "angpix") from None
            raise

    def images(block, key):
        if kind == "sphere":
            mask = masks.sphere(box, options.sphere, options.soft_edge)
        elif kind == "cylinder":
            mask = masks.cylinder(box, options.cylinder, options.height, options.soft_edge)
        else:
            values = block.numpy().reshape(box)
            if pixel is not None:  # in float64, as RELION filters: the threshold then cuts the same voxels
                values = spectral.bandpass(values.astype(float).reshape(block.shape), options.lowpass,
                                           pixel_size=pixel).numpy().reshape(box)
            mask = masks.threshold_mask(values, options.threshold, extend=options.extend, width=options.soft_edge,
                                        what=str(inputs[0]) + (" low-passed" if pixel is not None else ""))
        if options.invert:
            mask = 1.0 - mask
        return mask.reshape(block.shape)

    working = THRESHOLD_WORKING if kind == "threshold" else SHAPE_WORKING
    return whole_image_plan(options, inputs=inputs, array=array, shape=array.shape, meta=meta, images=images,
                            working=working)

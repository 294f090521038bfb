"""noa rescale: each image (volume) Fourier-rescaled to an even box, noa's way or RELION's, then optionally
windowed about the centre; the header gets the pixel size that results, and the origin keeps the content in place."""

from __future__ import annotations

import math

from noa_core.errors import ParameterError
from noa_core.fourier import resampling
from noa_core.images import boxes
from noa_core.operations.plan import whole_image_plan
from noa_core.operations.rescale import MAX_FACTOR
from noa_core.operations.spec import Inputs, Options


def plan(inputs: Inputs, options: Options):
    array, meta = inputs.open_real(inputs[0], "rescale")
    like = options.like
    if (options.factor is None) == (options.pixel_size is None):
        only_window = " (to window only, use noa resize --fill zero)" if options.new_box is not None else ""
        raise ParameterError(f"give either --pixel-size (Å) or --factor{only_window}", "pixel_size")
    if options.factor is not None:
        factor, words = options.factor, f"--factor {options.factor:g}"
    else:
        source = options.input_pixel_size(meta)
        if source is None:
            raise ParameterError(f"{inputs[0]}: the pixel size is unknown; give it with angpix (Å), or use factor",
                                 "angpix")
        factor = resampling.pixel_factor(source, options.pixel_size, like)
        words = f"--pixel-size {options.pixel_size:g}"
        if not factor <= MAX_FACTOR:  # the bound --factor has, for the factor a pixel size implies
            raise ParameterError(f"{options.pixel_size:.4g} Å from {source:.4g} Å would scale by {factor:.4g}; at most "
                                 f"{MAX_FACTOR:g} (a pixel size of at least {source / MAX_FACTOR:.4g} Å)", "pixel_size")
    ndim = 3 if array.shape[1] > 1 else 2
    axes = (2, 3) if ndim == 2 else (1, 2, 3)
    box = resampling.rescaling([array.shape[a] for a in axes], factor, like)
    rescaled = list(array.shape)
    for a, n in zip(axes, box.sizes):
        rescaled[a] = n
    rescaled = tuple(rescaled)
    if like == "relion":
        words += " --like relion"
    shape = rescaled
    # RELION windows only when the width differs from --new_box (image_handler.cpp): --like relion does too
    if options.new_box is not None and not (like == "relion" and rescaled[3] == options.new_box):
        shape = boxes.resize_shape(rescaled, (options.new_box,) * ndim)
        words += f" --new-box {options.new_box}"

    # Pixel sizes and origin (IMOD's: coordinate = i * pixel - origin) per D, H, W, in the header's unit, or
    # in Å where --angpix gives the input's pixel size: output sample 0 lies at input sample `start`, then
    # the window moves it by its offset (as noa resize), so the content stays in place.
    if options.get("angpix") is not None:
        old_pixel, old_origin, unit = (options.angpix,) * 3, meta.in_angstrom()[1], "Å"
    else:
        old_pixel, old_origin, unit = meta.pixel_size, meta.origin, meta.unit
    spacing, start = [1.0] * 3, [0.0] * 3
    for a, s, t in zip(axes, box.spacing, box.start):
        spacing[a - 1], start[a - 1] = s, t
    pixel = tuple(p * s for p, s in zip(old_pixel, spacing))
    offsets = boxes.resize_offsets(rescaled, shape)[1:]
    origin = tuple(o - t * p - k * q for o, t, p, k, q in zip(old_origin, start, old_pixel, offsets, pixel))
    out_meta = meta.resampled(shape, pixel)
    out_meta.origin, out_meta.unit = origin, unit

    notices = ()
    asked = [array.shape[a] * factor for a in axes]
    if any(abs(n - a) > 1e-6 * a for n, a in zip(box.sizes, asked)):  # the even box rounds the scale
        got = pixel[3 - ndim:]
        pixel_words = (f", so the pixel size is {', '.join(f'{p:g}' for p in got)} {unit or ''}".rstrip()
                       if all(got) else "")
        notices = (f"rescale {words}: {' x '.join(map(str, (array.shape[a] for a in axes)))} pixels became "
                   f"{' x '.join(map(str, box.sizes))} (even, as RELION rounds){pixel_words}",)

    def images(block, key):
        out = resampling.rescale(block, factor, ndim=ndim, like=like)
        if shape != rescaled:  # RELION's --new_box: zeros beyond the rescaled box
            out = boxes.resize(out, shape[4 - ndim:], fill="zero")
        return out.numpy()

    # Each image is computed at its rescaled size (like RELION: as the square of its largest side) before
    # any window: what one image holds is counted from that.
    side = max(array.shape[a] for a in axes)
    square = resampling.rescaled_sizes([side], factor)[0] ** ndim if like == "relion" else 0
    computed = max(math.prod(rescaled[1:]), square)
    return whole_image_plan(options, inputs=inputs, array=array, shape=shape, meta=out_meta, images=images,
                            working=2.0, computed_voxels=computed, notices=notices)

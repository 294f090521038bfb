"""noa rescale: Fourier-rescale images (or volumes) to a pixel size or by a factor, to an even box, noa's way
(scipy.signal.resample) or RELION's; optionally windowed to a new box about the centre."""

from __future__ import annotations

import math

from noa_core.operations.spec import PIXEL_SIZE, READING, Choice, Inputs, Integer, Options, Param, Real, Writes

MAX_FACTOR = 64.0  # the most an axis may grow: 64 x 64 the pixels of an image


def plan(inputs: Inputs, options: Options):
    from noa_core.images import boxes
    from noa_core.fourier import resampling
    from noa_core.errors import ParameterError
    from noa_core.operations.plan import whole_image_plan

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
        factor, words = resampling.pixel_factor(source, options.pixel_size, like), f"--pixel-size {options.pixel_size:g}"
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


OPERATION = Writes(
    name="rescale",
    summary="Fourier-rescale images (volumes in 3-d) to a pixel size or by a factor, to an even box as RELION does; "
            "noa's way or RELION's, then optionally windowed to a new box.",
    details="The new size of each axis is round(size x factor) made even (RELION's --rescale_angpix), where the "
            "factor is the input's pixel size over --pixel-size. Values keep their scale; the output is float32. "
            "--like noa (default): each axis's Fourier transform is cropped or zero-padded on its own, the Nyquist "
            "bins +N/2 and -N/2 of an even size folded together (shrinking) or split in halves (enlarging): "
            "scipy.signal.resample along each axis. --like relion: RELION 3.1.3's relion_image_handler "
            "--rescale_angpix (resizeMap): a non-square image is padded with zeros to a square about its centre "
            "N//2 and scaled as one square of the larger side (then cropped about the centre to round(size x "
            "new / old) made even per axis); shrinking keeps only +N/2 of an even new size; enlarging keeps the "
            "sphere of radius old N//2 (zero beyond); pixel sizes are read as float32, as RELION reads them; "
            "volumes must be cubic. --new-box N then crops or zero-pads each image (D, H, W of a volume) to N "
            "about the centre N//2, as RELION's --new_box (noa resize --fill zero); with --like relion, as "
            "RELION, only where the width is not already N. The header gets the pixel size that results "
            "(input pixel size x old / new size; of the square side with --like relion, as RELION writes it on X "
            "and Y) and the origin moves so that the content stays in place; RELION writes "
            "origin 0, takes 1 Å where the header has 0 and writes a Z pixel size of 0 for single images, "
            "whereas noa keeps the others as they were (unknown stays unknown).",
    examples=("noa rescale particles.mrcs particles_2A.mrcs --pixel-size 2.0",
              "noa rescale map.mrc map_half.mrc --factor 0.5",
              "noa rescale particles.mrcs small.mrcs --pixel-size 3.0 --new-box 64 --like relion"),
    params=(Param("pixel_size", PIXEL_SIZE, "Target pixel size in Å."),
            Param("factor", Real(0.0, MAX_FACTOR), "Size factor instead: 0.5 halves every axis (the pixel size doubles)."),
            Param("angpix", PIXEL_SIZE, "Pixel size of the input in Å, when the header's is unknown or wrong."),
            Param("like", Choice(("noa", "relion")),
                  "noa: scipy.signal.resample per axis (Nyquist bins folded or split); relion: "
                  "relion_image_handler --rescale_angpix (3.1.3), within 1e-5 of its output.", default="noa"),
            Param("new_box", Integer(1, 2**31 - 1),
                  "After rescaling, crop or zero-pad each image (volume) to N x N (x N) about the centre N//2, "
                  "as RELION's --new_box."),
            *READING),
    plan=plan,
)

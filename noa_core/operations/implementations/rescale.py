"""noa rescale: each image (volume) Fourier-rescaled to an even box, noa's way or RELION's, then optionally
windowed about the centre; the header gets the pixel size that results, and the origin keeps the content in place.
A tilt series' angle, mdoc and STAR files follow, with that pixel size (none for a volume, whose sections are
resampled too).

That header rule (:func:`header`) serves Python too: ``noa_core.rescale`` and ``noa_core.fourier_resize`` are
:mod:`noa_core.fourier.resampling`'s functions made to take an ``(array, metadata)`` pair and return an
:class:`~noa_core.images.image.Image` with the header this operation writes."""

from __future__ import annotations

import math
from collections.abc import Sequence

from noa_core.array import Array, asarray
from noa_core.errors import ParameterError
from noa_core.fourier import fft, resampling
from noa_core.images import boxes
from noa_core.images.image import Image, ImageInput, split_pair
from noa_core.io.metadata import Metadata
from noa_core.operations.plan import whole_image_plan
from noa_core.operations.rescale import MAX_FACTOR
from noa_core.operations.spec import Inputs, Options
from noa_core.tomography import beside


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
    sizes = list(array.shape)
    for a, n in zip(axes, box.sizes):
        sizes[a] = n
    rescaled = tuple(sizes)
    if like == "relion":
        words += " --like relion"
    shape: Sequence[int] = rescaled
    # RELION windows only when the width differs from --new_box (image_handler.cpp): --like relion does too
    if options.new_box is not None and not (like == "relion" and rescaled[3] == options.new_box):
        shape = boxes.resize_shape(rescaled, (options.new_box,) * ndim)
        words += f" --new-box {options.new_box}"

    out_meta = header(meta, array.shape, box, shape, options.get("angpix"))

    notices: list[str] = []
    asked = [array.shape[a] * factor for a in axes]
    if any(abs(n - a) > 1e-6 * a for n, a in zip(box.sizes, asked)):  # the even box rounds the scale
        got = out_meta.pixel_size[3 - ndim:]
        pixel_words = (f", so the pixel size is {', '.join(f'{p:g}' for p in got)} {out_meta.unit or ''}".rstrip()
                       if all(got) else "")
        notices.append(f"rescale {words}: {' x '.join(map(str, (array.shape[a] for a in axes)))} pixels became "
                   f"{' x '.join(map(str, box.sizes))} (even, as RELION rounds){pixel_words}")
    side_files, told = beside.in_step(inputs, options, array.shape, range(array.shape[0]) if ndim == 2 else None,
                                         image_size=(shape[3], shape[2]), pixel_scale=box.spacing[-1],
                                         why_not="a volume's sections are resampled too")
    notices.extend(told)

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
                            working=2.0, computed_voxels=computed, notices=notices, side_files=side_files)


def header(meta: Metadata, shape: Sequence[int], box: resampling.Rescaling, target: Sequence[int],
           pixel_size: float | None = None) -> Metadata:
    """The header of ``shape`` Fourier-rescaled as ``box`` says (:func:`~noa_core.fourier.resampling.rescaling`, on
    the last ``len(box.sizes)`` axes), then windowed about the centre to ``target``: the pixel size times the
    spacing, and IMOD's origin (coordinate = i * pixel - origin) keeping the content in place (output sample 0 lies
    at input sample ``start``, then the window moves it by its offset, as noa resize). In the header's unit, or in
    Å where ``pixel_size`` gives the input's (RELION's --angpix)."""
    axes = range(4 - len(box.sizes), 4)
    rescaled = list(shape)
    for a, n in zip(axes, box.sizes):
        rescaled[a] = n
    old_pixel: tuple[float, ...]
    unit: str | None
    if pixel_size is not None:
        old_pixel, old_origin, unit = (pixel_size,) * 3, meta.in_angstrom()[1], "Å"
    else:
        old_pixel, old_origin, unit = meta.pixel_size, meta.origin, meta.unit
    spacing, start = [1.0] * 3, [0.0] * 3
    for a, s, t in zip(axes, box.spacing, box.start):
        spacing[a - 1], start[a - 1] = s, t
    pixel = tuple(p * s for p, s in zip(old_pixel, spacing))
    offsets = boxes.resize_offsets(rescaled, target)[1:]
    origin = tuple(o - t * p - k * q for o, t, p, k, q in zip(old_origin, start, old_pixel, offsets, pixel))
    out = meta.resampled(target, pixel)
    out.origin, out.unit = origin, unit
    return out


def rescale(array: ImageInput, factor: float | None = None, *, pixel_size: float | None = None,
            from_pixel_size: float | None = None, ndim: int | None = None, like: str = "noa") -> Array | Image:
    """:func:`noa_core.fourier.resampling.rescale`; given an ``(array, metadata)`` pair, an
    :class:`~noa_core.images.image.Image` with the header noa rescale writes for the same call (:func:`header`).
    Then ``pixel_size`` rescales from the header's pixel size (its width axis', in Å), or from ``from_pixel_size``
    where given, which the header then takes as the input's (in Å, as noa rescale's angpix).

    Args:
        array: real images or volumes, or an ``(array, metadata)`` pair.
        factor: new size over old size, finite and above 0 (exactly one of ``factor`` and ``pixel_size``).
        pixel_size: the output's pixel size (Å).
        from_pixel_size: the input's pixel size (Å); with a pair, default the header's.
        ndim: 2 (each image) or 3 (each volume); default 3 for volumes, else 2.
        like: 'noa' (``scipy.signal.resample`` along each axis) or 'relion' (RELION 3.1.3's output).

    Returns:
        A new array of the even rescaled box (float32; float64 for float64 data), or an Image with its header
        (the pixel size that results, the content in place).

    Raises:
        ParameterError: neither or both of ``factor`` and ``pixel_size``, a factor or pixel size that is not a
            finite number above 0, an unknown input pixel size, an ``ndim`` other than 2 or 3, or an unknown
            ``like``.
        ShapeError: a size falling below 2 pixels, or a pair whose metadata describes another shape than its
            array's.
        DTypeError: complex, vector or matrix elements.
    """
    value, meta = split_pair(array)
    if meta is None:
        return resampling.rescale(value, factor, pixel_size=pixel_size, from_pixel_size=from_pixel_size, ndim=ndim,
                                  like=like)
    source = from_pixel_size if from_pixel_size is not None else meta.width_pixel_size()
    out = resampling.rescale(value, factor, pixel_size=pixel_size, from_pixel_size=source, ndim=ndim, like=like)
    if factor is None:
        assert source is not None and pixel_size is not None  # else resampling.rescale refused the call
        factor = resampling.pixel_factor(source, pixel_size, like)
    shape = asarray(value).shape
    box = resampling.rescaling([shape[a] for a in fft.transform_axes(shape, ndim)], factor, like)
    return Image(out, header(meta, shape, box, out.shape, from_pixel_size))


def fourier_resize(array: ImageInput, shape: Sequence[int], *, ndim: int | None = None,
                   like: str = "noa") -> Array | Image:
    """:func:`noa_core.fourier.resampling.fourier_resize`; given an ``(array, metadata)`` pair, an
    :class:`~noa_core.images.image.Image` whose header is :func:`header`'s for that box: the pixel size times the
    old size over the new, sample 0 in place.

    Args:
        array: real images or volumes, or an ``(array, metadata)`` pair.
        shape: the new sizes: (H, W), (D, H, W) or BDHW (batch, and depth for 2-d, stay), each at least 1.
        ndim: 2 (each image) or 3 (each volume); default 3 for volumes, else 2.
        like: 'noa' (each axis windowed on its own) or 'relion' (RELION 3.1.3's resizeMap; square boxes).

    Returns:
        A new array of the new shape (float32; float64 for float64 data), values keeping their scale, or an Image
        with its header.

    Raises:
        ParameterError: an ``ndim`` other than 2 or 3, or an unknown ``like``.
        ShapeError: sizes that do not match the transform's axes or are below 1, boxes that are not square with
            'relion', or a pair whose metadata describes another shape than its array's.
        DTypeError: complex, vector or matrix elements.
    """
    value, meta = split_pair(array)
    out = resampling.fourier_resize(value, shape, ndim=ndim, like=like)
    if meta is None:
        return out
    before = asarray(value).shape
    axes = fft.transform_axes(before, ndim)
    sizes = tuple(out.shape[a] for a in axes)
    box = resampling.Rescaling(sizes, tuple(before[a] / n for a, n in zip(axes, sizes)), (0.0,) * len(axes))
    return Image(out, header(meta, before, box, out.shape))

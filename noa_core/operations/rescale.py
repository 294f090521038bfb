"""noa rescale: Fourier-rescale images (or volumes) to a pixel size or by a factor, to an even box."""

from __future__ import annotations

from pathlib import Path

from noa_core.operations.spec import READING, Operation, Options, Param, Real


def plan(inputs: list[Path], options: Options):
    from noa_core import fft
    from noa_core.errors import ParameterError
    from noa_core.operations.filter import input_pixel_size, real_input, whole_image_plan

    array, meta = real_input(inputs[0], options, "rescale")
    if (options.factor is None) == (options.pixel_size is None):
        raise ParameterError("give either --pixel-size (Å) or --factor", "pixel_size")
    if options.factor is not None:
        factor, words = options.factor, f"--factor {options.factor:g}"
    else:
        source = input_pixel_size(meta, options)
        if source is None:
            raise ParameterError(f"{inputs[0]}: the pixel size is unknown; give it with angpix (Å), or use factor",
                                 "angpix")
        factor, words = source / options.pixel_size, f"--pixel-size {options.pixel_size:g}"
    ndim = 3 if array.shape[1] > 1 else 2
    axes = (2, 3) if ndim == 2 else (1, 2, 3)
    sizes = fft.rescaled_sizes([array.shape[a] for a in axes], factor)
    shape = list(array.shape)
    for a, n in zip(axes, sizes):
        shape[a] = n
    shape = tuple(shape)
    # The pixel size that results (RELION writes this exact value, not the one asked for).
    pixel = tuple(p * old / new if p > 0 else 0.0 for p, old, new in zip(meta.pixel_size, array.shape[1:], shape[1:]))
    out_meta = meta.resampled(shape, pixel)
    if options.get("angpix") is not None:  # the size given, in Å, replaces the header's
        out_meta.pixel_size = tuple(options.angpix * old / new for old, new in zip(array.shape[1:], shape[1:]))
        out_meta.origin = meta.in_angstrom()[1]
        out_meta.unit = "Å"

    notices = ()
    asked = [array.shape[a] * factor for a in axes]
    if any(abs(n - a) > 1e-6 * a for n, a in zip(sizes, asked)):  # the even box rounds the scale
        got = out_meta.pixel_size[3 - len(sizes):]
        pixel_words = (f", so the pixel size is {', '.join(f'{p:g}' for p in got)} {out_meta.unit or ''}".rstrip()
                       if all(got) else "")
        notices = (f"rescale {words}: {' x '.join(map(str, (array.shape[a] for a in axes)))} pixels became "
                   f"{' x '.join(map(str, sizes))} (even, as RELION rounds){pixel_words}",)

    def images(block, key):
        from noa_core import fft as noa_fft

        return noa_fft.resize(block, sizes, ndim=ndim).numpy()

    return whole_image_plan(inputs, array, shape, out_meta, f"noa rescale {words}", images, working=4.0,
                            notices=notices)


OPERATION = Operation(
    name="rescale",
    summary="Fourier-rescale images (volumes in 3-d) to a pixel size or by a factor, to an even box as RELION does.",
    details="The new size of each axis is round(size x factor) made even (RELION's --rescale_angpix), where the "
            "factor is the input's pixel size over --pixel-size; the header gets the exact pixel size that results "
            "(input size x old / new). The Fourier transform is cropped (or zero-padded), Nyquist bins folded (or "
            "split), values keep their scale. The output is float32.",
    examples=("noa rescale particles.mrcs particles_2A.mrcs --pixel-size 2.0",
              "noa rescale map.mrc map_half.mrc --factor 0.5"),
    params=(Param("pixel_size", Real(0.0), "Target pixel size in Å."),
            Param("factor", Real(0.0, 64.0), "Size factor instead: 0.5 halves every axis (the pixel size doubles)."),
            Param("angpix", Real(0.0), "Pixel size of the input in Å, when the header's is unknown or wrong."),
            *READING),
    plan=plan,
)

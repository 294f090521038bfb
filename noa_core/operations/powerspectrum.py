"""noa powerspectrum: the centred power spectrum of each image (volumes in 3-d), or its rotational average."""

from __future__ import annotations

from pathlib import Path

from noa_core.operations.spec import READING, Flag, Operation, Options, Param


def plan(inputs: list[Path], options: Options):
    from noa_core.operations.filter import output_dtype, whole_image_plan

    array, meta = options.open_input(inputs[0])
    ndim = 3 if array.shape[1] > 1 else 2
    shape = array.shape
    out_meta = meta
    if options.rotavg:
        shells = min(shape[4 - ndim:]) // 2 + 1
        shape = (shape[0], 1, 1, shells)
        # Shells are frequencies, not pixels: no pixel size, no origin.
        out_meta = meta.resampled(shape, (0.0, 0.0, 0.0))
        out_meta.origin = (0.0, 0.0, 0.0)
    dtype = output_dtype(array)

    def images(block, key):
        from noa_core import signal

        return signal.power_spectrum(block, rotational_average=options.rotavg, log=options.log, ndim=ndim).numpy()

    words = " ".join(w for w, on in (("--rotavg", options.rotavg), ("--log", options.log)) if on)
    return whole_image_plan(inputs, array, shape, out_meta, f"noa powerspectrum {words}".strip(), images,
                            working=4.0, dtype=dtype)


OPERATION = Operation(
    name="powerspectrum",
    summary="Centred power spectrum |F|^2/N of each image (volumes in 3-d), optionally log or rotationally averaged.",
    details="The full H x W spectrum (D x H x W for volumes) with the zero frequency at (H//2, W//2), as "
            "numpy.fft.fftshift places it: Thon rings stay round and both halves are there to compare. --rotavg "
            "writes the mean over each shell round(|f| x min(H, W)) instead, min(H, W)//2 + 1 values per image "
            "(shape B,1,1,S). --log writes the natural logarithm. The output is float32 (complex inputs too).",
    examples=("noa powerspectrum micrograph.mrc ps.mrc --log", "noa powerspectrum micrographs.mrcs profiles.mrc --rotavg"),
    params=(Param("rotavg", Flag(), "Write the rotational average (one value per Fourier shell) instead.", default=False),
            Param("log", Flag(), "Write the natural logarithm of the power.", default=False),
            *READING),
    plan=plan,
)

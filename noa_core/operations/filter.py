"""noa filter: RELION's band-pass (low-pass, high-pass, raised-cosine edge) and B-factor, per image or volume.

Also home of :func:`whole_image_plan`, the plan that rescale, powerspectrum and transform share: every
output tile holds whole images (stacks) or whole volumes, read from the same batch entries.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from noa_core.operations.spec import READING, Operation, Options, Param, Real

WHOLE = (1, 2, 3)  # every tile spans D, H and W: whole images of a stack (D = 1), whole volumes


def real_input(path: Path, options: Options, name: str):
    """The input array and metadata; complex data are refused (these operations take real images)."""
    from noa_core.errors import DTypeError

    array, meta = options.open_input(path)
    if array.dtype.kind == "c":
        raise DTypeError(f"{path}: {name} takes real images; the file holds {array.dtype} values")
    return array, meta


def output_dtype(array):
    """float32, whatever the input (float64 inputs are computed in float64): every format stores it, MRC
    has no float64, and it holds what these operations give (resampled, filtered or interpolated values)."""
    import numpy as np

    return np.dtype(np.float32)


GROUP_BYTES = 32 << 20  # what a tile's computation holds at a time (see image_memory); one image at least


def image_memory(in_bytes: int, out_bytes: int, working: float) -> int:
    """The bytes computing one image holds at once: the image read and a transformed (or float) copy of it,
    the output tile being filled and the one being written, and ``working`` output-sized buffers (FFT
    spectra, the result before it is copied into the tile)."""
    import math

    return math.ceil(2 * in_bytes + (2 + working) * out_bytes)


def whole_image_plan(inputs: list[Path], array, out_shape, out_meta, label: str, images: Callable | None = None,
                     working: float = 1.0, dtype=None, fill: Callable | None = None, notices: tuple[str, ...] = (),
                     computed_voxels: int | None = None):
    """A plan whose tile over batch entries ``key[0]`` is ``images(block, key)`` (a NumPy array of the
    output tile's shape) for ``block`` the input's same batch entries, whole; or ``fill(block, key, out)``
    fills the output tile ``out`` itself (on the device the task runs on).

    One image (volume) and its output are held in memory whole, with ``working`` output-sized buffers
    beyond the output tile (FFT spectra, a result then copied): :func:`image_memory`. Before anything is
    planned, that is checked against the service's voxel limit and the memory the machine has available
    (:func:`noa_core.limits.check_working_memory`: LimitError), so an output that grows with a parameter
    (rescale --factor 64) is refused rather than computed into swap. A tile's images are read (with pread,
    as the engine reads) and computed a group of about :data:`GROUP_BYTES` of that memory at a time, so
    memory stays bounded even where the output is much smaller than the input (a rotational average: a
    few KiB per image); ``working`` also shrinks the tiles with the reads (``read_factor``).
    ``computed_voxels``: the voxels of one image as computed, where that is more than the output keeps
    (rescale's box before its window)."""
    import math

    import numpy as np

    from noa_core.array import asarray
    from noa_core.errors import ValueRangeError
    from noa_core.io import mapped
    from noa_core.limits import check_output_size, check_working_memory
    from noa_core.operations.plan import make_plan

    whole = (slice(None),) * 3
    out_dtype = np.dtype(dtype or output_dtype(array))
    in_bytes = math.prod(array.shape[1:]) * array.itemsize
    out_bytes = max(math.prod(out_shape[1:]), computed_voxels or 0) * out_dtype.itemsize
    check_output_size(out_shape, out_dtype.itemsize, str(inputs[0]))  # first: an output too large to write says so
    held = image_memory(in_bytes, out_bytes, working)
    check_working_memory(held, f"{inputs[0]}: {label}")
    group = max(1, GROUP_BYTES // max(1, held))

    def reads(key):
        start, stop, _ = key[0].indices(array.shape[0])

        def compute(blocks, out):
            for first in range(start, stop, group):
                last = min(first + group, stop)
                block = asarray(mapped.read_view(array[(slice(first, last), *whole)].numpy(), 0))
                part = out[(slice(first - start, last - start), *whole)]
                sub = (slice(first, last), *key[1:])
                if fill is not None:
                    fill(block if part.device == "cpu" else block.to(part.device), sub, part)
                else:
                    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is refused just below
                        values = images(block, sub)
                    if not np.isfinite(values).all() and np.isfinite(block.numpy()).all():
                        raise ValueRangeError(f"{inputs[0]}: {label}: values too large for a {values.dtype} "
                                              "Fourier transform (it overflows); scale the input down first")
                    np.copyto(part.numpy(), values, casting="same_kind")

        return [], compute

    read_factor = in_bytes / max(1, out_bytes)
    return make_plan(inputs, [array], [array], None, out_meta, label[:80], out_dtype,
                     shape=out_shape, reads=reads, read_factor=read_factor + working, whole_axes=WHOLE,
                     notices=notices)


def input_pixel_size(meta, options: Options) -> float | None:
    """The input's pixel size in Å: ``--angpix`` when given, else the header's width axis (None: unknown)."""
    if options.get("angpix") is not None:
        if not options.angpix > 0:
            from noa_core.errors import ParameterError

            raise ParameterError(f"{options.angpix:g} Å: a pixel size must be above 0", "angpix")
        return options.angpix
    pixel, _, _ = meta.in_angstrom()
    return pixel[2] if pixel[2] > 0 else None


def _words(options: Options, names: tuple[str, ...]) -> str:
    return " ".join(f"--{n.replace('_', '-')} {options[n]:g}" for n in names if options.get(n) is not None)


def plan(inputs: list[Path], options: Options):
    from noa_core import signal
    from noa_core.errors import ParameterError

    array, meta = real_input(inputs[0], options, "filter")
    try:
        pixel = signal.check_bandpass(options.lowpass, options.highpass, input_pixel_size(meta, options),
                                      options.edge_width, options.bfactor or 0.0)
    except ParameterError as exc:
        if exc.param == "pixel_size":  # the file's: say which option gives it
            raise ParameterError(f"{inputs[0]}: the pixel size is unknown; give it with angpix (Å)", "angpix") from None
        raise
    ndim = 3 if array.shape[1] > 1 else 2
    weights = None

    def images(block, key):
        nonlocal weights
        from noa_core import signal as sig

        if weights is None:  # the same for every tile: computed once per plan
            sizes = block.shape[4 - ndim:]
            weights = sig.bandpass_weights(sizes, pixel, options.lowpass, options.highpass, options.edge_width,
                                           options.bfactor or 0.0)
        axes = (2, 3) if ndim == 2 else (1, 2, 3)
        return sig.multiply_spectrum(block, axes, weights).numpy()

    label = "noa filter " + _words(options, ("lowpass", "highpass", "edge_width", "bfactor"))
    return whole_image_plan(inputs, array, array.shape, meta, label, images, working=3.0)


OPERATION = Operation(
    name="filter",
    summary="Band-pass each image (volumes in 3-d) as RELION does: low-pass, high-pass, raised-cosine edge, "
            "B-factor.",
    details="Resolutions are in Å at the header's pixel size (or --angpix). The edge is a raised cosine "
            "--edge-width Fourier shells wide (RELION's --filter_edge_width, default 2) centred on the shell "
            "round(width x pixel size / resolution). A lowpass finer than Nyquist (2 x pixel size) is refused. "
            "A B-factor multiplies each frequency s (1/Å) up to Nyquist by exp(-B s²/4) and zeroes everything "
            "beyond Nyquist (the corners of the box), as RELION's --bfactor. Frequencies are measured per axis, so "
            "square boxes filter exactly as RELION; RELION measures a rectangular image's every axis in units of "
            "its width. The output is float32.",
    examples=("noa filter particles.mrcs filtered.mrcs --lowpass 8 --highpass 200",
              "noa filter map.mrc sharpened.mrc --bfactor -80"),
    params=(Param("lowpass", Real(0.0), "Low-pass resolution in Å: detail finer than it is removed."),
            Param("highpass", Real(0.0), "High-pass resolution in Å: features coarser than it are removed."),
            Param("edge_width", Real(0.0, 1000.0), "Width of the raised-cosine edge in Fourier shells (RELION's "
                  "--filter_edge_width).", default=2.0),
            Param("bfactor", Real(-10000.0, 10000.0), "B-factor in Å² applied as exp(-B/4 s²) up to Nyquist, zero beyond "
                  "(RELION's --bfactor); negative sharpens."),
            Param("angpix", Real(0.0), "Pixel size of the input in Å, when the header's is unknown or wrong."),
            *READING),
    plan=plan,
)

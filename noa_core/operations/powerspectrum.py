"""noa powerspectrum: the centred power spectrum of each image (volumes in 3-d), its rotational average, or
RELION's rotational-average table (STAR or CSV) with the resolution of each shell."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from noa_core.operations.spec import PIXEL_SIZE, READING, Choice, Flag, Inputs, Options, Param, Writes

TABLES = {"star": (".star", "text/plain"), "csv": (".csv", "text/csv")}  # --table: (extension, media type)
STAR_COLUMNS = ("rlnSpectralIndex", "rlnResolution", "rlnAngstromResolution", "rlnReferenceSpectralPower")
CSV_COLUMNS = ("image", "shell", "resolution_per_angstrom", "resolution_angstrom", "power")


def table_output(values: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(extension, media type)`` of the table the parameter values ask for; None: an image is written."""
    return TABLES.get(values.get("table"))  # type: ignore[arg-type]


def table_text(powers, kind: str, width: int, pixel_size: float | None) -> str:
    """The table of :func:`noa_core.fourier.spectral.relion_power` rows ``powers`` (images, shells) as a STAR or CSV
    text (see :func:`table_parts`)."""
    return "".join(table_parts(powers, kind, width, pixel_size))


def table_parts(powers, kind: str, width: int, pixel_size: float | None):
    """The table of :func:`noa_core.fourier.spectral.relion_power` rows ``powers`` (images, shells), a piece of text
    per image: with resolutions of an image ``width`` pixels wide at ``pixel_size`` Å, or shells and power
    alone when the pixel size is unknown (None).

    STAR: one ``data_power`` block, as RELION writes it, for one image; ``data_power_0``,
    ``data_power_1``, ... for the images of a stack (numbered from 0, as noa's sections). CSV: one header
    line, then a line per image and shell."""
    from noa_core.fourier import spectral

    images, shells = powers.shape
    index = range(shells)
    resolved = pixel_size is not None
    inverse, angstrom = spectral.shell_resolutions(width, pixel_size, shells) if resolved else (None, None)

    def values(i: int, power: float) -> list[str]:
        return [str(i), *((f"{inverse[i]:.9g}", f"{angstrom[i]:.9g}") if resolved else ()), f"{power:.9g}"]

    if kind == "csv":
        header = CSV_COLUMNS if resolved else (CSV_COLUMNS[0], CSV_COLUMNS[1], CSV_COLUMNS[4])
        yield ",".join(header) + "\n"
        for b in range(images):
            yield "".join(",".join([str(b), *values(i, powers[b, i])]) + "\n" for i in index)
        return
    columns = STAR_COLUMNS if resolved else (STAR_COLUMNS[0], STAR_COLUMNS[3])
    yield "# version 30001\n"
    for b in range(images):
        name = "power" if images == 1 else f"power_{b}"
        head = ["", f"data_{name}", "", "loop_", *(f"_{c} #{n}" for n, c in enumerate(columns, 1))]
        yield "\n".join([*head, *(" ".join(values(i, powers[b, i])) for i in index)]) + "\n"


def table_file(path: Path, shape, kind: str, width: int, pixel_size: float | None, overwrite: bool):
    """The output of a table plan: the rotational averages (float64 tiles) written as any image's, then the
    table text (:func:`table_parts`, image by image through a mapping: bounded memory)."""
    import numpy as np

    from noa_core.operations.plan import RewrittenOutput

    def rewrite(values: Path, out) -> None:
        powers = np.memmap(values, np.float64, "r", shape=(shape[0], shape[3]))
        for part in table_parts(powers, kind, width, pixel_size):
            out.write(part.encode())
        del powers

    return RewrittenOutput(path, shape, np.float64, overwrite, rewrite)


@functools.cache
def spectrum_plan() -> type:
    """The class of a power spectrum's plans (made on first use: declarations import no NumPy, plans do)."""
    from noa_core.operations.plan import Plan

    @dataclasses.dataclass
    class SpectrumPlan(Plan):
        """An image, or (``table``) RELION's table; the output's name must say which."""

        table: str | None = None
        width: int = 0
        pixel_size: float | None = None

        def create(self, dst, *, overwrite: bool):
            return create_output(self, dst, overwrite=overwrite)

    return SpectrumPlan


def create_output(plan, dst, *, overwrite: bool):
    """The writer of a :func:`spectrum_plan`: an image's (the format by extension) or a :func:`table_file`."""
    from noa_core.errors import ParameterError
    from noa_core.operations.plan import Plan, check_distinct

    asked = next((kind for kind, (ext, _) in TABLES.items() if str(dst).lower().endswith(ext)), None)
    if asked != plan.table:
        if plan.table is None:
            raise ParameterError(f"{Path(dst).name} names a {asked.upper()} table; add --table {asked} to write "
                                 "the rotational-average table instead of an image", "table")
        raise ParameterError(f"the {plan.table.upper()} table goes into a {TABLES[plan.table][0]} file, "
                             f"not {Path(dst).name}", "table")
    if plan.table is None:
        return Plan.create(plan, dst, overwrite=overwrite)
    check_distinct(dst, plan.inputs)
    return table_file(Path(dst), plan.shape, plan.table, plan.width, plan.pixel_size, overwrite)


def plan(inputs: Inputs, options: Options):
    from noa_core.errors import ParameterError
    from noa_core.operations.plan import FLOAT_OUTPUT, whole_image_plan

    array, meta = inputs.open(inputs[0])
    ndim = 3 if array.shape[1] > 1 else 2
    width = array.shape[3]
    shape, out_meta, notices = array.shape, meta, ()
    dtype = FLOAT_OUTPUT
    pixel = options.input_pixel_size(meta)
    if options.table is not None:
        if options.log:
            raise ParameterError("the table holds the power as RELION writes it; take the log when plotting", "log")
        if options.rotavg:
            raise ParameterError("the table is a rotational average already; give --table or --rotavg", "rotavg")
        if array.dtype.kind == "c":
            raise ParameterError(f"{inputs[0]}: RELION's table is of real images; the file holds {array.dtype} "
                                 "values", "table")
        shape = (shape[0], 1, 1, min(width // 2 + 2, width))
        dtype = "float64"
        if pixel is None:
            notices = (f"{inputs[0]}: the pixel size is unknown: the table has shells and power only "
                       "(give --angpix for resolutions)",)
    elif options.rotavg:
        shells = min(shape[4 - ndim:]) // 2 + 1
        shape = (shape[0], 1, 1, shells)
        # Shells are frequencies, not pixels: no pixel size, no origin.
        out_meta = meta.resampled(shape, (0.0, 0.0, 0.0))
        out_meta.origin = (0.0, 0.0, 0.0)

    def images(block, key):
        from noa_core.fourier import spectral

        if options.table is not None:
            return spectral.relion_power(block, ndim=ndim).reshape(-1, 1, 1, shape[3])
        return spectral.power_spectrum(block, rotational_average=options.rotavg, log=options.log, ndim=ndim).numpy()

    made = whole_image_plan(options, inputs=inputs, array=array, shape=shape, meta=out_meta, images=images,
                            working=4.0, dtype=dtype, notices=notices)
    fields = {f.name: getattr(made, f.name) for f in dataclasses.fields(made)}
    return spectrum_plan()(**fields, table=options.table, width=width, pixel_size=pixel)


OPERATION = Writes(
    name="powerspectrum",
    summary="Centred power spectrum |F|^2/N of each image (volumes in 3-d), log or rotationally averaged, or "
            "RELION's table of power per shell and resolution (STAR, CSV).",
    details="Images: the full H x W spectrum (D x H x W for volumes) with the zero frequency at (H//2, W//2), as "
            "numpy.fft.fftshift places it: Thon rings stay round and both halves are there to compare. Its values "
            "are |F|^2/N (N the samples of an image, so their mean is the mean of the squared image). --rotavg "
            "writes the mean over each shell round(|f| x min(H, W)) of the full transform instead, "
            "min(H, W)//2 + 1 values per image (shape B,1,1,S). --log writes the natural logarithm. These outputs "
            "are float32 (complex inputs too). "
            "--table star|csv writes RELION's rotational-average table instead, to OUT ending .star or .csv: per "
            "image (or volume) the rows of relion_image_handler --power, shell i = 0 .. W//2 + 1 with its resolution "
            "i / (W x pixel size) in 1/Å and W x pixel size / i in Å (shell 0 gets RELION's 999 Å) and its power "
            "as RELION computes it: |F/N|^2 (= noa's |F|^2/N divided by N again) averaged over the half transform's "
            "samples of shell round(|f| x W), |f| in cycles per pixel per axis: RELION's rule exactly for square "
            "images and cubic volumes (RELION counts a rectangular image's every axis in Fourier pixels). The STAR "
            "file has RELION's columns (rlnSpectralIndex, rlnResolution, rlnAngstromResolution, "
            "rlnReferenceSpectralPower) in a data_power block, one per image of a stack (data_power_0, "
            "data_power_1, ...); the CSV has image, shell, resolution_per_angstrom, resolution_angstrom, power. "
            "With --out-dir, each table is named after its input (.star, .csv). The pixel size is the header's (or "
            "--angpix); unknown, the table has "
            "shells and power only.",
    examples=("noa powerspectrum micrograph.mrc ps.mrc --log",
              "noa powerspectrum micrographs.mrcs profiles.mrc --rotavg",
              "noa powerspectrum micrograph.mrc power.star --table star"),
    params=(Param("rotavg", Flag(), "Write the rotational average (one value per Fourier shell) instead.", default=False),
            Param("log", Flag(), "Write the natural logarithm of the power.", default=False),
            Param("table", Choice(tuple(TABLES)), "Write RELION's rotational-average table (shell, resolution in "
                  "1/Å and Å, power |F/N|^2 as relion_image_handler --power) as star or csv, to OUT ending .star "
                  "or .csv, instead of an image."),
            Param("angpix", PIXEL_SIZE, "Pixel size of the input in Å for the table's resolutions, when the header's "
                  "is unknown or wrong."),
            *READING),
    plan=plan,
    text_output=table_output,
)

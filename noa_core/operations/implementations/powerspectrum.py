"""noa powerspectrum: the centred power spectrum |F|^2/N of each image (volume), log or rotationally averaged, as
float32; or RELION's rotational-average table (STAR or CSV), its powers written as float64 tiles first and then
as text, image by image."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from noa_core.errors import ParameterError
from noa_core.fourier import spectral
from noa_core.io.remote import as_path
from noa_core.operations.plan import FLOAT_OUTPUT, Plan, RewrittenOutput, check_distinct, whole_image_plan
from noa_core.operations.powerspectrum import TABLES
from noa_core.operations.spec import Inputs, Options

STAR_COLUMNS = ("rlnSpectralIndex", "rlnResolution", "rlnAngstromResolution", "rlnReferenceSpectralPower")
CSV_COLUMNS = ("image", "shell", "resolution_per_angstrom", "resolution_angstrom", "power")


def table_parts(powers, kind: str, width: int, pixel_size: float | None):
    """The table of :func:`noa_core.fourier.spectral.relion_power` rows ``powers`` (images, shells), a piece of text
    per image: with resolutions of an image ``width`` pixels wide at ``pixel_size`` Å, or shells and power
    alone when the pixel size is unknown (None).

    STAR: one ``data_power`` block, as RELION writes it, for one image; ``data_power_0``,
    ``data_power_1``, ... for the images of a stack (numbered from 0, as noa's sections). CSV: one header
    line, then a line per image and shell."""
    images, shells = powers.shape
    index = range(shells)
    resolved = pixel_size is not None
    inverse, angstrom = (spectral.shell_resolutions(width, pixel_size, shells) if pixel_size is not None
                         else (None, None))

    def values(i: int, power: float) -> list[str]:
        shown = (f"{inverse[i]:.9g}", f"{angstrom[i]:.9g}") if inverse is not None and angstrom is not None else ()
        return [str(i), *shown, f"{power:.9g}"]

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

    def rewrite(values: Path, out) -> None:
        powers = np.memmap(values, np.float64, "r", shape=(shape[0], shape[3]))
        for part in table_parts(powers, kind, width, pixel_size):
            out.write(part.encode())
        del powers

    return RewrittenOutput(path, shape, np.float64, overwrite, rewrite)


@dataclasses.dataclass
class SpectrumPlan(Plan):
    """An image, or (``table``) RELION's table; the output's name must say which."""

    table: str | None = None
    width: int = 0
    pixel_size: float | None = None

    def create(self, dst, *, overwrite: bool):
        """An image's writer (the format by extension), or a :func:`table_file`."""
        asked = next((kind for kind, (ext, _) in TABLES.items() if str(dst).lower().endswith(ext)), None)
        if asked != self.table:
            if self.table is None:
                assert asked is not None  # differs from self.table
                raise ParameterError(f"{Path(dst).name} names a {asked.upper()} table; add --table {asked} to write "
                                     "the rotational-average table instead of an image", "table")
            raise ParameterError(f"the {self.table.upper()} table goes into a {TABLES[self.table][0]} file, "
                                 f"not {Path(dst).name}", "table")
        if self.table is None:
            return super().create(dst, overwrite=overwrite)
        check_distinct(dst, self.inputs)
        return table_file(as_path(dst), self.shape, self.table, self.width, self.pixel_size, overwrite)


def plan(inputs: Inputs, options: Options):
    array, meta = inputs.open(inputs[0])
    ndim = 3 if array.shape[1] > 1 else 2
    width = array.shape[3]
    shape, out_meta = array.shape, meta
    notices: tuple[str, ...] = ()
    dtype: np.dtype | str = FLOAT_OUTPUT
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
        if options.table is not None:
            return spectral.relion_power(block, ndim=ndim).reshape(-1, 1, 1, shape[3])
        return spectral.power_spectrum(block, rotational_average=options.rotavg, log=options.log, ndim=ndim).numpy()

    made = whole_image_plan(options, inputs=inputs, array=array, shape=shape, meta=out_meta, images=images,
                            working=4.0, dtype=dtype, notices=notices)
    fields = {f.name: getattr(made, f.name) for f in dataclasses.fields(made)}
    return SpectrumPlan(**fields, table=options.table, width=width, pixel_size=pixel)

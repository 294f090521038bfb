"""noa powerspectrum: the centred power spectrum of each image (volumes in 3-d), its rotational average, or
RELION's rotational-average table (STAR or CSV) with the resolution of each shell."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from noa_core.operations.spec import PIXEL_SIZE, READING, Choice, Flag, Param, Writes, implemented

TABLES = {"star": (".star", "text/plain"), "csv": (".csv", "text/csv")}  # --table: (extension, media type)


def table_output(values: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(extension, media type)`` of the table the parameter values ask for; None: an image is written."""
    return TABLES.get(values.get("table"))  # type: ignore[arg-type]


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
    params=(Param("rotavg", Flag(), "Write the rotational average (one value per Fourier shell) instead.",
                  default=False),
            Param("log", Flag(), "Write the natural logarithm of the power.", default=False),
            Param("table", Choice(tuple(TABLES)), "Write RELION's rotational-average table (shell, resolution in "
                  "1/Å and Å, power |F/N|^2 as relion_image_handler --power) as star or csv, to OUT ending .star "
                  "or .csv, instead of an image."),
            Param("angpix", PIXEL_SIZE, "Pixel size of the input in Å for the table's resolutions, when the header's "
                  "is unknown or wrong."),
            *READING),
    plan=implemented("powerspectrum", "plan"),
    text_output=table_output,
)

"""noa fsc: the Fourier shell correlation of two half maps (the ring correlation of two images), where it falls
below 0.143 and 0.5, and on request its table (RELION's STAR, CSV, EMDB's XML) and a plot."""

from __future__ import annotations

from typing import Literal

from typing_extensions import TypedDict

from noa_core.operations.spec import PIXEL_SIZE, READING, Choice, Flag, InputFile, Param, Reports, Text, implemented

JsonFloat = float | Literal["NaN", "Infinity", "-Infinity"]  # JSON has no non-finite numbers


class CurveColumns(TypedDict):
    shell: list[int]
    resolution_per_angstrom: list[float] | None
    resolution_angstrom: list[float] | None
    fsc: list[JsonFloat]


class ThresholdResult(TypedDict):
    threshold: float
    falls_below: bool
    shell: int | None
    resolution_angstrom: float | None
    interpolated_shell: float | None
    interpolated_angstrom: float | None
    reason: str | None  # why there is no resolution (shell is None)


class FscResult(TypedDict):
    path: str
    half1: str
    half2: str
    mask: str | None
    shape: list[int]
    correlation: Literal["FSC", "FRC"]
    shells: Literal["relion", "linear"]
    pixel_size: float | None
    curve: CurveColumns
    thresholds: list[ThresholdResult]
    outputs: list[str]
    notices: list[str]


def _angstrom(value: float) -> str:
    """A resolution as printed: to 0.001 Å, or 4 significant digits where that many digits say nothing."""
    return f"{value:.3f}" if value < 1e5 else f"{value:.4g}"


def as_text(result: dict) -> str:
    """What the CLI prints: the maps, then where the curve falls below each threshold, then files and notices."""
    pixel = result["pixel_size"]
    shells = len(result["curve"]["shell"])
    where = "x".join(str(n) for n in result["shape"][1 if result["correlation"] == "FSC" else 2:])
    lines = [f"{result['correlation']} of {result['half1']} and {result['half2']}"
             + (f" under the mask {result['mask']}" if result["mask"] else "")
             + f": {where}, " + (f"{pixel:g} Å/px, " if pixel else "") + f"{shells} shells ({result['shells']})"]
    for row in result["thresholds"]:
        name = f"{result['correlation']} = {row['threshold']:g}"
        if row["shell"] is None:
            lines.append(f"{name}: no resolution: {row['reason']}")
        elif not row["falls_below"]:
            last = row["shell"]
            at = f" ({_angstrom(row['resolution_angstrom'])} Å)" if row["resolution_angstrom"] else ""
            where = "the last shell" if last == shells - 1 else "shell"
            lines.append(f"{name}: not reached; above it up to {where} {last}{at}")
        elif pixel:
            lines.append(f"{name} at {_angstrom(row['interpolated_angstrom'])} Å (interpolated, shell "
                         f"{row['interpolated_shell']:.2f}); RELION's last shell above: {row['shell']} "
                         f"({_angstrom(row['resolution_angstrom'])} Å)")
        else:
            lines.append(f"{name} at shell {row['interpolated_shell']:.2f} (interpolated); RELION's last shell "
                         f"above: {row['shell']}")
    lines += [f"wrote {path}" for path in result["outputs"]]
    lines += [f"notice: {notice}" for notice in result["notices"]]
    return "\n".join(lines)


def warmup(dtype: str, shape: tuple[int, ...]) -> list[tuple[str, dict]]:
    # the shell sums run on the halves' transforms: complex64 (every real input but float64) or complex128
    return [(dtype, {"shells": rule}) for rule in ("relion", "linear")] if dtype in ("float32", "float64") else []


OPERATION = Reports(
    name="fsc",
    summary="Fourier shell correlation of two half maps (ring correlation of two images): the resolution at "
            "FSC 0.143 and 0.5, the curve as RELION's STAR, CSV or EMDB XML, and a plot.",
    details="FSC(s) = sum Re(F1 conj F2) / sqrt(sum |F1|^2 sum |F2|^2) over the samples of shell s of the "
            "non-redundant (r2c) transforms, each sample counted once, as relion_image_handler --i HALF1 --fsc "
            "HALF2 computes it. 3-d maps give the FSC, 2-d images the FRC; stacks are refused. Both inputs must have "
            "the same shape and pixel size. --shells relion (default): RELION 3.1.3's getFSC, shell round(|k|) "
            "with |k| in Fourier pixels, shells 0 .. W // 2 (W the width), samples beyond left out; shell s is "
            "W x pixel size / s Å (shell 0: RELION's 999 Å). For square and cubic boxes this is RELION's curve to "
            "float precision; RELION counts each axis of a rectangular box in its own Fourier pixels, and noa "
            "follows it. --shells linear: noa C++'s FSC, frequencies normalised per axis (true frequencies for "
            "rectangular boxes), radius r = |f| x m with m the smallest size, each sample within Nyquist split "
            "between shells floor(r) (weight 1 - frac(r)) and floor(r) + 1 (frac(r)), shells 0 .. m // 2, shell s "
            "being m x pixel size / s Å. --mask multiplies both halves by the mask first (same shape). "
            "The resolution at 0.143 and 0.5: searching from shell 1, the curve's first shell below the "
            "threshold; noa prints the crossing interpolated linearly in shells between the last shell above "
            "and that one (s + (FSC(s) - t) / (FSC(s) - FSC(s + 1)), in Å W x pixel size / that), and RELION's "
            "answer beside it: relion_postprocess reports the last shell above without interpolation "
            "(relion_image_handler --fsc prints the table only). A curve that stays above is reported as "
            "reaching the last shell. Half maps or a mask holding NaN or infinite values are refused. Where a half "
            "map has no power in a shell the FSC is undefined (0/0, NaN in the table) and the thresholds are looked "
            "for only in the shells before it: constant or empty maps (no power beyond shell 0) have no resolution, "
            "reported with its reason (exit 0: the maps are valid, their FSC is not a number). "
            "-o writes the table: .star (RELION's data_fsc block with rlnSpectralIndex, "
            "rlnResolution, rlnAngstromResolution, rlnFourierShellCorrelation, formatted as RELION prints it), "
            ".csv (shell, resolution_per_angstrom, resolution_angstrom, fsc) or .xml (EMDB's FSC XML: <fsc "
            "title xaxis=\"Resolution (A-1)\" yaxis=\"Correlation Coefficient\"> with a <coordinate><x>1/Å</x>"
            "<y>FSC</y></coordinate> per shell, shell 0 at x = 0); --plot writes a PNG of the curve with both "
            "thresholds. Files are written atomically, and only once the curve is known. The pixel size is the "
            "headers' (--angpix for both); unknown, resolutions are in shells only (no XML). Over HTTP the "
            "result is JSON (the curve and the thresholds); the mask is the third file (upload) or the third "
            "of srcs (paths, jobs).",
    examples=("noa fsc half1.mrc half2.mrc",
              "noa fsc half1.mrc half2.mrc --mask mask.mrc -o fsc.star --plot fsc.png",
              "noa fsc half1.mrc half2.mrc -o fsc.xml --json"),
    params=(Param("output", Text(1, 4096), "Write the table to this file: .star (RELION's data_fsc), .csv, or .xml "
                  "(EMDB's FSC XML).", flags=("--output", "-o"), doors=frozenset({"cli"})),
            Param("plot", Text(1, 4096), "Write a PNG plot of the curve with the 0.143 and 0.5 lines to this file.",
                  doors=frozenset({"cli"})),
            Param("mask", InputFile(), "Multiply both halves by this mask (same shape) first; over HTTP, send it "
                  "as the third input.", doors=frozenset({"cli"})),
            Param("shells", Choice(("relion", "linear")), "Shell rule: relion (round(|k|) in Fourier pixels, as "
                  "relion_image_handler --fsc) or linear (normalised frequencies, each split between its two "
                  "shells, as noa C++; for rectangular boxes).", default="relion"),
            Param("angpix", PIXEL_SIZE, "Pixel size of both halves in Å, when the headers' is unknown or wrong."),
            Param("force", Flag(), "Overwrite the table and plot files if they exist.", default=False,
                  flags=("--force", "-f"), doors=frozenset({"cli"})),
            *READING),
    report=implemented("fsc", "report"),
    warmup=warmup,
    text=as_text,
    result=FscResult,
    max_inputs=3,
    min_inputs=2,
)

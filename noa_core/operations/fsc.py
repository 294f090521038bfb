"""noa fsc: the Fourier shell correlation of two half maps (the ring correlation of two images), where it falls
below 0.143 and 0.5, and on request its table (RELION's STAR, CSV, EMDB's XML) and a plot."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from typing_extensions import TypedDict

from noa_core.operations.spec import PIXEL_SIZE, READING, Choice, Flag, InputFile, Inputs, Options, Param, Reports, Text

JsonFloat = float | Literal["NaN", "Infinity", "-Infinity"]  # JSON has no non-finite numbers
PIXEL_TOLERANCE = 1e-4  # relative: MRC headers keep the cell in float32, so equal pixel sizes may differ a little


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


def compute(inputs: Inputs, options: Options) -> dict:
    """Read both halves (and the mask), check they match, compute the curve, write what was asked for."""
    import numpy as np

    from noa_core.fourier import resolution
    from noa_core.errors import ParameterError, ShapeError

    if len(inputs) < 2:
        raise ParameterError(f"{inputs[0]}: the FSC compares two half maps; give HALF1 HALF2")
    if len(inputs) > 2 and options.mask is not None:
        raise ParameterError(f"{inputs[2]} and {options.mask}: give the mask once", "mask")
    mask_path = inputs[2] if len(inputs) > 2 else (None if options.mask is None else Path(options.mask))
    tables, plot = _outputs(options, [*inputs, *([] if mask_path is None else [mask_path])])
    (one, meta), (two, meta2) = (_open_map(path, inputs) for path in inputs[:2])
    if one.shape != two.shape:
        raise ShapeError(f"{inputs[0]} is {_size(one.shape)} and {inputs[1]} is {_size(two.shape)}: the half "
                             "maps must have the same shape")
    pixel = _pixel_size(inputs, options, meta, meta2)
    mask = None
    if mask_path is not None:
        mask, _ = _open_map(mask_path, inputs)
        if mask.shape != one.shape:
            raise ParameterError(f"the mask {mask_path} is {_size(mask.shape)}; the half maps are {_size(one.shape)}",
                                 "mask")
    _check_memory(one.shape, inputs[0], mask is not None)
    curve = resolution.fsc(one.numpy(), two.numpy(), mask=None if mask is None else mask.numpy(),
                           shells=options.shells, pixel_size=pixel, names=[str(p) for p in (*inputs[:2], mask_path)])
    kind = "FSC" if one.shape[1] > 1 else "FRC"
    notices = []
    undefined = curve.undefined_from
    if undefined is not None and undefined > 1:
        notices.append(f"the {kind} is undefined from shell {undefined} on (a half map has no power there): "
                       f"thresholds are looked for up to shell {undefined - 1}")
    if pixel is None:
        notices.append(f"{inputs[0]}: the pixel size is unknown: resolutions in shells only (give --angpix)")
    sizes = one.shape[1:] if kind == "FSC" else one.shape[2:]
    if options.shells == "relion" and len(set(sizes)) > 1:
        notices.append(f"RELION's shells count each axis of a {_size(one.shape)} box in its own Fourier pixels; "
                       "--shells linear measures true frequencies")
    title = f"{kind} of {inputs[0].name} and {inputs[1].name}"
    written = _write(curve, tables, plot, title, options.force)
    angstrom, per_angstrom = curve.angstrom, curve.per_angstrom
    return {
        "path": str(inputs[0]), "half1": str(inputs[0]), "half2": str(inputs[1]),
        "mask": None if mask_path is None else str(mask_path), "shape": list(one.shape), "correlation": kind,
        "shells": options.shells, "pixel_size": pixel,
        "curve": {"shell": curve.shells.tolist(),
                  "resolution_per_angstrom": None if per_angstrom is None else per_angstrom.tolist(),
                  "resolution_angstrom": None if angstrom is None else angstrom.tolist(),
                  "fsc": [float(v) for v in np.asarray(curve.values)]},
        "thresholds": [_threshold(curve, t, kind) for t in resolution.THRESHOLDS],
        "outputs": [str(path) for path in written], "notices": notices,
    }


def _size(shape) -> str:
    """A map's size as users write it: 64 x 64 x 64 (depth, height, width), or a stack's count too."""
    return " x ".join(str(n) for n in shape[1 if shape[1] > 1 else 2:])


def _open_map(path: Path, inputs: Inputs):
    """One image or volume (a stack is refused), lazily."""
    from noa_core.errors import ShapeError

    array, meta = inputs.open_real(path, "the FSC")
    if array.shape[0] != 1:
        raise ShapeError(f"{path}: a stack of {array.shape[0]} sections; the FSC compares two maps, each one volume "
                         "(FSC) or one image (FRC)")
    if min(array.shape[2:]) < 2:
        raise ShapeError(f"{path}: {_size(array.shape)} is not an image or a volume")
    return array, meta


def _pixel_size(inputs: list[Path], options: Options, meta, meta2) -> float | None:
    """The halves' common pixel size in Å (--angpix for both), None when both are unknown."""
    from noa_core.errors import NoaError

    one, two = options.input_pixel_size(meta), options.input_pixel_size(meta2)
    if one is None and two is None:
        return None
    if one is None or two is None or abs(one - two) > PIXEL_TOLERANCE * max(one, two):
        words = [f"{p:g} Å" if p is not None else "unknown" for p in (one, two)]
        raise NoaError(f"{inputs[0]} has a pixel size of {words[0]} and {inputs[1]} of {words[1]}: the half "
                             "maps must have the same pixel size (--angpix sets both)")
    return one


def _outputs(options: Options, inputs: list[Path]) -> tuple[tuple[Path, str] | None, Path | None]:
    """The table file (path, kind) and the plot asked for, refused before any work when misnamed, existing
    (without --force) or one of the inputs."""
    from noa_core.fourier import resolution
    from noa_core.errors import ParameterError
    from noa_core.io import atomic
    from noa_core.operations.plan import check_distinct

    table = None
    if options.output is not None:
        kind = resolution.table_kind(options.output)
        if kind is None:
            raise ParameterError(f"{options.output}: the table is written as .star, .csv or .xml (EMDB's FSC XML)",
                                 "output")
        table = (atomic.check_output(options.output, options.force), kind)
        check_distinct(table[0], inputs)
    plot = None
    if options.plot is not None:
        if not options.plot.lower().endswith(".png"):
            raise ParameterError(f"{options.plot}: the plot is a PNG; name it .png", "plot")
        plot = atomic.check_output(options.plot, options.force)
        check_distinct(plot, [*inputs, *([table[0]] if table else [])])
    return table, plot


def _check_memory(shape, path: Path, masked: bool) -> None:
    """Both halves are held whole as float32 (and the mask), with their two half transforms (complex64) and a
    slab of sums: refused before reading where the machine lacks that memory."""
    import math

    from noa_core.limits import check_working_memory

    voxels = math.prod(shape)
    half = voxels // shape[3] * (shape[3] // 2 + 1)
    check_working_memory((2 + masked) * 4 * voxels + 2 * 8 * half + (64 << 20), f"{path}: fsc")


def _write(curve, table: tuple[Path, str] | None, plot: Path | None, title: str, overwrite: bool) -> list[Path]:
    """The table and the plot, each into a temporary file renamed into place once both are complete
    (nothing left behind on failure)."""
    from noa_core.pictures import plots
    from noa_core.fourier import resolution
    from noa_core.io import atomic

    contents = []
    if table is not None:  # made before any file is opened: an XML without pixel size is refused first
        contents.append((table[0], resolution.table_text(curve, table[1], title).encode()))
    if plot is not None:
        contents.append((plot, plots.fsc_png(curve, title)))
    temporaries = []
    try:
        for path, data in contents:
            temporaries.append(atomic.TemporaryOutput(path, overwrite))
            temporaries[-1].temp.write_bytes(data)
        for temp in temporaries:
            temp.commit()
    except BaseException:
        for temp in temporaries:
            temp.abort()
        raise
    return [path for path, _ in contents]


def _threshold(curve, threshold: float, kind: str) -> dict:
    found = curve.crossing(threshold)
    reason = None
    if found.shell is None:
        # A constant or empty map has no power beyond its mean: 0 / 0 from shell 1 on, which is no resolution
        reason = (f"below {threshold:g} from shell 1 on" if found.falls_below else
                  f"the {kind} is undefined from shell 1 on: a half map has no power there (a constant or empty map)")
    return {"threshold": threshold, "falls_below": found.falls_below, "shell": found.shell,
            "resolution_angstrom": curve.in_angstrom(found.shell), "interpolated_shell": found.interpolated,
            "interpolated_angstrom": curve.in_angstrom(found.interpolated), "reason": reason}


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
    report=compute,
    warmup=warmup,
    text=as_text,
    result=FscResult,
    max_inputs=3,
)

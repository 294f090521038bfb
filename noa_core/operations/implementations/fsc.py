"""noa fsc: the Fourier shell correlation of two half maps (ring correlation of two images), optionally masked,
where it falls below each threshold, and the table and plot asked for, written only once the curve is known."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from noa_core import limits
from noa_core.errors import NoaError, ParameterError, ShapeError
from noa_core.fourier import resolution
from noa_core.io import atomic
from noa_core.io.remote import as_path
from noa_core.operations.plan import check_distinct
from noa_core.operations.spec import Inputs, Options
from noa_core.pictures import plots

PIXEL_TOLERANCE = 1e-4  # relative: MRC headers keep the cell in float32, so equal pixel sizes may differ a little


def report(inputs: Inputs, options: Options) -> dict:
    """Read both halves (and the mask), check they match, compute the curve, write what was asked for."""
    if len(inputs) < 2:
        raise ParameterError(f"{inputs[0]}: the FSC compares two half maps; give HALF1 HALF2")
    if len(inputs) > 2 and options.mask is not None:
        raise ParameterError(f"{inputs[2]} and {options.mask}: give the mask once", "mask")
    mask_path = inputs[2] if len(inputs) > 2 else (None if options.mask is None else as_path(options.mask))
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
    array, meta = inputs.open_real(path, "the FSC")
    if array.shape[0] != 1:
        raise ShapeError(f"{path}: a stack of {array.shape[0]} sections; the FSC compares two maps, each one volume "
                         "(FSC) or one image (FRC)")
    if min(array.shape[2:]) < 2:
        raise ShapeError(f"{path}: {_size(array.shape)} is not an image or a volume")
    return array, meta


def _pixel_size(inputs: Sequence[Path], options: Options, meta, meta2) -> float | None:
    """The halves' common pixel size in Å (--angpix for both), None when both are unknown."""
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
    voxels = math.prod(shape)
    half = voxels // shape[3] * (shape[3] // 2 + 1)
    limits.check_working_memory((2 + masked) * 4 * voxels + 2 * 8 * half + (64 << 20), f"{path}: fsc")


def _write(curve, table: tuple[Path, str] | None, plot: Path | None, title: str, overwrite: bool) -> list[Path]:
    """The table and the plot, each into a temporary file renamed into place once both are complete
    (nothing left behind on failure)."""
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

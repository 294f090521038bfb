"""noa tiltseries: the mdoc read and checked (noa_core.tomography.tiltseries), the tilts' images opened through the
project (so that over HTTP they are opened beneath the data root): the stack the mdoc describes, where the mdoc lies,
or each tilt's motion-corrected sum, found in a folder by its frames' name; the tilts excluded and ordered, then the
images copied section by section into the output in that order and the files beside it written; every file placed
together, or none.

Everything is checked before anything is written: the mdoc, the images (the stack's sections, or each sum one 2-d
image within the voxel limit; the mdoc's image size and pixel size), the exclusions and the output names (none of
them an input)."""

from __future__ import annotations

import contextlib
import math
import os
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from noa_core import limits
from noa_core.array import Array, asarray, layout
from noa_core.compute import compute_path, tiles
from noa_core.compute.moments import RunningStatistics
from noa_core.compute.tiles import Compute, Key
from noa_core.errors import (
    FileFormatError,
    LimitError,
    MissingFileError,
    NoaError,
    OutputIsInputError,
    ParameterError,
    ShapeError,
    param,
)
from noa_core.io import atomic, formats, mrc, remote, star, stream
from noa_core.io.metadata import Metadata
from noa_core.io.particles import Project, folder_projects
from noa_core.io.protocol import OutputSpec
from noa_core.operations.plan import check_distinct, converter
from noa_core.operations.spec import Inputs, Options
from noa_core.tomography import tiltseries
from noa_core.tomography.tiltseries import TiltSeries

SUM_SUFFIXES = (".mrc", ".tif", ".tiff")  # a tilt's sum, named after its frames: MotionCor2's and RELION's .mrc
STACK_NAMES = (".mrc", ".st")  # the stack beside TS.mdoc when the mdoc names none there: TS.mrc, TS.st
AXIS_LABEL = "Tilt axis angle"  # the MRC label IMOD and SerialEM read the tilt axis from


def write(inputs: Inputs, output: Path, options: Options, overwrite: bool, progress, resume: bool = False) -> dict:
    if len(inputs) != 1:
        raise ParameterError(f"{inputs[1]}: one mdoc makes one tilt series; give several with an output folder",
                             "inputs")
    if output.suffix.lower() not in mrc.EXTENSIONS:
        raise FileFormatError(f"{output}: a tilt series is an MRC stack ({', '.join(mrc.EXTENSIONS)}, e.g. .st)")
    series = tiltseries.read(inputs[0])
    project = (inputs.projects or folder_projects)(options.project_dir)
    count = len(series.tilts)
    views = [] if options.exclude is None else tiltseries.views(options.exclude, count)
    by_view_or_angle = tiltseries.excluded(series, views, options.max_angle, None, None)
    with contextlib.ExitStack() as opened:
        if options.images is None:
            fd, stack_name = _open_stack(series, project)
            opened.callback(os.close, fd)
            images = _stack_images(series, Path(f"/proc/self/fd/{fd}"), stack_name)
        else:  # only the sums of tilts not left out by view or angle need be there
            images = _sum_images(series, project, options.images,
                                 [z for z in range(count) if z not in by_view_or_angle], opened)
        return _build(series, images, project, output, options, overwrite, progress, views, by_view_or_angle)


def _build(series: TiltSeries, images: Images, project: Project, output: Path, options: Options, overwrite: bool,
           progress, views: list[int], by_view_or_angle: dict[int, str]) -> dict:
    notices = list(images.notices)
    count = len(series.tilts)
    axis = _tilt_axis(series, options, notices)
    doses, dose_source = tiltseries.pre_exposure(series, options.dose_per_tilt)
    notices.append(f"pre-exposure from {dose_source}" if dose_source is not None else
                   f"{series.path}: no dose in the mdoc (ExposureDose 0 or missing, no PriorRecordDose): every "
                   f"pre-exposure is 0; give {param('dose_per_tilt')}")
    means = None
    if options.exclude_dark is not None:  # the median of the tilts not left out by view or angle
        means = tiltseries.section_means(images.section, count, by_view_or_angle)
    left_out = tiltseries.excluded(series, views, options.max_angle, options.exclude_dark, means)
    notices.extend(f"{series.where(z)} (view {z + 1}, {series.tilts[z].angle:g}°) left out: {why}"
                   for z, why in sorted(left_out.items()))
    kept = [z for z in range(count) if z not in left_out]
    if not kept:
        raise _all_excluded(series)
    order = tiltseries.stack_order(series, kept, options.order)
    # the stack of the sums kept (each within the voxel limit, their stack maybe not)
    limits.check_output_size((len(order), 1, images.height, images.width), images.dtype.itemsize, str(output))
    outputs = _outputs(output)
    _check_outputs([output, *outputs.values()], [series.path, *images.files], overwrite)
    # How the STAR names the stack: relative to the project folder (refused outside it); an upload's by its name,
    # relative to the STAR beside it, as RELION reads it once downloaded (not by a URL it cannot open)
    stack_named = output.name if remote.is_remote(output) else project.name_of(output)
    temps: list[atomic.TemporaryOutput] = []
    try:
        temps.append(atomic.TemporaryOutput(output, overwrite))
        notices += _copy_sections(images, order, axis, temps[0], options, progress)
        texts = {
            outputs["rawtlt"]: tiltseries.angles_text(series, order),
            outputs["tlt"]: tiltseries.angles_text(series, order),
            outputs["mdoc"]: tiltseries.mdoc_text(series, order, output.name, axis)}
        for path, text in texts.items():
            temps.append(star.prepared(path, [text.encode()], overwrite))
        names = [f"{i + 1:06d}@{stack_named}" for i in range(len(order))]
        star_text = tiltseries.relion_star(series, order, names, axis, doses, output.name)
        temps.append(star.prepared(outputs["star"], star_text, overwrite))
        atomic.commit_together(temps)
    except BaseException:
        for temp in temps:
            temp.abort()
        raise
    notices.append(f"{len(order)} of {count} tilts, {options.order} order, tilt axis {axis:g}°; beside {output.name}: "
                   f"{', '.join(path.name for path in outputs.values())}")
    return {"output": str(output), "notices": notices}


def _all_excluded(series: TiltSeries) -> FileFormatError:
    return FileFormatError(f"{series.path}: all {len(series.tilts)} tilts are excluded; nothing would be left to write")


# -- the tilts' images ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Images:
    """The tilts' images, checked against the mdoc: ``section(z)``, tilt z's image (1, 1, height, width) read
    lazily (a mapped file's view, or one image decoded: one in memory at a time); their size, element type and
    pixel size; the files opened (no output may be one) and what was said of them."""

    section: Callable[[int], np.ndarray]
    height: int
    width: int
    dtype: np.dtype
    pixel_size: float | None
    files: list[Path]
    notices: list[str]
    metadata: Metadata | None = None  # a stack's: its per-section records (FEI, SerialEM's SERI) follow their tilts


# -- the stack the mdoc describes --------------------------------------------------------------------------


def _open_stack(series: TiltSeries, project: Project) -> tuple[int, str]:
    """A descriptor of the stack beside the mdoc, opened through the project (over HTTP: beneath the data root), and
    its name: TS.mrc for TS.mrc.mdoc, else the mdoc's ImageFile, else TS.mrc or TS.st."""
    mdoc_name = project.name_of(series.path)
    folder, name = posixpath.split(mdoc_name)
    stem = name[:-len(".mdoc")] if name.lower().endswith(".mdoc") else name
    candidates = [stem] if Path(stem).suffix.lower() in mrc.EXTENSIONS else []
    if series.image_file:
        candidates.append(series.image_file)
    candidates.extend(f"{stem}{suffix}" for suffix in STACK_NAMES)
    candidates = list(dict.fromkeys(candidates))
    named = [posixpath.join(folder, candidate) for candidate in candidates]
    found = _open_first(project, named, f"{series.path}: ImageFile: the stack")
    if found is not None:
        return found
    raise FileFormatError(f"{series.path}: ImageFile: no stack beside the mdoc ({', '.join(candidates)}): the images "
                          "of the tilts it describes")


def _open_first(project: Project, names: list[str], what: str) -> tuple[int, str] | None:
    """A descriptor of the first of ``names`` there, opened through the project (over HTTP: beneath the data root),
    and its name; None where none is. A refusal (outside the data root, a link) or another failure to open one is
    one line beginning with ``what`` and its name."""
    for name in names:
        try:
            return project.open(name), name
        except FileNotFoundError:
            continue
        except NoaError as exc:  # refused: outside the data root, a link
            raise type(exc)(f"{what} {name}: {exc}") from None
        except OSError as exc:
            raise FileFormatError(f"{what} {name}: {exc.strerror}") from None
    return None


def _stack_images(series: TiltSeries, stack: Path, stack_name: str) -> Images:
    """The stack read lazily as sections, checked against the mdoc: a section for every ZValue, its image size and
    pixel size; errors name the stack as the mdoc does, not by its descriptor."""
    try:
        array, meta = formats.read(stack, as_stack=True)  # within the voxel limit, a data set's images
    except (FileFormatError, LimitError) as exc:
        raise type(exc)(str(exc).replace(str(stack), stack_name)) from None
    b, _, height, width = array.shape
    if array.dtype.kind == "c":
        raise FileFormatError(f"{stack_name}: complex values ({array.dtype}); a tilt series holds real images")
    if b < len(series.tilts):
        raise ShapeError(f"{series.where(b)}: the stack {stack_name} has {b} sections, the mdoc describes "
                         f"{len(series.tilts)}: no section for this tilt")
    if series.image_size is not None and tuple(series.image_size) != (width, height):
        w, h = series.image_size
        raise ShapeError(f"{series.path}: ImageSize {w} x {h}, and the stack {stack_name} holds {width} x {height} "
                         "images: the mdoc does not describe it")
    header_pixel = meta.width_pixel_size()
    if series.pixel_size is not None and header_pixel and not np.isclose(header_pixel, series.pixel_size, rtol=1e-3):
        raise FileFormatError(f"{series.path}: PixelSpacing {series.pixel_size:g} Å, and {header_pixel:g} Å in the "
                              f"header of {stack_name}: the mdoc does not describe it")
    notices = []
    if b > len(series.tilts):
        notices.append(f"{stack_name}: {b} sections, the mdoc describes {len(series.tilts)}: the others are left out")
    sections = array.numpy()
    return Images(lambda z: sections[z:z + 1, :1], height, width, np.dtype(array.dtype),
                  series.pixel_size or header_pixel, [stack], notices, meta)


def _sum_images(series: TiltSeries, project: Project, folder: str, wanted: list[int],
                opened: contextlib.ExitStack) -> Images:
    """The sums of the frames of the tilts ``wanted`` (ZValues), each found in ``folder`` (of the project: over HTTP,
    beneath the data root) by the stem of its SubFramePath, as MRC or TIFF; each opened (its descriptor closed by
    ``opened``) and checked from its header: one 2-d image, real, within the voxel limit, of one size and pixel size
    with the others and the mdoc. Errors name the tilt's section and the sum."""
    paths: dict[int, Path] = {}
    dtypes: list[tuple[np.dtype, str]] = []  # each sum's element type, and how a message names it
    size: tuple[int, int, str] | None = None  # the first sum's height and width, and how a message names it
    pixel_told: tuple[float, str] | None = None  # the pixel size of the series, and what gives it
    if series.pixel_size is not None:
        pixel_told = series.pixel_size, "the mdoc's PixelSpacing"
    for z in wanted:
        stem = series.frames_stem(z)
        fd, name = _open_sum(series, project, folder, z, stem)
        opened.callback(os.close, fd)
        path = Path(f"/proc/self/fd/{fd}")
        where = f"{series.where(z)}: the sum {name}"
        try:
            probe = formats.probe(path)
        except NoaError as exc:
            raise type(exc)(f"{where}: {str(exc).replace(str(path), name)}") from None
        limits.check_input_size(probe.shape, name)  # the limit of a data set's images, as formats.read checks
        b, d, height, width = probe.shape
        if b * d != 1:
            raise ShapeError(f"{where}: {b * d} images ({b} x {d}), a stack; a tilt's sum is one 2-d image")
        if probe.dtype.kind == "c":
            raise FileFormatError(f"{where}: complex values ({probe.dtype}); a tilt series holds real images")
        if series.image_size is not None and tuple(series.image_size) != (width, height):
            w, h = series.image_size
            raise ShapeError(f"{where}: {width} x {height}, and the mdoc's ImageSize is {w} x {h}: the images of a "
                             "tilt series share one size")
        if dtypes and probe.dtype != dtypes[0][0]:
            raise FileFormatError(f"{where}: {probe.dtype} values, and {dtypes[0][0]} in {dtypes[0][1]}: the images of "
                                  "a tilt series share one element type")
        if size is None:
            size = height, width, f"{name} ([ZValue = {z}])"
        elif size[:2] != (height, width):
            raise ShapeError(f"{where}: {width} x {height}, and {size[1]} x {size[0]} in {size[2]}: the images of a "
                             "tilt series share one size")
        pixel = probe.metadata.width_pixel_size()
        if pixel and pixel_told is None:
            pixel_told = pixel, f"{name} ([ZValue = {z}])"
        elif pixel and pixel_told is not None and not np.isclose(pixel, pixel_told[0], rtol=1e-3):
            raise FileFormatError(f"{where}: pixel size {pixel:g} Å, and {pixel_told[0]:g} Å in {pixel_told[1]}: "
                                  "the images of a tilt series share one pixel size")
        paths[z] = path
        dtypes.append((probe.dtype, f"{name} ([ZValue = {z}])"))
    if size is None:  # the caller leaves at least one tilt; else every one is excluded
        raise _all_excluded(series)
    return Images(lambda z: formats.read(paths[z])[0].numpy()[:1, :1], size[0], size[1], dtypes[0][0],
                  None if pixel_told is None else pixel_told[0], list(paths.values()), [])


def _open_sum(series: TiltSeries, project: Project, folder: str, z: int, stem: str) -> tuple[int, str]:
    """A descriptor of tilt ``z``'s sum, opened through the project, and its name: ``stem`` with the first of
    :data:`SUM_SUFFIXES` there, in ``folder``."""
    names = [posixpath.join(folder, stem + suffix) for suffix in SUM_SUFFIXES]
    found = _open_first(project, names, f"{series.where(z)}: the sum")
    if found is not None:
        return found
    raise MissingFileError(f"{series.where(z)}: no sum of its frames {stem} in {folder} ({', '.join(names)})")


def _tilt_axis(series: TiltSeries, options: Options, notices: list[str]) -> float:
    if options.tilt_axis is not None:
        return float(options.tilt_axis)
    found = tiltseries.tilt_axis(series)
    if found is None:
        raise ParameterError(f"{series.path}: no tilt axis in the mdoc (no 'Tilt axis angle' title, no "
                             "RotationAngle): give it", "tilt_axis")
    axis, source = found
    notices.append(f"tilt axis {axis:g}° from {source}")
    caution = tiltseries.tomography5_caution(series)
    if caution is not None:
        notices.append(f"{series.path}: {caution}, or give {param('tilt_axis')}")
    return axis


# -- the outputs ---------------------------------------------------------------------------------------------


def _outputs(output: Path) -> dict[str, Path]:
    """The files beside the stack TS.st: TS.rawtlt, TS.tlt, TS.st.mdoc (as SerialEM names a stack's), TS.star."""
    return {"rawtlt": output.with_suffix(".rawtlt"), "tlt": output.with_suffix(".tlt"),
            "mdoc": output.with_name(output.name + ".mdoc"), "star": output.with_suffix(".star")}


def _check_outputs(outputs: list[Path], read: list[Path], overwrite: bool) -> None:
    """No output is a file read (the mdoc, the stack), and none is there unless ``overwrite``."""
    for path in outputs:
        try:
            check_distinct(path, read)
        except OutputIsInputError:  # named by the output alone: the stack is read by its descriptor (/proc/self/fd)
            raise OutputIsInputError(f"{path}: is an input of this tilt series; name the output otherwise") from None
        atomic.check_output(path, overwrite)


def _copy_sections(images: Images, order: list[int], axis: float, temp: atomic.TemporaryOutput, options: Options,
                   progress) -> list[str]:
    """The tilts' images ``order`` copied into the output's temporary file by noa's tile engine
    (:func:`noa_core.io.stream.stream_tiles`), section after section in bands of rows planned as the engine plans
    any copy's tiles (:func:`noa_core.compute.tiles.plan_tile`: 8 MiB, 512 rows of 4096 float32; whole 64 MiB
    sections took up to twice the time, their buffers out of the processor's cache): each band read with one pread
    straight into the buffer it is written from, while a writer thread takes the previous band's statistics and
    writes it (a stack's, unchanged, copied from the stack by the kernel: :meth:`~noa_core.io.stream.TileFile.copy`).
    A stack's per-section records (its extended header: FEI1/FEI2, SerialEM's SERI) follow their
    sections; what the user should know of them is returned."""
    height, width = images.height, images.width
    shape = layout.as_shape4((len(order), 1, height, width))
    dtype = images.dtype.newbyteorder("=")
    pixel = images.pixel_size or 0.0
    labels = [f"{AXIS_LABEL} = {axis:g}"]
    meta = Metadata(format="mrc", shape=shape, dtype=str(dtype), pixel_size=(pixel, pixel, pixel), labels=labels)
    if images.metadata is not None and images.metadata.mrc is not None:
        source = images.metadata
        meta.mrc = source.derived(shape).mrc
        meta = meta.with_sections(source, order)  # the records of the sections kept, in their order
    spec = OutputSpec(temp.path, shape, dtype, "C", meta, options.output_label(), {})
    mrc.FORMAT.check_writable(dtype, shape, temp.path)
    created = mrc.FORMAT.create(temp.temp, spec)
    stored = created.dtype or dtype
    size = created.offset + math.prod(shape) * stored.itemsize
    with open(temp.temp, "r+b") as f:  # a full disk is an error now, before any section is copied
        atomic.reserve(f.fileno(), size, f"{temp.path}: no space left on device for its {size} bytes")
    copy = converter("checked")
    opened: dict[int, np.ndarray] = {}  # the section being copied (a sum is decoded once, not once per band)

    def reads(key: Key) -> tuple[list[Array], Compute]:
        z = order[key[0].start]
        if z not in opened:
            opened.clear()
            opened[z] = images.section(z)
        return [asarray(opened[z][:, :, key[2], key[3]])], copy

    section = layout.as_shape4((1, 1, height, width))
    strides = layout.strides_for(section, "C")
    band = tiles.plan_tile(section, [(strides, images.dtype.itemsize)], output=(strides, stored.itemsize))
    keys = [(slice(i, i + 1), *key[1:]) for i in range(len(order)) for key in tiles.tiles(section, band, strides)]
    target = stream.Region(temp.temp, created.offset, stored, shape, "C", named=temp.path).target()
    try:  # a small series' statistics by NumPy, as any small file's: no numba to load
        with compute_path.for_size(2 * math.prod(shape) * stored.itemsize, "a tilt series' sections"):
            stats = RunningStatistics.merged(stream.stream_tiles(reads, keys, target, dtype, progress))
    finally:
        target.close()
    mrc.FORMAT.finish(temp.temp, spec, stats.result())
    return meta.notices

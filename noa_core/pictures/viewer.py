"""The viewer's engine: a plane of a file drawn whole or as the tiles of a zoom pyramid, its histogram and
values, and the identity of a file or store that answers are cached by (the service's viewer is its door).

The plane drawn (:class:`Plane`): ``section`` picks an entry of a stack (the batch), ``axis`` and ``index`` a
slice of a volume (z: an XY section, y: XZ, x: YZ; default the central one), ``projection`` the mean along the
axis instead; ``reading`` the read options the file is read with (an EER movie's frames per fraction and
upsampling: a fraction is a section; a particle file's project folder), and ``projects`` how the stacks a particle
file names are opened (the service keeps them beneath its data root). Rows are shown as stored: row 0 at the top,
as RELION and mrcfile + Pillow show them (IMOD's 3dmod puts MRC's row 0 at the bottom).

Tile level L block-means 2^L x 2^L pixels of the plane; tile (x, y) of a level is its region of :data:`TILE` x
:data:`TILE` blocks, and only that region is read. Contrast limits of tiles, and histograms, come from the
plane's overview (the plane block-meaned to at most :data:`OVERVIEW` pixels a side), which :class:`Overviews`
keeps by the file's :func:`identity` (a particle file's: with those of the stacks it names; :func:`particle_row`
says what a section's row holds). :func:`montage` draws a page of a stack's sections in a grid, as ``noa preview
--montage`` draws them; :func:`tilts` says each section's tilt angle and dose where the files beside a tilt series
give them, and :func:`left_out` which sections ``noa tiltseries`` would leave out of it. Every read is checked
first: the voxels it spans against a limit the caller gives (LimitError), the memory drawing them takes against what
the machine has (MemoryLimitError).
"""

from __future__ import annotations

import hashlib
import math
import os
import stat
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from noa_core import io
from noa_core.array import dtypes
from noa_core.errors import NoaError, ParameterError
from noa_core.io import omezarr, particle_files, particles
from noa_core.limits import check_voxels, check_working_memory
from noa_core.pictures import drawing
from noa_core.tomography import sidefiles, tiltseries

TILE = 256  # the side of a tile, in pixels of its level
OVERVIEW = 1024  # the longest side of the picture histograms and the limits of tiles are computed over
SPECTRUM_BOX = 4096  # spectra of larger planes are those of their central SPECTRUM_BOX x SPECTRUM_BOX region
MAX_STORE_ENTRIES = 100_000  # files and folders of an OME-Zarr store its identity is made of; more: not cached
RULES = ("sigma:3", "percentiles:1,99", "minmax")  # the contrast rules whose limits a histogram reports
MONTAGE_PIXELS = 1 << 24  # the panels' pixels a montage draws at most: what one picture draws (4096 x 4096)

Region = tuple[int, int, int, int]  # (top, bottom, left, right) in the plane's full-resolution pixels


@dataclass(frozen=True)
class Plane:
    """Which plane of a file is drawn (see the module's documentation)."""

    section: int | None = None
    axis: str = "z"
    index: int | None = None
    projection: bool = False
    reading: tuple[tuple[str, Any], ...] = ()  # (name, value) of the read options given
    # How a particle file's stacks are opened (noa_core.io.read's ``projects``): not what is drawn, so not part
    # of a plane's equality (the overviews' key) or its text (ETags).
    projects: Any = field(default=None, compare=False, repr=False)

    def read_args(self) -> dict[str, Any]:
        """The plane as :func:`noa_core.pictures.drawing.read_plane` takes it."""
        return {"section": self.section, "axis": self.axis, "index": self.index, "projection": self.projection,
                "reading": dict(self.reading), "projects": self.projects}

    def shape(self, path: str | os.PathLike) -> tuple[int, int]:
        """(rows, cols) of the plane of the file at ``path``, from its header."""
        return drawing.plane_shape(path, axis=self.axis, reading=dict(self.reading), projects=self.projects)


@dataclass(frozen=True)
class Display:
    """How values become pixels: a contrast rule (:data:`noa_core.pictures.drawing.CONTRASTS`), dark values
    white with ``invert``, a colour map, and the picture's format (png, jpeg) and JPEG quality."""

    contrast: str = "sigma:3"
    invert: bool = False
    cmap: str = "gray"
    format: str = "png"
    quality: int = 90

    @property
    def media_type(self) -> str:
        return f"image/{self.format}"


# -- the identity of what is drawn ------------------------------------------------------------------------

def identity(fd: int, info: os.stat_result, path: str | os.PathLike | None = None, *, projects: Any = None,
             project_dir: str | None = None) -> str:
    """What changes whenever the data of the file opened as ``fd`` (``info``, its stat) do: its device, inode,
    size, modification and change times (a file rewritten in place whose modification time was put back, as
    ``cp -p`` and ``rsync -t --inplace`` do, has a new change time: no call sets it). A folder (an OME-Zarr
    store, whose chunks are rewritten in place beneath it) adds those of every file and folder in it, links
    not followed, hashed; a store of more than :data:`MAX_STORE_ENTRIES` gets an identity of its own for each
    call (never equal to another: nothing is cached by it). A particle file (``path`` names one) adds those of
    every stack it names, opened as its read opens them (``projects``, ``project_dir``: see
    :func:`noa_core.io.read`): a stack rewritten is a new picture of the file."""
    own = _stat_text(info)
    if path is not None and particle_files.is_particle_path(path):
        digest = hashlib.sha256(own.encode())
        project = (projects or particles.folder_projects)(project_dir)
        for name, entry in particles.stack_files(particle_files.open_table(path), project):
            digest.update(f"{name}:{_stat_text(entry)}\n".encode(errors="surrogateescape"))
        return f"{own}:{digest.hexdigest()}"
    if not stat.S_ISDIR(info.st_mode):
        return own
    digest, seen = hashlib.sha256(own.encode()), 0
    for folder, folders, files, folder_fd in os.fwalk(dir_fd=fd):
        folders.sort()  # the walk's order, so the same store hashes the same
        for name in sorted([*folders, *files]):
            seen += 1
            if seen > MAX_STORE_ENTRIES:
                return f"{own}:{os.urandom(16).hex()}"
            try:
                entry = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
            except FileNotFoundError:  # removed while walked: the next call sees the store as it is then
                continue
            digest.update(f"{folder}/{name}:{_stat_text(entry)}\n".encode())
    return f"{own}:{digest.hexdigest()}"


def _stat_text(info: os.stat_result) -> str:
    return f"{info.st_dev}:{info.st_ino}:{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}"


def header_summary(path: str | os.PathLike, projects: Any = None) -> dict[str, Any]:
    """The format, BDHW shape, element type, kind and pixel size of the file at ``path``, from its header
    alone (no data read; a particle file's stacks' headers, opened through ``projects``): the pixel size per D,
    H, W axis, None for an axis whose size is unknown (0 in the header), and None as a whole when none is known
    (``noa info`` says "unknown")."""
    probe = io.probe(path, projects=projects)
    sizes = [size if size > 0 else None for size in probe.metadata.pixel_size]
    return {"format": probe.metadata.format, "shape": list(probe.shape), "dtype": str(dtypes.base_of(probe.dtype)),
            "kind": probe.kind, "pixel_size": sizes if any(sizes) else None, "pixel_unit": probe.metadata.unit}


# -- tile geometry ----------------------------------------------------------------------------------------

def levels(rows: int, cols: int) -> int:
    """How many tile levels a plane has: level L block-means 2^L x 2^L pixels; the last fits in one tile."""
    top = 0
    while max(rows, cols) > TILE << top:
        top += 1
    return top + 1


def level_shape(rows: int, cols: int, level: int) -> tuple[int, int]:
    """The plane's shape at ``level``: ceil(n / 2^L) (blocks cut by the edge are the means of their pixels,
    as :func:`noa_core.pictures.drawing.read_plane` makes them)."""
    k = 1 << level
    return -(-rows // k), -(-cols // k)


def tile_region(rows: int, cols: int, level: int, x: int, y: int) -> Region:
    """The region of a ``rows`` x ``cols`` plane that tile (``x``, ``y``) of ``level`` shows (cut by the plane's
    edge); ParameterError naming ``level``, ``x`` or ``y`` when the plane has no such tile."""
    count = levels(rows, cols)
    if not 0 <= level < count:
        raise ParameterError(f"{level}: this plane ({rows} x {cols}) has levels 0 to {count - 1}", "level")
    level_rows, level_cols = level_shape(rows, cols, level)
    across, down = math.ceil(level_cols / TILE), math.ceil(level_rows / TILE)
    if not 0 <= x < across:
        raise ParameterError(f"{x}: level {level} has tiles 0 to {across - 1} across", "x")
    if not 0 <= y < down:
        raise ParameterError(f"{y}: level {level} has tiles 0 to {down - 1} down", "y")
    side = TILE << level
    return y * side, min((y + 1) * side, rows), x * side, min((x + 1) * side, cols)


# -- reading ----------------------------------------------------------------------------------------------

def read(path: str | os.PathLike, plane: Plane, *, region: Region | None = None, step: int = 1,
         spectrum: bool = False, max_voxels: int | None = None) -> np.ndarray:
    """The plane's values (its ``region``, block-meaned ``step`` x ``step``), read once the voxels this reads
    are within ``max_voxels`` (LimitError; None: no limit) and the memory drawing them (and with ``spectrum``,
    transforming them) takes is within what the machine has (MemoryLimitError)."""
    rows, cols = plane.shape(path)
    top, bottom, left, right = region or (0, rows, 0, cols)
    if max_voxels is not None:
        check_voxels([(_depth(path, plane), bottom - top, right - left)], max_voxels)
    pixels = -(-(bottom - top) // step) * -(-(right - left) // step)
    check_working_memory(drawing.working_bytes(pixels, spectrum=pixels if spectrum else 0), f"{path}: drawing")
    return drawing.read_plane(path, **plane.read_args(), region=region, step=step)


def _depth(path: str | os.PathLike, plane: Plane) -> int:
    """How many planes a projection averages (1 for a slice)."""
    if not plane.projection:
        return 1
    return drawing.depth_extent(io.probe(path, projects=plane.projects, **dict(plane.reading)).shape, plane.axis)


@dataclass(frozen=True)
class Overview:
    """A plane block-meaned ``step`` x ``step`` to at most :data:`OVERVIEW` pixels a side (``values``), and the
    plane's full ``shape`` (rows, cols)."""

    values: np.ndarray
    step: int
    shape: tuple[int, int]


class Overviews:
    """The last ``keep`` overviews, by file identity and plane: the tiles of one plane take their contrast
    limits from it without reading it each time. Shared by threads."""

    def __init__(self, keep: int = 8):
        self.keep = keep
        self._held: OrderedDict[tuple[str, Plane], Overview] = OrderedDict()
        # the pyramid level each viewer level of a plane reads (:func:`pyramid_level`), by file identity: found once,
        # not by probing the store's levels for every tile
        self._levels: OrderedDict[tuple[str, Plane, int], int] = OrderedDict()
        self._lock = threading.Lock()

    def holds(self, file_identity: str, plane: Plane) -> bool:
        """Whether the overview of ``plane`` of the file whose :func:`identity` is ``file_identity`` is kept."""
        with self._lock:
            return (file_identity, plane) in self._held

    def get(self, path: str | os.PathLike, file_identity: str, plane: Plane, *,
            max_voxels: int | None = None) -> Overview:
        """The overview of ``plane`` of the file at ``path`` whose :func:`identity` is ``file_identity``: the
        one kept, else read (:func:`read`, ``max_voxels`` its limit) and kept."""
        key = (file_identity, plane)
        with self._lock:
            if key in self._held:
                self._held.move_to_end(key)
                return self._held[key]
        rows, cols = plane.shape(path)
        step = max(1, math.ceil(max(rows, cols) / OVERVIEW))
        held = Overview(read(path, plane, step=step, max_voxels=max_voxels), step, (rows, cols))
        with self._lock:
            self._held[key] = held
            while len(self._held) > self.keep:
                self._held.popitem(last=False)
        return held

    def pyramid_level(self, path: str | os.PathLike, file_identity: str, plane: Plane, level: int) -> int:
        """:func:`pyramid_level` of the file at ``path`` whose :func:`identity` is ``file_identity``: the one found
        before, else found and kept (as many as ``keep`` planes' overviews hold levels)."""
        key = (file_identity, replace(plane, section=None, index=None), level)  # the same for every section
        with self._lock:
            if key in self._levels:
                self._levels.move_to_end(key)
                return self._levels[key]
        found = pyramid_level(path, plane, level)
        with self._lock:
            self._levels[key] = found
            while len(self._levels) > self.keep * 16:
                self._levels.popitem(last=False)
        return found


# -- answers ----------------------------------------------------------------------------------------------

def picture(values: np.ndarray, display: Display, lo: float, hi: float) -> bytes:
    """``values`` drawn between ``lo`` (black) and ``hi`` (white) as ``display`` says, encoded."""
    pixels = drawing.colorize(drawing.to_gray(values, lo, hi, invert=display.invert), display.cmap)
    return drawing.encode(pixels, display.format, quality=display.quality, fast=True)


def image(path: str | os.PathLike, plane: Plane, display: Display, size: int, *, spectrum: bool = False,
          max_voxels: int | None = None) -> bytes:
    """The plane (or, with ``spectrum``, its centred log power spectrum: that of the central
    :data:`SPECTRUM_BOX` square of larger planes) at most ``size`` pixels a side, its contrast limits computed
    over what is drawn."""
    rows, cols = plane.shape(path)
    if spectrum:
        box_rows, box_cols = min(rows, SPECTRUM_BOX), min(cols, SPECTRUM_BOX)
        top, left = (rows - box_rows) // 2, (cols - box_cols) // 2
        values = read(path, plane, region=(top, top + box_rows, left, left + box_cols), spectrum=True,
                      max_voxels=max_voxels)
        values = drawing.downsample(drawing.log_spectrum(values), size)
    else:
        values = read(path, plane, step=max(1, math.ceil(max(rows, cols) / size)), max_voxels=max_voxels)
    lo, hi = drawing.contrast_limits(values, display.contrast)
    return picture(values, display, lo, hi)


def tile(path: str | os.PathLike, plane: Plane, display: Display, level: int, x: int, y: int, *,
         file_identity: str, overviews: Overviews, max_voxels: int | None = None) -> bytes:
    """Tile (``x``, ``y``) of ``level`` (:func:`tile_region`). Contrast limits come from the plane's overview in
    ``overviews`` unless given as range:A,B. A level as coarse as the overview is drawn from it (no read); a finer
    one reads its region only: from an OME-Zarr input's own pyramid level where it has one (:func:`pyramid_level`),
    else block-meaned from full resolution."""
    rows, cols = plane.shape(path)
    region = tile_region(rows, cols, level, x, y)
    given = drawing.parse_contrast(display.contrast)[0] == "range"
    overview = None if given and not overviews.holds(file_identity, plane) else \
        overviews.get(path, file_identity, plane, max_voxels=max_voxels)
    lo, hi = drawing.contrast_limits(() if overview is None else overview.values, display.contrast)
    if overview is not None and (1 << level) % overview.step == 0:
        values = _from_overview(overview, region, (1 << level) // overview.step)
        return picture(values.astype(np.float32), display, lo, hi)
    stored = overviews.pyramid_level(path, file_identity, plane, level)
    if stored:
        plane, region = _at_stored_level(plane, region, stored)
    return picture(read(path, plane, region=region, step=1 << (level - stored), max_voxels=max_voxels),
                   display, lo, hi)


def _from_overview(overview: Overview, region: Region, factor: int) -> np.ndarray:
    """The block means of ``factor`` x ``factor`` of the overview's pixels over ``region`` of the plane, each pixel
    weighted by the plane's pixels it is the mean of (a partial block at the plane's end has fewer): the plane's own
    block means, at its edges too."""
    top, bottom, left, right = (-(-edge // overview.step) for edge in region)
    rows, cols = overview.shape
    step = overview.step
    weights = np.outer(np.minimum(step, rows - step * np.arange(top, bottom)),
                       np.minimum(step, cols - step * np.arange(left, right))).astype(np.float64)
    weighted = overview.values[top:bottom, left:right] * weights
    return drawing.block_mean(weighted, factor) / drawing.block_mean(weights, factor)


def pyramid_level(path: str | os.PathLike, plane: Plane, level: int) -> int:
    """The level of an OME-Zarr input's own multiscale pyramid that a tile of the viewer's ``level`` reads: the
    coarsest at most ``level`` whose sections are the viewer's level's (height and width halved, rounded up, at
    each level, as noa writes pyramids and as :func:`level_shape` counts), with the same sections (a stack's, a
    tilt series'); 0 (full resolution) for other inputs, for planes across sections (x, y slices, projections),
    and for a volume, whose pyramid halves its depth too: its slice there would be the mean of several, not the
    slice shown at the other levels."""
    if level == 0 or plane.axis != "z" or plane.projection or not omezarr.is_store(Path(path)):
        return 0
    reading = {**dict(plane.reading), "level": None}
    batch, depth, rows, cols = io.probe(path, projects=plane.projects, **reading).shape
    found = 0
    for stored in range(1, level + 1):
        try:
            shape = io.probe(path, projects=plane.projects, **{**reading, "level": stored}).shape
        except NoaError:  # no such level, or one noa cannot read: the finer one serves
            break
        if tuple(shape) != (batch, depth, *level_shape(rows, cols, stored)):
            break
        found = stored
    return found


def _at_stored_level(plane: Plane, region: Region, stored: int) -> tuple[Plane, Region]:
    """The plane and region of the pyramid's level ``stored`` that show ``region`` of ``plane``."""
    k = 1 << stored
    top, bottom, left, right = region
    return replace(plane, reading=tuple({**dict(plane.reading), "level": stored}.items())), \
        (top // k, -(-bottom // k), left // k, -(-right // k))


def histogram(path: str | os.PathLike, plane: Plane, *, file_identity: str, overviews: Overviews, bins: int = 256,
              contrast: str | None = None, max_voxels: int | None = None) -> dict[str, Any]:
    """The histogram of the plane's overview (in ``overviews``) in ``bins`` bins, its statistics (None when no
    value is finite), the limits of each rule of :data:`RULES` and of ``contrast``, and the plane's geometry
    (its shape, the overview's step, the tile size, how many levels)."""
    overview = overviews.get(path, file_identity, plane, max_voxels=max_voxels)
    (rows, cols), values = overview.shape, overview.values
    finite = values[np.isfinite(values)]
    counts, edges = drawing.histogram(finite, bins)
    rules = RULES if contrast is None or contrast in RULES else (*RULES, contrast)
    return {
        "plane": [rows, cols], "step": overview.step, "tile": TILE, "levels": levels(rows, cols),
        "counts": [int(c) for c in counts], "edges": [float(e) for e in edges],
        "limits": {rule: [float(v) for v in drawing.contrast_limits(values, rule)] for rule in rules},
        "statistics": {"min": float(finite.min()), "max": float(finite.max()), "mean": float(finite.mean()),
                       "sd": float(finite.std())} if finite.size else None,
    }


def value(path: str | os.PathLike, plane: Plane, x: int, y: int) -> float:
    """The value of the plane at column ``x``, row ``y`` (the mean along the axis for a projection);
    ParameterError naming ``x`` or ``y`` outside the plane."""
    rows, cols = plane.shape(path)
    if not 0 <= x < cols:
        raise ParameterError(f"{x}: the plane has columns 0 to {cols - 1}", "x")
    if not 0 <= y < rows:
        raise ParameterError(f"{y}: the plane has rows 0 to {rows - 1}", "y")
    return float(drawing.read_plane(path, **plane.read_args(), region=(y, y + 1, x, x + 1))[0, 0])


def montage_layout(path: str | os.PathLike, first: int, count: int, columns: int | None, size: int, *,
                   reading: tuple[tuple[str, Any], ...] = (), projects: Any = None) -> drawing.Layout:
    """The layout of the montage of sections ``first`` to ``first + count - 1`` of the stack at ``path`` (fewer at
    its end), from its header: :func:`noa_core.pictures.drawing.plan_layout`'s montage, each panel block-meaned k x k
    as :func:`image` draws a section at ``size`` (k = ceil(longest side / size)). ParameterError naming ``file`` for a
    volume (its sections are no stack's), ``first`` past the sections, ``count`` or ``size`` below 1, and ``size``
    when the panels' pixels are more than :data:`MONTAGE_PIXELS` (counted before anything is laid out per panel)."""
    batch, depth, rows, cols = io.probe(path, projects=projects, **dict(reading)).shape
    if depth > 1:
        raise ParameterError(f"{path}: a volume of {depth} slices; a montage shows the sections of a stack", "file")
    if not 0 <= first < batch:
        raise ParameterError(f"{first}: the file has sections 0 to {batch - 1}", "first")
    if size < 1:
        raise ParameterError(f"{size}: a panel is 1 pixel a side or more", "size")
    step = max(1, math.ceil(max(rows, cols) / size))
    panels = min(count, batch - first)
    pixels = panels * -(-rows // step) * -(-cols // step)
    if pixels > MONTAGE_PIXELS:
        raise ParameterError(f"{size}: {panels} panels of up to {size} x {size} pixels are {pixels} pixels, more "
                             f"than the {MONTAGE_PIXELS} a montage draws; ask for fewer or smaller panels", "size")
    return drawing.plan_layout((batch, 1, rows, cols), montage=True, first=first, count=count, columns=columns,
                               bin=step)


def montage(path: str | os.PathLike, display: Display, first: int, count: int, columns: int | None, size: int, *,
            reading: tuple[tuple[str, Any], ...] = (), projects: Any = None, max_voxels: int | None = None) -> bytes:
    """The montage of :func:`montage_layout`, drawn as ``noa preview --montage`` draws one
    (:func:`noa_core.pictures.drawing.draw`: the background black, the contrast limits computed over every panel's
    values together, so panels compare), encoded; read once the sections it reads are within ``max_voxels``
    (LimitError) and the memory drawing them takes is within what the machine has (MemoryLimitError)."""
    layout = montage_layout(path, first, count, columns, size, reading=reading, projects=projects)
    rows, cols = layout.panels[0].rows, layout.panels[0].cols
    if max_voxels is not None:
        check_voxels([(len(layout.panels), 1, rows, cols)], max_voxels)
    drawn_rows, drawn_cols = layout.panel_shape(layout.panels[0])
    check_working_memory(drawing.working_bytes(len(layout.panels) * drawn_rows * drawn_cols), f"{path}: drawing")
    pixels = drawing.preview(path, montage=True, first=first, count=count, columns=columns, bin=layout.step,
                             contrast=display.contrast, invert=display.invert, cmap=display.cmap,
                             reading=dict(reading), projects=projects)
    return drawing.encode(pixels, display.format, quality=display.quality, fast=True)


def particle_row(path: str | os.PathLike, section: int) -> dict[str, Any]:
    """What the particle file at ``path`` says of the particle that is section ``section`` of its stack: the
    file's kind, the row (from 1, as RELION counts them) and its columns (:meth:`particle_files.Table.columns`);
    ParameterError naming ``file`` for a file that is not a particle file, ``section`` for one past its rows."""
    if not particle_files.is_particle_path(path):
        raise ParameterError(f"{path}: not a particle file (.star, .cs): its sections are no file's rows", "file")
    table = particle_files.open_table(path)
    if not 0 <= section < table.rows:
        raise ParameterError(f"{section}: the file has sections 0 to {table.rows - 1}", "section")
    return {"kind": table.kind, "row": section + 1, "columns": table.columns(section)}


def tilts(path: str | os.PathLike, *, reading: tuple[tuple[str, Any], ...] = (),
          projects: Any = None) -> tuple[int, sidefiles.SectionTilts]:
    """The sections of the stack at ``path`` (from its header, read with ``reading``) and what the files beside it say
    of them (:func:`noa_core.tomography.sidefiles.section_tilts`), opened through ``projects`` (the service keeps
    them beneath its data root); ParameterError naming ``file`` for a volume (its slices are no tilt series')."""
    batch, depth, _, _ = io.probe(path, projects=projects, **dict(reading)).shape
    if depth > 1:
        raise ParameterError(f"{path}: a volume of {depth} slices; a tilt series is a stack of sections", "file")
    project = (projects or particles.folder_projects)(None)
    return batch, sidefiles.section_tilts(project, project.name_of(Path(path)), batch)


@dataclass(frozen=True)
class Exclusions:
    """What ``noa tiltseries`` is told to leave out of a tilt series (its options of these names): IMOD's view numbers
    ``exclude`` (from 1), tilts beyond ``max_angle`` degrees, tilts darker than ``exclude_dark`` times the median."""

    exclude: str | None = None
    max_angle: float | None = None
    exclude_dark: float | None = None


def left_out(path: str | os.PathLike, sections: int, found: sidefiles.SectionTilts, exclusions: Exclusions, *,
             reading: tuple[tuple[str, Any], ...] = (), projects: Any = None,
             max_voxels: int | None = None) -> dict[int, str]:
    """The sections of the stack at ``path`` that ``noa tiltseries`` would leave out with ``exclusions`` (section ->
    why, :func:`noa_core.tomography.tiltseries.left_out`'s words), previewed on the stack before it is built: section
    i is view i + 1 (the mdoc's ZValue i, where the mdoc is beside it), the angles are those the files beside it give
    (``found``, :func:`tilts`), and with ``exclude_dark`` each section not left out by view or angle is read (a section
    at a time, the voxels checked against ``max_voxels`` first: LimitError) for its mean, as the operation reads them.
    ParameterError naming ``exclude`` (not IMOD's views, a view past the stack), or the first exclusion given where
    the files give no angles."""
    given = [name for name, value in vars(exclusions).items() if value is not None]
    if not given:
        return {}
    if found.angles is None:
        raise ParameterError(f"{path}: the files beside it give no tilt angles: no tilt series to leave tilts out of",
                             given[0])
    views = [] if exclusions.exclude is None else tiltseries.views(exclusions.exclude, sections)
    by_view_or_angle = tiltseries.left_out(found.angles, views, exclusions.max_angle, None, None)
    means = None
    if exclusions.exclude_dark is not None:
        data, _ = drawing.open_data(path, dict(reading), projects)
        if max_voxels is not None:
            check_voxels([(sections - len(by_view_or_angle), *data.shape[1:])], max_voxels)
        means = tiltseries.section_means(lambda z: data[z:z + 1], sections, by_view_or_angle)
    return tiltseries.left_out(found.angles, views, exclusions.max_angle, exclusions.exclude_dark, means)

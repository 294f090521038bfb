"""The viewer: ``GET /v1/view/...`` (pictures, tiles, histograms, headers, values of files under the data
root) and the page ``/view`` that browses the data root with them.

Every endpoint names its file by ``file``, a path relative to the data root, opened beneath the root as
path requests are (:meth:`Sandbox.open`: no ``..``, no symlink out of the root), behind the API key
(they live under ``/v1``) and in the worker pool. Pictures come from :mod:`noa_core.pictures.drawing`, which
reads only the plane (or, for a tile, the region) it draws, with its working memory checked against what the
machine has (507 when short). Answers carry an ETag made of the file's identity (:func:`identity`: what changes
when its data do) and the query, so a browser revalidates a picture with ``If-None-Match`` and gets a 304
without the file being read again.

The plane drawn: ``section`` picks an entry of a stack (the batch), ``axis`` and ``index`` a slice of a
volume (z: an XY section, y: XZ, x: YZ; default the central one), ``projection`` the mean along the axis
instead. Rows are shown as stored: row 0 at the top, as RELION and mrcfile + Pillow show them (IMOD's
3dmod puts MRC's row 0 at the bottom).
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response

from noa_core import __version__
from noa_core.errors import ParameterError
from noa_core.operations import Operation
from noa_server import execution
from noa_server.limits import check_voxels
from noa_server.problems import ProblemError, classify, documented, log
from noa_server.sandbox import Sandbox
from noa_server.service import Service, service

TILE = 256  # the side of a tile, in pixels of its level
OVERVIEW = 1024  # the longest side of the picture histograms and the limits of tiles are computed over
SPECTRUM_BOX = 4096  # spectra of larger planes are those of their central SPECTRUM_BOX x SPECTRUM_BOX region
MAX_LISTED = 2000  # entries of a folder listing; more are cut (``truncated``)
MAX_STORE_ENTRIES = 100_000  # files and folders of an OME-Zarr store its identity is made of; more: not cached
RULES = ("sigma:3", "percentiles:1,99", "minmax")  # the contrast rules whose limits a histogram reports
# The browser keeps pictures and revalidates them (If-None-Match) before each use: a file rewritten in
# place gets a new ETag. ``private``: answers behind an API key are for this client only.
CACHE = "private, no-cache"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
STATIC = ("view.html", "view.js", "view.css")
# The forms of a contrast rule; their numbers are checked once the file is found (noa_core.pictures.drawing.parse_contrast).
CONTRAST_PATTERN = r"^(sigma:[^,]+|percentiles:[^,]+,[^,]+|minmax|range:[^,]+,[^,]+)$"

Svc = Annotated[Service, Depends(service)]
ERRORS = documented(400, 403, 404, 422, 500)
IMAGE = {200: {"description": "The picture.", "content": {"image/png": {}, "image/jpeg": {}}},
         304: {"description": "Not modified (If-None-Match matched the ETag)."}, **ERRORS}
JSON = {304: {"description": "Not modified (If-None-Match matched the ETag)."}, **ERRORS}


@dataclass(frozen=True)
class Plane:
    """Which plane of a file is drawn (see the module's documentation)."""

    file: str
    section: int | None
    axis: str
    index: int | None
    projection: bool

    def read_args(self) -> dict[str, Any]:
        return {"section": self.section, "axis": self.axis, "index": self.index, "projection": self.projection}


@dataclass(frozen=True)
class Display:
    """How values become pixels."""

    contrast: str
    invert: bool
    cmap: str
    format: str
    quality: int


def plane_query(
        file: Annotated[str, Query(min_length=1, max_length=1024,
                                   description="The file, relative to the data root.")],
        section: Annotated[int | None, Query(ge=0, description="Entry of a stack (the batch index).")] = None,
        axis: Annotated[Literal["z", "y", "x"], Query(
            description="Volumes: the axis across the slice (z: XY sections, y: XZ, x: YZ).")] = "z",
        index: Annotated[int | None, Query(ge=0, description="Volumes: the slice along axis (default N // 2).")]
        = None,
        projection: Annotated[bool, Query(description="Volumes: the mean along axis instead of a slice.")] = False,
) -> Plane:
    return Plane(file, section, axis, index, projection)


def display_query(
        contrast: Annotated[str, Query(max_length=64, pattern=CONTRAST_PATTERN, description=(
            "sigma:K (mean ± K standard deviations, RELION's --sigma_contrast K), percentiles:LO,HI, minmax, or "
            "range:A,B; computed over what is drawn (tiles: over the plane's overview, see /v1/view/histogram)."))]
        = "sigma:3",
        invert: Annotated[bool, Query(description="Dark values white.")] = False,
        cmap: Annotated[Literal["gray", "fire", "ice", "viridis"], Query(description="Colour map.")] = "gray",
        format: Annotated[Literal["png", "jpeg"], Query(description="png (exact values) or jpeg.")] = "png",
        quality: Annotated[int, Query(ge=1, le=95, description="JPEG quality (Pillow's scale).")] = 90,
) -> Display:
    return Display(contrast, invert, cmap, format, quality)


PlaneQ = Annotated[Plane, Depends(plane_query)]
DisplayQ = Annotated[Display, Depends(display_query)]


# -- files: opened beneath the root, seen by noa_core through a link named as the client's file --------

@dataclass
class Opened:
    """A file of the data root opened for the viewer: ``path`` is what noa_core reads (a link to the
    opened descriptor ``fd``, named as the file so its extension still tells the format)."""

    path: Path
    fd: int
    info: os.stat_result
    names: execution.ClientNames

    @functools.cached_property
    def identity(self) -> str:
        """What changes whenever the file's data do (:func:`identity`), found once per request."""
        return identity(self.fd, self.info)


def identity(fd: int, info: os.stat_result) -> str:
    """What changes whenever the data of the file opened as ``fd`` (``info``, its stat) do: its device, inode,
    size, modification and change times (a file rewritten in place whose modification time was put back, as
    ``cp -p`` and ``rsync -t --inplace`` do, has a new change time: no call sets it). A folder (an OME-Zarr
    store, whose chunks are rewritten in place beneath it) adds those of every file and folder in it, links
    not followed, hashed; a store of more than :data:`MAX_STORE_ENTRIES` gets an identity of its own for each
    request (never a 304 or a cached overview)."""
    own = f"{info.st_dev}:{info.st_ino}:{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}"
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
            except FileNotFoundError:  # removed while walked: the next request sees the store as it is then
                continue
            digest.update(f"{folder}/{name}:{entry.st_ino}:{entry.st_size}:{entry.st_mtime_ns}:"
                          f"{entry.st_ctime_ns}\n".encode())
    return f"{own}:{digest.hexdigest()}"


@contextmanager
def opened(sandbox: Sandbox, relative: str, links: Path | None = None) -> Iterator[Opened]:
    """``relative`` opened beneath the root (a regular file, or the folder of an OME-Zarr store), for the
    ``with`` block; ``links`` is a folder of :func:`execution.new_upload_folder` to put the link in (one
    is made and removed when None)."""
    fd, _ = sandbox.open(relative)
    own = links is None
    link = None
    try:
        info = os.fstat(fd)
        if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
            raise ProblemError(404, "file-not-found", "File not found", f"{relative}: no such file")
        if own:
            links = execution.new_upload_folder(sandbox.scratch)
        link = Path(links, str(fd), PurePosixPath(relative).name)  # fd: unique while the file is open
        link.parent.mkdir()
        link.symlink_to(f"{execution.PROC_FD}/{fd}")
        names = execution.ClientNames({str(link): relative, f"{links}/": "", f"{sandbox.root}/": ""})
        with names.in_errors():
            yield Opened(link, fd, info, names)
    finally:
        if own and links is not None:
            execution.remove_upload_folder(links)
        elif link is not None and link.parent.exists():  # the folder is another's: free the name for the next
            link.unlink(missing_ok=True)
            link.parent.rmdir()
        os.close(fd)


def etag(identity: str, *parts: Any) -> str:
    """A strong ETag for what ``parts`` (the endpoint and its parameters) make of the file ``identity``
    names, with this noa's version (a new version may draw differently)."""
    text = "|".join([__version__, identity, *map(repr, parts)])
    return '"' + hashlib.sha256(text.encode()).hexdigest()[:32] + '"'


def matches(if_none_match: str | None, tag: str) -> bool:
    """Whether an If-None-Match header names ``tag`` (weak comparison, as RFC 9110 asks for this header)."""
    if not if_none_match:
        return False
    given = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
    return "*" in given or tag in given


@dataclass(frozen=True)
class Answer:
    """A computed answer (``body`` None: not modified) with its ETag."""

    tag: str
    body: bytes | dict | None
    media_type: str = "application/json"


def _cached(opened_file: Opened, if_none_match: str | None, parts: tuple, compute: Callable[[], Any],
            media_type: str = "application/json") -> Answer:
    tag = etag(opened_file.identity, *parts)
    if matches(if_none_match, tag):
        return Answer(tag, None, media_type)
    return Answer(tag, compute(), media_type)


def _respond(answer: Answer) -> Response:
    headers = {"ETag": answer.tag, "Cache-Control": CACHE}
    if answer.body is None:
        return Response(status_code=304, headers=headers)
    if isinstance(answer.body, dict):
        return JSONResponse(answer.body, headers=headers)
    return Response(answer.body, media_type=answer.media_type, headers=headers)


# -- what is drawn ------------------------------------------------------------------------------------

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


def _read(file: Opened, plane: Plane, max_voxels: int, *, region: tuple[int, int, int, int] | None = None,
          step: int = 1, spectrum: bool = False) -> Any:
    """The plane's values (its ``region``, block-meaned ``step`` x ``step``), read once the voxels this reads
    are within the server's limit (422) and the memory drawing them (and with ``spectrum``, transforming them)
    takes is within what the machine has (507)."""
    from noa_core.pictures import drawing
    from noa_core.limits import check_working_memory

    rows, cols = drawing.plane_shape(file.path, axis=plane.axis)
    top, bottom, left, right = region or (0, rows, 0, cols)
    check_voxels([(_depth(file.path, plane), bottom - top, right - left)], max_voxels)
    pixels = -(-(bottom - top) // step) * -(-(right - left) // step)
    check_working_memory(drawing.working_bytes(pixels, spectrum=pixels if spectrum else 0), f"{plane.file}: drawing")
    return drawing.read_plane(file.path, **plane.read_args(), region=region, step=step)


def _depth(path: Path, plane: Plane) -> int:
    """How many planes a projection averages (1 for a slice)."""
    if not plane.projection:
        return 1
    from noa_core import io

    shape = io.probe(path).shape
    return {"z": shape[1], "y": shape[2], "x": shape[3]}[plane.axis]


class _Overviews:
    """The last few overviews (planes block-meaned to at most OVERVIEW pixels a side), by file identity
    and plane: the tiles of one plane take their contrast limits from it without reading it each time."""

    def __init__(self, keep: int = 8):
        self.keep = keep
        self._held: OrderedDict[tuple, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, opened_file: Opened, plane: Plane, max_voxels: int) -> tuple[Any, int, tuple[int, int]]:
        """``(values, step, (rows, cols))`` of the plane's overview."""
        from noa_core.pictures import drawing

        key = (opened_file.identity, plane.section, plane.axis, plane.index, plane.projection)
        with self._lock:
            if key in self._held:
                self._held.move_to_end(key)
                return self._held[key]
        rows, cols = drawing.plane_shape(opened_file.path, axis=plane.axis)
        step = max(1, math.ceil(max(rows, cols) / OVERVIEW))
        held = (_read(opened_file, plane, max_voxels, step=step), step, (rows, cols))
        with self._lock:
            self._held[key] = held
            while len(self._held) > self.keep:
                self._held.popitem(last=False)
        return held


OVERVIEWS = _Overviews()


def _picture(values: Any, display: Display, lo: float, hi: float) -> bytes:
    from noa_core.pictures import drawing

    pixels = drawing.colorize(drawing.to_gray(values, lo, hi, invert=display.invert), display.cmap)
    return drawing.encode(pixels, display.format, quality=display.quality)


def _media(display: Display) -> str:
    return f"image/{display.format}"


def image(sandbox: Sandbox, plane: Plane, display: Display, size: int, spectrum: bool, if_none_match: str | None,
          max_voxels: int) -> Answer:
    """The plane (or its log power spectrum) at most ``size`` pixels a side, as PNG or JPEG."""
    from noa_core.pictures import drawing

    def compute() -> bytes:
        rows, cols = drawing.plane_shape(file.path, axis=plane.axis)
        if spectrum:
            box_rows, box_cols = min(rows, SPECTRUM_BOX), min(cols, SPECTRUM_BOX)
            top, left = (rows - box_rows) // 2, (cols - box_cols) // 2
            values = _read(file, plane, max_voxels, region=(top, top + box_rows, left, left + box_cols), spectrum=True)
            values = drawing.downsample(drawing.log_spectrum(values), size)
        else:
            values = _read(file, plane, max_voxels, step=max(1, math.ceil(max(rows, cols) / size)))
        lo, hi = drawing.contrast_limits(values, display.contrast)
        return _picture(values, display, lo, hi)

    with opened(sandbox, plane.file) as file:
        drawing.parse_contrast(display.contrast)  # after the file: a missing file is named first
        return _cached(file, if_none_match, ("image", plane, display, size, spectrum), compute, _media(display))


def tile(sandbox: Sandbox, plane: Plane, display: Display, level: int, x: int, y: int, if_none_match: str | None,
         max_voxels: int) -> Answer:
    """Tile (x, y) of ``level``: the plane's region of TILE x TILE blocks of 2^level x 2^level pixels,
    block-meaned; only that region is read. Contrast limits come from the plane's overview unless given
    as range:A,B."""
    from noa_core.pictures import drawing

    def compute() -> bytes:
        rows, cols = drawing.plane_shape(file.path, axis=plane.axis)
        if level >= levels(rows, cols):
            raise ParameterError(f"{level}: this plane ({rows} x {cols}) has levels 0 to {levels(rows, cols) - 1}",
                                 "level")
        level_rows, level_cols = level_shape(rows, cols, level)
        across, down = math.ceil(level_cols / TILE), math.ceil(level_rows / TILE)
        if x >= across:
            raise ParameterError(f"{x}: level {level} has tiles 0 to {across - 1} across", "x")
        if y >= down:
            raise ParameterError(f"{y}: level {level} has tiles 0 to {down - 1} down", "y")
        k = 1 << level
        region = (y * TILE * k, min((y + 1) * TILE * k, rows), x * TILE * k, min((x + 1) * TILE * k, cols))
        given = drawing.parse_contrast(display.contrast)[0] == "range"
        lo, hi = drawing.contrast_limits(() if given else OVERVIEWS.get(file, plane, max_voxels)[0], display.contrast)
        values = _read(file, plane, max_voxels, region=region, step=k)
        return _picture(values, display, lo, hi)

    with opened(sandbox, plane.file) as file:
        drawing.parse_contrast(display.contrast)
        return _cached(file, if_none_match, ("tile", plane, display, level, x, y), compute, _media(display))


def histogram(sandbox: Sandbox, plane: Plane, bins: int, contrast: str | None, if_none_match: str | None,
              max_voxels: int) -> Answer:
    """The histogram of the plane's overview, its statistics, the limits of each contrast rule, and the
    plane's geometry (shape, tile size, levels)."""
    import numpy as np

    from noa_core.pictures import drawing

    def compute() -> dict:
        values, step, (rows, cols) = OVERVIEWS.get(file, plane, max_voxels)
        finite = values[np.isfinite(values)]
        counts, edges = drawing.histogram(finite, bins)
        rules = RULES if contrast is None or contrast in RULES else (*RULES, contrast)
        result = {
            "file": plane.file, "plane": [rows, cols], "step": step, "tile": TILE, "levels": levels(rows, cols),
            "counts": [int(c) for c in counts], "edges": [float(e) for e in edges],
            "limits": {rule: [float(v) for v in drawing.contrast_limits(values, rule)] for rule in rules},
            "statistics": {"min": float(finite.min()), "max": float(finite.max()), "mean": float(finite.mean()),
                           "sd": float(finite.std())} if finite.size else None,
        }
        return execution.for_client(result, file.names)

    with opened(sandbox, plane.file) as file:
        if contrast is not None:
            drawing.parse_contrast(contrast)
        return _cached(file, if_none_match, ("histogram", plane, bins, contrast), compute)


def value(sandbox: Sandbox, plane: Plane, x: int, y: int, if_none_match: str | None) -> Answer:
    """The value of the plane at column ``x``, row ``y`` (the mean along the axis for a projection)."""
    from noa_core.pictures import drawing

    def compute() -> dict:
        rows, cols = drawing.plane_shape(file.path, axis=plane.axis)
        if x >= cols:
            raise ParameterError(f"{x}: the plane has columns 0 to {cols - 1}", "x")
        if y >= rows:
            raise ParameterError(f"{y}: the plane has rows 0 to {rows - 1}", "y")
        found = drawing.read_plane(file.path, **plane.read_args(), region=(y, y + 1, x, x + 1))
        return execution.for_client({"file": plane.file, "x": x, "y": y, "value": float(found[0, 0])}, file.names)

    with opened(sandbox, plane.file) as file:
        return _cached(file, if_none_match, ("value", plane, x, y), compute)


def header(sandbox: Sandbox, info: Operation, relative: str, if_none_match: str | None) -> Answer:
    """What ``noa info`` says of the file (its header alone)."""

    def compute() -> dict:
        described = info.run_report(file.path, info.options({}))
        return execution.for_client({**described, "path": relative}, file.names)

    with opened(sandbox, relative) as file:
        return _cached(file, if_none_match, ("info",), compute)


def listing(sandbox: Sandbox, relative: str) -> dict:
    """The folders and files of a folder of the data root ("" for the root itself): each file with its
    format, BDHW shape, element type and pixel size from its header (no data read), or why noa cannot
    read it. Hidden entries (names starting with a dot) are left out."""
    if relative in ("", "."):
        fd, folder = os.open(sandbox.root, os.O_RDONLY | os.O_DIRECTORY), ""
    else:
        try:
            fd, _ = sandbox.open(relative.rstrip("/"), os.O_RDONLY | os.O_DIRECTORY)
        except ProblemError as exc:
            if exc.status == 404 and os.path.isfile(sandbox.resolve(relative.rstrip("/"))):
                exc.detail = f"{relative}: a file, not a folder"
            raise
        folder = relative.rstrip("/") + "/"
    try:
        with os.scandir(fd) as scan:
            names = sorted(entry.name for entry in scan if not entry.name.startswith("."))
    finally:
        os.close(fd)
    folders, files = [], []
    links = execution.new_upload_folder(sandbox.scratch)
    try:
        for name in names[:MAX_LISTED]:
            entry = _entry(sandbox, folder + name, links)
            if entry is not None:
                (folders if entry.pop("folder") else files).append(entry)
    finally:
        execution.remove_upload_folder(links)
    return {"path": folder.rstrip("/"), "folders": folders, "files": files, "truncated": len(names) > MAX_LISTED}


def _entry(sandbox: Sandbox, relative: str, links: Path) -> dict | None:
    """One entry of a listing; None for what a client may not open (a link out of the root, the job
    state, a device or socket)."""
    from noa_core import io
    from noa_core.array import dtypes

    name = PurePosixPath(relative).name
    try:
        path = sandbox.resolve(relative)
        info = path.stat()
    except (ProblemError, OSError):
        return None
    if stat.S_ISDIR(info.st_mode) and not name.lower().endswith(".zarr"):
        return {"folder": True, "name": name, "path": relative}
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
        return None
    entry: dict[str, Any] = {"folder": False, "name": name, "path": relative, "bytes": info.st_size}
    try:
        with opened(sandbox, relative, links) as file:
            probe = io.probe(file.path)
            entry.update(format=probe.metadata.format, shape=list(probe.shape),
                         dtype=str(dtypes.base_of(probe.dtype)), kind=probe.kind,
                         pixel_size=list(probe.metadata.pixel_size), pixel_unit=probe.metadata.unit)
    except Exception as exc:  # noqa: BLE001 - one unreadable file must not hide the folder's others
        problem = classify(exc)
        if problem is None:
            log.warning("listing %s: %s cannot be probed", relative, type(exc).__name__, exc_info=exc)
        entry["error"] = problem.detail if problem is not None else "noa cannot read this file (see the server log)"
    return execution.for_client(entry, execution.ClientNames({f"{sandbox.root}/": ""}))


# -- routes -------------------------------------------------------------------------------------------

def router(operations: list[Operation]) -> APIRouter:
    """``GET /view/...`` under /v1 (the API key applies); ``header`` is the ``info`` operation of the registry."""
    info = next(op for op in operations if op.name == "info")
    routes = APIRouter(prefix="/view", tags=["viewer"])

    @routes.get("/list", summary="Folders and image files of a folder of the data root", responses=ERRORS)
    async def list_folder(svc: Svc, path: Annotated[str, Query(
            max_length=1024, description="A folder relative to the data root; empty for the root.")] = "") -> Response:
        result = await svc.run(listing, svc.paths(), path)
        return JSONResponse(result, headers={"Cache-Control": "no-store"})

    @routes.get("/image", summary="A plane (slice, section, projection) or its power spectrum, as PNG or JPEG",
                response_class=Response, responses=IMAGE)
    async def view_image(request: Request, svc: Svc, plane: PlaneQ, display: DisplayQ,
                         size: Annotated[int, Query(ge=16, le=4096, description=(
                             "Longest side in pixels: block means of k x k pixels, k = ceil(longest side / size)."))]
                         = 1024,
                         spectrum: Annotated[bool, Query(description=(
                             "The log power spectrum (centred) instead; planes over 4096 pixels a side: that of "
                             "their central 4096 x 4096 region."))] = False) -> Response:
        return _respond(await svc.run(image, svc.paths(), plane, display, size, spectrum,
                                      request.headers.get("if-none-match"), svc.settings.max_voxels))

    @routes.get("/tile", summary=f"A {TILE} x {TILE} tile of a plane at a zoom level (only its region is read)",
                response_class=Response, responses=IMAGE)
    async def view_tile(request: Request, svc: Svc, plane: PlaneQ, display: DisplayQ,
                        level: Annotated[int, Query(ge=0, le=40, description=(
                            "Level L: pixels are block means of 2^L x 2^L pixels of the plane."))] = 0,
                        x: Annotated[int, Query(ge=0, description="Tile column (from the left).")] = 0,
                        y: Annotated[int, Query(ge=0, description="Tile row (from the top: row 0 as stored).")] = 0,
                        ) -> Response:
        return _respond(await svc.run(tile, svc.paths(), plane, display, level, x, y,
                                      request.headers.get("if-none-match"), svc.settings.max_voxels))

    @routes.get("/histogram", summary="Histogram, statistics, contrast limits and geometry of a plane",
                responses=JSON)
    async def view_histogram(request: Request, svc: Svc, plane: PlaneQ,
                             bins: Annotated[int, Query(ge=2, le=4096)] = 256,
                             contrast: Annotated[str | None, Query(
                                 max_length=64, pattern=CONTRAST_PATTERN, description=(
                                 "A contrast rule whose limits to report besides sigma:3, percentiles:1,99 and "
                                 "minmax."))] = None) -> Response:
        return _respond(await svc.run(histogram, svc.paths(), plane, bins, contrast,
                                      request.headers.get("if-none-match"), svc.settings.max_voxels))

    @routes.get("/value", summary="The value of a plane at a pixel (the viewer's cursor readout)", responses=JSON)
    async def view_value(request: Request, svc: Svc, plane: PlaneQ,
                         x: Annotated[int, Query(ge=0, description="Column.")],
                         y: Annotated[int, Query(ge=0, description="Row (row 0 as stored).")]) -> Response:
        return _respond(await svc.run(value, svc.paths(), plane, x, y, request.headers.get("if-none-match")))

    @routes.get("/info", summary="The header of a file, as noa info describes it", responses=JSON)
    async def view_info(request: Request, svc: Svc, file: Annotated[str, Query(min_length=1, max_length=1024)]
                        ) -> Response:
        return _respond(await svc.run(header, svc.paths(), info, file, request.headers.get("if-none-match")))

    return routes


def _static(name: str) -> bytes:
    return resources.files("noa_server").joinpath("static", name).read_bytes()


page = APIRouter(tags=["viewer"], include_in_schema=False)
_TYPES = {"html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8", "css": "text/css; charset=utf-8"}


@page.get("/view")
async def view_page() -> Response:
    """The viewer page (no data in it: it asks the /v1/view endpoints, with the API key, from the browser)."""
    return _asset("view.html")


@page.get("/view/{name}")
async def view_asset(name: str) -> Response:
    if name not in STATIC:
        raise ProblemError(404, "not-found", "Not found", f"{name}: no such part of the viewer")
    return _asset(name)


def _asset(name: str) -> Response:
    return Response(_static(name), media_type=_TYPES[name.rsplit(".", 1)[1]],
                    headers={"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                             "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"})

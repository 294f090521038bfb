"""The viewer's door: ``GET /v1/view/...`` (pictures, tiles, histograms, headers, values of files under the data
root) and the page ``/view`` that browses the data root with them.

Every endpoint names its file by ``file``, a path relative to the data root, opened beneath the root as
path requests are (:meth:`Sandbox.open`: no ``..``, no symlink out of the root), behind the API key
(they live under ``/v1``) and in the worker pool. What is drawn and how (the plane, tiles, the overview cache,
the voxel and memory checks: 422 and 507) is :mod:`noa_core.pictures.viewer`'s; this module parses the query,
opens the file and renders the answer. Answers carry an ETag made of the file's identity
(:func:`noa_core.pictures.viewer.identity`: what changes when its data do) and the query, so a browser
revalidates a picture with ``If-None-Match`` and gets a 304 without the file being read again.

A particle file (RELION STAR, cryoSPARC .cs) is a stack of its particles, each section its row's image; the stacks
it names are opened as paths mode opens them (:class:`execution.SandboxProjects`: beneath the data root, relative
to it or to ``project_dir``), they are part of its identity, and ``/v1/view/row`` says what a section's row holds.
A tilt series' ``/v1/view/tilts`` reads the files beside it (.rawtlt, .tlt, mdoc, RELION 5 STAR) the same way,
beneath the root; they are part of its ETag. Given ``noa tiltseries``'s exclusions (``exclude``, ``max_angle``,
``exclude_dark``, typed by that operation's declarations), it says which sections the operation would leave out.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal, cast

from fastapi import Depends, Query, Request
from fastapi.responses import JSONResponse, Response

from noa_core import __version__
from noa_core.errors import MissingFileError
from noa_core.io import particle_files, remote
from noa_core.operations import Operation, Reports
from noa_core.operations.spec import EER_GROUP, EER_GROUP_LAST, EER_UPSAMPLING, PROJECT_DIR
from noa_core.operations.tiltseries import OPERATION as TILTSERIES
from noa_core.pictures import drawing, viewer
from noa_core.pictures.viewer import Display, Exclusions, Plane
from noa_server import execution
from noa_server.models import value_type
from noa_server.problems import ProblemError, classify, documented, log
from noa_server.routes import Routes
from noa_server.sandbox import AnySandbox as Sandbox  # the data root's, of this machine or object storage
from noa_server.sandbox import RemoteSandbox
from noa_server.service import Service, service

MAX_LISTED = 2000  # entries of a folder listing; more are cut (``truncated``)
MONTAGE_COUNT = 256  # sections a montage draws at most (a page of particles)
# The browser keeps pictures and revalidates them (If-None-Match) before each use: a file rewritten in
# place gets a new ETag. ``private``: answers behind an API key are for this client only.
CACHE = "private, no-cache"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
STATIC = ("view.html", "view.js", "view.css")
# The forms of a contrast rule; their numbers are checked once the file is found (drawing.parse_contrast).
CONTRAST_PATTERN = r"^(sigma:[^,]+|percentiles:[^,]+,[^,]+|minmax|range:[^,]+,[^,]+)$"
OVERVIEWS = viewer.Overviews()  # this process's overviews, shared by its requests

Svc = Annotated[Service, Depends(service)]
ERRORS = documented(400, 403, 404, 422, 500)
IMAGE: dict[int | str, dict[str, Any]] = {
    200: {"description": "The picture.", "content": {"image/png": {}, "image/jpeg": {}}},
    304: {"description": "Not modified (If-None-Match matched the ETag)."}, **ERRORS}
JSON = {304: {"description": "Not modified (If-None-Match matched the ETag)."}, **ERRORS}


Reading = tuple[tuple[str, Any], ...]


# The read options' query parameters, typed (bounds, words) by their declarations: the schema says what is taken.
# (Types made at run time from the declarations, which a static checker cannot read: hence the ignores.)
EerGroup = Annotated[value_type(EER_GROUP) | None,  # type: ignore[valid-type]
                     Query(description=EER_GROUP.help + " A fraction is a section.")]
EerGroupLast = Annotated[value_type(EER_GROUP_LAST) | None, Query(description=EER_GROUP_LAST.help)]  # type: ignore[valid-type]
EerUpsampling = Annotated[value_type(EER_UPSAMPLING) | None, Query(description=EER_UPSAMPLING.help)]  # type: ignore[valid-type]
ProjectDir = Annotated[value_type(PROJECT_DIR) | None, Query(description=PROJECT_DIR.help)]  # type: ignore[valid-type]


def reading_query(eer_group: EerGroup = None, eer_group_last: EerGroupLast = None,  # type: ignore[valid-type]
                  eer_upsampling: EerUpsampling = None, project_dir: ProjectDir = None  # type: ignore[valid-type]
                  ) -> Reading:
    """The read options given, checked by their declarations (ParameterError naming the one that is wrong); a
    file of another format refuses them, naming them."""
    given = ((EER_GROUP, eer_group), (EER_GROUP_LAST, eer_group_last), (EER_UPSAMPLING, eer_upsampling),
             (PROJECT_DIR, project_dir))
    return tuple((param.name, param.check(value)) for param, value in given if value is not None)


ReadingQ = Annotated[Reading, Depends(reading_query)]

# noa tiltseries's exclusions, previewed on a stack by /tilts: typed (bounds, lengths) by the operation's declarations
_EXCLUDE, _MAX_ANGLE, _EXCLUDE_DARK = (next(p for p in TILTSERIES.params if p.name == name)
                                       for name in ("exclude", "max_angle", "exclude_dark"))
Exclude = Annotated[value_type(_EXCLUDE) | None, Query(description=(  # type: ignore[valid-type]
    "Views noa tiltseries would leave out (its exclude): IMOD's view numbers, from 1 (section N - 1; the mdoc's "
    "ZValue N - 1 where it is beside the stack), e.g. 1-3,40-41."))]
MaxAngle = Annotated[value_type(_MAX_ANGLE) | None, Query(description=(  # type: ignore[valid-type]
    "Tilts beyond this angle either way (degrees) noa tiltseries would leave out (its max_angle)."))]
ExcludeDark = Annotated[value_type(_EXCLUDE_DARK) | None, Query(description=(  # type: ignore[valid-type]
    "Tilts whose mean is below this fraction of the median of those exclude and max_angle keep, which noa "
    "tiltseries would leave out (its exclude_dark): reads every section kept."))]


def exclusions_query(exclude: Exclude = None, max_angle: MaxAngle = None,  # type: ignore[valid-type]
                     exclude_dark: ExcludeDark = None) -> Exclusions:  # type: ignore[valid-type]
    return Exclusions(exclude, max_angle, exclude_dark)


ExclusionsQ = Annotated[Exclusions, Depends(exclusions_query)]


def plane_query(
        reading: ReadingQ,
        section: Annotated[int | None, Query(ge=0, description="Entry of a stack (the batch index).")] = None,
        axis: Annotated[Literal["z", "y", "x"], Query(
            description="Volumes: the axis across the slice (z: XY sections, y: XZ, x: YZ).")] = "z",
        index: Annotated[int | None, Query(ge=0, description="Volumes: the slice along axis (default N // 2).")]
        = None,
        projection: Annotated[bool, Query(description="Volumes: the mean along axis instead of a slice.")] = False,
) -> Plane:
    return Plane(section, axis, index, projection, reading)


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


FileQ = Annotated[str, Query(min_length=1, max_length=1024, description="The file, relative to the data root.")]
PlaneQ = Annotated[Plane, Depends(plane_query)]
DisplayQ = Annotated[Display, Depends(display_query)]


# -- files: opened beneath the root, seen by noa_core through a link named as the client's file --------

@dataclass
class Opened:
    """A file of the data root opened for the viewer: ``path`` is what noa_core reads (a link to the
    opened descriptor ``fd``, named as the file so its extension still tells the format); ``projects`` opens
    the stacks a particle file names beneath the root, ``reading`` the read options it is read with."""

    path: Path
    fd: int
    info: os.stat_result
    names: execution.ClientNames
    projects: execution.SandboxProjects
    reading: Reading = ()

    @functools.cached_property
    def identity(self) -> str:
        """What changes whenever the file's data do (:func:`viewer.identity`), found once per request."""
        if self.fd < 0:  # a key of object storage
            return _object_identity(self.path)
        return viewer.identity(self.fd, self.info, self.path, projects=self.projects,
                               project_dir=dict(self.reading).get(PROJECT_DIR.name))

    def plane(self, plane: Plane) -> Plane:
        """``plane`` of this file, read with its stacks opened beneath the root."""
        return dataclasses.replace(plane, projects=self.projects)


def _object_identity(path: Path) -> str:
    """What changes whenever an object's data do (:func:`noa_core.io.remote.version`, from the first look: one HEAD);
    a prefix (an OME-Zarr store), a particle file (read from a copy), whose data are other objects too, or an object
    of a store that gives no version gets an identity of its own for each request (never cached: listing a store or
    fetching every stack to hash them costs more than reading them)."""
    found = remote.version(path) if isinstance(path, remote.RemotePath) else None
    return os.urandom(16).hex() if found is None else found


@contextmanager
def _opened_object(sandbox: RemoteSandbox, relative: str, reading: Reading) -> Iterator[Opened]:
    """The key ``relative`` names under the prefix, looked up (one HEAD, kept for the reads), as an :class:`Opened`
    whose path is its URL (no descriptor: ``fd`` -1)."""
    url = sandbox.resolve(relative)
    names = execution.client_names(sandbox)
    with ExitStack() as copies, names.in_errors():
        remote.is_folder(url)  # a missing key: 404 naming the client's path
        path = (execution.fetched(url, execution.scratch(sandbox, copies, names), names, relative)
                if particle_files.is_particle_path(url) else url)
        yield Opened(path, -1, os.stat_result((0,) * 10), names, execution.SandboxProjects(sandbox, names), reading)


@contextmanager
def opened(sandbox: Sandbox, relative: str, reading: Reading = ()) -> Iterator[Opened]:
    """``relative`` opened beneath the root (a regular file, or the folder of an OME-Zarr store), for the
    ``with`` block, to be read with ``reading``, through a link named as the client's file
    (:func:`execution.file_link`). A key of object storage is looked up instead (:func:`_opened_object`)."""
    if isinstance(sandbox, RemoteSandbox):
        with _opened_object(sandbox, relative, reading) as found:
            yield found
        return
    fd, _ = sandbox.open(relative)
    try:
        info = os.fstat(fd)
        if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
            raise ProblemError(404, "file-not-found", "File not found", f"{relative}: no such file")
        link = execution.file_link(sandbox.scratch, fd, PurePosixPath(relative).name)
        names = execution.client_names(sandbox, {str(link): relative, f"{link.parent}/": ""})
        with names.in_errors():
            yield Opened(link, fd, info, names, execution.SandboxProjects(sandbox, names), reading)
    finally:
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
    """A computed answer (``body`` None: not modified) with its ETag, and ``headers`` sent with it either way."""

    tag: str
    body: bytes | dict | None
    media_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


def _cached(opened_file: Opened, if_none_match: str | None, parts: tuple, compute: Callable[[], Any],
            media_type: str = "application/json") -> Answer:
    tag = etag(opened_file.identity, *parts)
    if matches(if_none_match, tag):
        return Answer(tag, None, media_type)
    return Answer(tag, compute(), media_type)


def _respond(answer: Answer) -> Response:
    headers = {**dict(answer.headers), "ETag": answer.tag, "Cache-Control": CACHE}
    if answer.body is None:
        return Response(status_code=304, headers=headers)
    if isinstance(answer.body, dict):
        return JSONResponse(answer.body, headers=headers)
    return Response(answer.body, media_type=answer.media_type, headers=headers)


# -- answers: the file opened, the engine called, the result named as the client named it -------------------

def image(sandbox: Sandbox, relative: str, plane: Plane, display: Display, size: int, spectrum: bool,
          if_none_match: str | None, max_voxels: int) -> Answer:
    """The plane (or its log power spectrum) at most ``size`` pixels a side, as PNG or JPEG."""
    with opened(sandbox, relative, reading=plane.reading) as file:
        drawing.parse_contrast(display.contrast)  # after the file: a missing file is named first
        return _cached(file, if_none_match, ("image", relative, plane, display, size, spectrum),
                       lambda: viewer.image(file.path, file.plane(plane), display, size, spectrum=spectrum,
                                            max_voxels=max_voxels),
                       display.media_type)


def tile(sandbox: Sandbox, relative: str, plane: Plane, display: Display, level: int, x: int, y: int,
         if_none_match: str | None, max_voxels: int) -> Answer:
    """Tile (x, y) of ``level`` (:func:`viewer.tile`: only its region is read)."""
    with opened(sandbox, relative, reading=plane.reading) as file:
        drawing.parse_contrast(display.contrast)
        return _cached(file, if_none_match, ("tile", relative, plane, display, level, x, y),
                       lambda: viewer.tile(file.path, file.plane(plane), display, level, x, y,
                                           file_identity=file.identity, overviews=OVERVIEWS, max_voxels=max_voxels),
                       display.media_type)


def montage(sandbox: Sandbox, relative: str, reading: Reading, display: Display, first: int, count: int,
            columns: int | None, size: int, if_none_match: str | None, max_voxels: int) -> Answer:
    """Sections ``first`` to ``first + count - 1`` of a stack in a grid (:func:`viewer.montage`), with where its
    panels are (:func:`montage_header`), found from the header alone, so a 304 says it too."""
    with opened(sandbox, relative, reading=reading) as file:
        drawing.parse_contrast(display.contrast)
        layout = viewer.montage_layout(file.path, first, count, columns, size, reading=reading,
                                       projects=file.projects)
        answer = _cached(file, if_none_match, ("montage", relative, reading, display, first, count, columns, size),
                         lambda: viewer.montage(file.path, display, first, count, columns, size, reading=reading,
                                                projects=file.projects, max_voxels=max_voxels),
                         display.media_type)
        return dataclasses.replace(answer, headers=(("Montage-Layout", montage_header(layout)),))


def montage_header(layout: drawing.Layout) -> str:
    """Where a montage's panels are, for the page to tell which one is under the cursor: ``first`` (the section of
    the first panel), ``count`` (panels drawn), ``columns``, each panel's ``height`` and ``width`` in the picture's
    pixels and the ``gap`` between them (an RFC 8941 dictionary: ``first=0, count=11, ...``). Panel n is section
    first + n, at row n // columns, column n % columns."""
    height, width = layout.panel_shape(layout.panels[0])
    across = sum(panel.top == 0 for panel in layout.panels)
    fields = {"first": layout.panels[0].section, "count": len(layout.panels), "columns": across, "height": height,
              "width": width, "gap": drawing.GAP}
    return ", ".join(f"{name}={number}" for name, number in fields.items())


def histogram(sandbox: Sandbox, relative: str, plane: Plane, bins: int, contrast: str | None,
              if_none_match: str | None, max_voxels: int) -> Answer:
    """The histogram of the plane's overview, its statistics, the limits of each contrast rule, and the
    plane's geometry (:func:`viewer.histogram`)."""

    def compute() -> dict:
        found = viewer.histogram(file.path, file.plane(plane), file_identity=file.identity, overviews=OVERVIEWS,
                                 bins=bins, contrast=contrast, max_voxels=max_voxels)
        return execution.for_client({"file": relative, **found}, file.names)

    with opened(sandbox, relative, reading=plane.reading) as file:
        if contrast is not None:
            drawing.parse_contrast(contrast)
        return _cached(file, if_none_match, ("histogram", relative, plane, bins, contrast), compute)


def value(sandbox: Sandbox, relative: str, plane: Plane, x: int, y: int, if_none_match: str | None) -> Answer:
    """The value of the plane at column ``x``, row ``y`` (the mean along the axis for a projection)."""

    def compute() -> dict:
        found = viewer.value(file.path, file.plane(plane), x, y)
        return execution.for_client({"file": relative, "x": x, "y": y, "value": found}, file.names)

    with opened(sandbox, relative, reading=plane.reading) as file:
        return _cached(file, if_none_match, ("value", relative, plane, x, y), compute)


def particle_row(sandbox: Sandbox, relative: str, section: int, reading: Reading, if_none_match: str | None) -> Answer:
    """What a particle file's row says of the particle that is section ``section`` (:func:`viewer.particle_row`)."""

    def compute() -> dict:
        found = viewer.particle_row(file.path, section)
        return {"file": relative, "section": section, **found}  # the row's values as the file has them

    with opened(sandbox, relative, reading=reading) as file:
        return _cached(file, if_none_match, ("row", relative, section, reading), compute)


def tilts(sandbox: Sandbox, relative: str, reading: Reading, exclusions: Exclusions, if_none_match: str | None,
          max_voxels: int) -> Answer:
    """Each section's tilt angle and, where the files beside the stack give them, its pre-exposure and dose
    (:func:`viewer.tilts`), and why noa tiltseries would leave it out with ``exclusions`` (:func:`viewer.left_out`) or
    None; the ETag is made of the stack's identity, the exclusions and the files read beside it (their names and
    bytes: they are read to be compared, a few KB), so a side file rewritten is a new answer."""
    with opened(sandbox, relative, reading=reading) as file:
        sections, found = viewer.tilts(file.path, reading=reading, projects=file.projects)
        read = hashlib.sha256()
        for side in found.files.values():
            read.update(f"{side.name}:{len(side.data)}:".encode(errors="surrogateescape") + side.data)
        tag = etag(file.identity, "tilts", relative, reading, exclusions, read.hexdigest(), found.notice)
        if matches(if_none_match, tag):
            return Answer(tag, None)
        left_out = viewer.left_out(file.path, sections, found, exclusions, reading=reading, projects=file.projects,
                                   max_voxels=max_voxels)
        rows = None
        if found.angles is not None:
            pre_exposure, dose = (_doses(values, sections) for values in (found.pre_exposure, found.dose))
            rows = [{"angle": float(angle), "pre_exposure": before, "dose": own, "excluded": left_out.get(z)}
                    for z, (angle, before, own) in enumerate(zip(found.angles, pre_exposure, dose))]
        answer = {"file": relative, "sections": sections, "tilts": rows, "from": found.sources,
                  "pre_exposure_rule": found.pre_exposure_rule, "files": [f.name for f in found.files.values()],
                  "notice": found.notice}
        return Answer(tag, execution.for_client(answer, file.names))


def _doses(values: Any, sections: int) -> list[float | None]:
    """Doses as JSON has them: None where the files give none (not given, or nan)."""
    if values is None:
        return [None] * sections
    return [float(v) if math.isfinite(v) else None for v in values]


def header(sandbox: Sandbox, info: Reports, relative: str, reading: Reading, if_none_match: str | None) -> Answer:
    """What ``noa info`` says of the file (its header alone), read with ``reading`` (an EER movie's grouping)."""

    def compute() -> dict:
        described = info.run_report(file.path, info.options(dict(reading)), projects=file.projects)
        return execution.for_client({**described, "path": relative}, file.names)

    with opened(sandbox, relative, reading=reading) as file:
        return _cached(file, if_none_match, ("info", reading), compute)


def listing(sandbox: Sandbox, relative: str) -> dict:
    """The folders and files of a folder of the data root ("" for the root itself): each file with its
    format, BDHW shape, element type and pixel size from its header (no data read), or why noa cannot
    read it. Hidden entries (names starting with a dot) are left out."""
    if isinstance(sandbox, RemoteSandbox):
        return _object_listing(sandbox, relative)
    if relative in ("", "."):
        fd, folder = os.open(sandbox.root, os.O_RDONLY | os.O_DIRECTORY), ""
    else:
        name = _folder_named(relative)
        try:
            fd, _ = sandbox.open(name, os.O_RDONLY | os.O_DIRECTORY)
        except ProblemError as exc:
            if exc.status == 404 and os.path.isfile(sandbox.resolve(name)):
                exc.detail = f"{relative}: a file, not a folder"
            raise
        folder = name + "/"
    try:
        with os.scandir(fd) as scan:
            names = sorted(entry.name for entry in scan if not entry.name.startswith("."))
    finally:
        os.close(fd)
    folders: list[dict] = []
    files: list[dict] = []
    for name in names[:MAX_LISTED]:
        entry = _entry(sandbox, folder + name)
        if entry is not None:
            (folders if entry.pop("folder") else files).append(entry)
    return {"path": folder.rstrip("/"), "folders": folders, "files": files, "truncated": len(names) > MAX_LISTED}


def _folder_named(relative: str) -> str:
    """The folder ``relative`` names, without its trailing slashes; "/" stays itself (absolute: the sandbox refuses
    it as such, where stripped it would be an empty path)."""
    return relative.rstrip("/") or relative


def _object_listing(sandbox: RemoteSandbox, relative: str) -> dict:
    """:func:`listing` of a prefix of object storage: one listing request, then each file's header read (its
    size known from the listing: no HEAD more)."""
    folder = _folder_named(relative)
    names = execution.client_names(sandbox)
    with names.in_errors():
        try:
            found = remote.listing(sandbox.resolve(folder) if folder not in ("", ".") else sandbox.root)
        except MissingFileError:  # a prefix that holds nothing yet: the root is there, empty; a folder is not
            if folder not in ("", "."):
                raise
            found = []
    if not found and folder not in ("", "."):
        raise ProblemError(404, "file-not-found", "File or folder not found", f"{relative}: no such folder")
    found = sorted((path for path in found if not path.name.startswith(".")), key=lambda path: path.name)
    prefix = folder + "/" if folder not in ("", ".") else ""
    folders: list[dict] = []
    files: list[dict] = []
    for path in found[:MAX_LISTED]:
        name, client = path.name, prefix + path.name
        looked = path.looked_up or {}
        if looked.get("type") == "directory" and not name.lower().endswith(".zarr"):
            folders.append({"name": name, "path": client})
            continue
        entry: dict[str, Any] = {"name": name, "path": client, "bytes": looked.get("size") or 0}
        if particle_files.is_particle_path(path):  # read from a copy, its stacks too: not for a listing
            files.append({**entry, "error": "a particle file on object storage is read when opened, not listed"})
            continue
        projects = execution.SandboxProjects(sandbox, names)
        files.append(_probed(entry, functools.partial(viewer.header_summary, path, projects), names))
    return {"path": folder, "folders": folders, "files": files, "truncated": len(found) > MAX_LISTED}


def _probed(entry: dict[str, Any], summary: Callable[[], dict], names: execution.ClientNames) -> dict:
    """``entry`` with what ``summary()`` (its header) says of it, or why noa cannot read it, named as the client
    names files (``names``)."""
    try:
        with names.in_errors():
            entry.update(summary())
    except Exception as exc:  # noqa: BLE001 - one unreadable file must not hide the folder's others
        problem = classify(exc)
        if problem is None:
            log.warning("listing %s: %s cannot be probed", entry["path"], type(exc).__name__, exc_info=exc)
        entry["error"] = problem.detail if problem is not None else "noa cannot read this file (see the server log)"
    return execution.for_client(entry, names)


def _entry(sandbox: Sandbox, relative: str) -> dict | None:
    """One entry of a listing; None for what a client may not open (a link out of the root, the job
    state, a device or socket)."""
    assert not isinstance(sandbox, RemoteSandbox)  # a prefix is listed by _object_listing
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

    def summary() -> dict:
        with opened(sandbox, relative) as file:
            return viewer.header_summary(file.path, file.projects)

    return _probed({"folder": False, "name": name, "path": relative, "bytes": info.st_size}, summary,
                   execution.client_names(sandbox))


# -- routes -------------------------------------------------------------------------------------------

def router(operations: list[Operation]) -> Routes:
    """``GET /view/...`` under /v1 (the API key applies); ``header`` is the ``info`` operation of the registry."""
    info = cast(Reports, next(op for op in operations if op.name == "info"))
    routes = Routes(prefix="/view", tags=["viewer"])

    @routes.get("/list", summary="Folders and image files of a folder of the data root", responses=ERRORS)
    async def list_folder(svc: Svc, path: Annotated[str, Query(
            max_length=1024, description="A folder relative to the data root; empty for the root.")] = "") -> Response:
        result = await svc.run(listing, svc.paths(), path)
        return JSONResponse(result, headers={"Cache-Control": "no-store"})

    @routes.get("/image", summary="A plane (slice, section, projection) or its power spectrum, as PNG or JPEG",
                response_class=Response, responses=IMAGE)
    async def view_image(request: Request, svc: Svc, file: FileQ, plane: PlaneQ, display: DisplayQ,
                         size: Annotated[int, Query(ge=16, le=4096, description=(
                             "Longest side in pixels: block means of k x k pixels, k = ceil(longest side / size)."))]
                         = 1024,
                         spectrum: Annotated[bool, Query(description=(
                             "The log power spectrum (centred) instead; planes over 4096 pixels a side: that of "
                             "their central 4096 x 4096 region."))] = False) -> Response:
        return _respond(await svc.run(image, svc.paths(), file, plane, display, size, spectrum,
                                      request.headers.get("if-none-match"), svc.settings.max_voxels))

    @routes.get("/tile", summary=f"A {viewer.TILE} x {viewer.TILE} tile of a plane at a zoom level (only its region "
                                 "is read)", response_class=Response, responses=IMAGE)
    async def view_tile(request: Request, svc: Svc, file: FileQ, plane: PlaneQ, display: DisplayQ,
                        level: Annotated[int, Query(ge=0, le=40, description=(
                            "Level L: pixels are block means of 2^L x 2^L pixels of the plane."))] = 0,
                        x: Annotated[int, Query(ge=0, description="Tile column (from the left).")] = 0,
                        y: Annotated[int, Query(ge=0, description="Tile row (from the top: row 0 as stored).")] = 0,
                        ) -> Response:
        return _respond(await svc.run(tile, svc.paths(), file, plane, display, level, x, y,
                                      request.headers.get("if-none-match"), svc.settings.max_voxels))

    @routes.get("/montage", summary="Sections of a stack in a grid (a page of a particle file's particles), as PNG "
                                    "or JPEG", response_class=Response, responses=IMAGE)
    async def view_montage(request: Request, svc: Svc, file: FileQ, reading: ReadingQ, display: DisplayQ,
                           first: Annotated[int, Query(ge=0, description="The section of the first panel.")] = 0,
                           count: Annotated[int, Query(ge=1, le=MONTAGE_COUNT, description=(
                               "Sections drawn (fewer at the stack's end): panel n is section first + n."))] = 64,
                           columns: Annotated[int | None, Query(ge=1, le=MONTAGE_COUNT, description=(
                               "Panels a row (default about square)."))] = None,
                           size: Annotated[int, Query(ge=16, le=1024, description=(
                               "Longest side of a panel in pixels: block means of k x k pixels, k = ceil(longest "
                               "side / size), as /v1/view/image draws a section. The panels' pixels are at most "
                               f"{viewer.MONTAGE_PIXELS}."))] = 128) -> Response:
        return _respond(await svc.run(montage, svc.paths(), file, reading, display, first, count, columns, size,
                                      request.headers.get("if-none-match"), svc.settings.max_voxels))

    @routes.get("/histogram", summary="Histogram, statistics, contrast limits and geometry of a plane",
                responses=JSON)
    async def view_histogram(request: Request, svc: Svc, file: FileQ, plane: PlaneQ,
                             bins: Annotated[int, Query(ge=2, le=4096)] = 256,
                             contrast: Annotated[str | None, Query(
                                 max_length=64, pattern=CONTRAST_PATTERN, description=(
                                 "A contrast rule whose limits to report besides sigma:3, percentiles:1,99 and "
                                 "minmax."))] = None) -> Response:
        return _respond(await svc.run(histogram, svc.paths(), file, plane, bins, contrast,
                                      request.headers.get("if-none-match"), svc.settings.max_voxels))

    @routes.get("/value", summary="The value of a plane at a pixel (the viewer's cursor readout)", responses=JSON)
    async def view_value(request: Request, svc: Svc, file: FileQ, plane: PlaneQ,
                         x: Annotated[int, Query(ge=0, description="Column.")],
                         y: Annotated[int, Query(ge=0, description="Row (row 0 as stored).")]) -> Response:
        return _respond(await svc.run(value, svc.paths(), file, plane, x, y, request.headers.get("if-none-match")))

    @routes.get("/row", summary="A particle file's row: what it says of the particle a section is (its columns)",
                responses=JSON)
    async def view_row(request: Request, svc: Svc, file: FileQ, reading: ReadingQ,
                       section: Annotated[int, Query(ge=0, description="The section: the particle, row section + 1.")]
                       = 0) -> Response:
        return _respond(await svc.run(particle_row, svc.paths(), file, section, reading,
                                      request.headers.get("if-none-match")))

    @routes.get("/tilts", summary="A tilt series' sections: each one's tilt angle and dose, from the files beside "
                                  "the stack (.rawtlt, .tlt, mdoc, RELION 5 STAR), and which noa tiltseries would "
                                  "leave out", responses=JSON)
    async def view_tilts(request: Request, svc: Svc, file: FileQ, reading: ReadingQ,
                         exclusions: ExclusionsQ) -> Response:
        return _respond(await svc.run(tilts, svc.paths(), file, reading, exclusions,
                                      request.headers.get("if-none-match"), svc.settings.max_voxels))

    @routes.get("/info", summary="The header of a file, as noa info describes it", responses=JSON)
    async def view_info(request: Request, svc: Svc, file: Annotated[str, Query(min_length=1, max_length=1024)],
                        reading: ReadingQ) -> Response:
        return _respond(await svc.run(header, svc.paths(), info, file, reading, request.headers.get("if-none-match")))

    return routes


def _static(name: str) -> bytes:
    return resources.files("noa_server").joinpath("static", name).read_bytes()


page = Routes(tags=["viewer"], include_in_schema=False)
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

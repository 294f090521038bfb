"""The files beside a tilt-series stack (IMOD's ``.rawtlt`` and ``.tlt``, its mdoc, RELION 5's tilt-series STAR)
kept in step with an operation's output: the rows of the sections the output keeps, in its order, named after the
output (out.st -> out.rawtlt, out.tlt, out.st.mdoc or out.mdoc as the input's, out.star), the mdoc's sections
renumbered, the pixel size changed where a file states one (the mdoc's PixelSpacing, the STAR's
rlnTomoTiltSeriesPixelSize) and the mdoc's ImageSize made the output's.

They are found by the stack's stem and read through the project (:func:`files_beside`), as noa tiltcheck reads
them: over HTTP every one is opened beneath the data root. A stack with none of them, or only files that are not a
tilt series' (a frame set's mdoc beside a movie), has none to keep. Where one cannot be read, disagrees with the
stack (its count), or the output does not keep the sections one to one, none is written and a notice says why:
the operation itself never fails for them. :func:`section_tilts` reads them for the viewer: each section's tilt
angle and dose."""

from __future__ import annotations

import dataclasses
import os
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from noa_core import tomography  # a face: the mdoc reader (mdocfile, pandas) loads when a file is read
from noa_core.errors import FileFormatError, NoaError
from noa_core.images.stacks import section_axis
from noa_core.io import formats, remote, star
from noa_core.io.particles import Project, folder_projects
from noa_core.tomography import check
from noa_core.tomography.beside import Inputs, SideFiles, side_names

if TYPE_CHECKING:
    from noa_core.tomography.tiltseries import TiltSeries

PIXEL_SIZE_LABEL = "rlnTomoTiltSeriesPixelSize"  # RELION 5's pixel size of a tilt series (Å)
_IMAGE_NAME = re.compile(rb"^0*(\d+)@(.+)$")  # RELION's 'N@stack', as noa tiltseries writes it
_WORDS = {"rawtlt": "angles", "tlt": "angles", "mdoc": "[ZValue] sections", "star": "rows"}
_NO_TILTS = "the sections' tilts are not given"  # what a viewer is told where the files cannot say them



@dataclass(frozen=True)
class SideFile:
    """A file found beside a stack: its name (as the project names it), its bytes and its identity (device, inode),
    which an output never replaces."""

    name: str
    data: bytes
    identity: tuple[int, int]


def files_beside(project: Project, stack_name: str) -> dict[str, SideFile]:
    """The files beside the stack ``stack_name`` (:func:`~noa_core.tomography.beside.side_names`), by kind, each the
    first of its names there, opened through ``project`` (over HTTP: beneath the data root) and read within its
    size limit; a NoaError naming the one refused (a link out of the data root) or larger than any such file."""
    found: dict[str, SideFile] = {}
    for kind, candidates in side_names(stack_name).items():
        for candidate in candidates:
            read = _side_file(project, candidate, kind)
            if read is not None:
                found[kind] = read
                break
    return found


def _side_file(project: Project, name: str, kind: str) -> SideFile | None:
    """The file ``name`` beside the stack, opened through the project; None where there is none. A file larger than
    the limit of its ``kind`` is none of the files a tilt series has."""
    try:
        fd = project.open(name)
    except FileNotFoundError:
        return None
    except NoaError as exc:  # refused: outside the data root, a link
        raise type(exc)(f"{name}: {exc}") from None
    except OSError as exc:
        raise FileFormatError(f"{name}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        limit = check.size_limit(kind)
        if info.st_size > limit:
            raise FileFormatError(f"{name}: {info.st_size} bytes: larger than any such file beside a tilt series "
                                  f"({limit >> 20} MiB at most)")
        with os.fdopen(os.dup(fd), "rb") as f:
            return SideFile(name, f.read(limit), (info.st_dev, info.st_ino))
    finally:
        os.close(fd)


@dataclass(frozen=True)
class _Read:
    """The side files of a tilt series, read: each kind's file and what it holds."""

    stack_name: str
    files: dict[str, SideFile]
    angles: dict[str, np.ndarray]
    mdoc: TiltSeries | None
    star: check.StarTable | None

    def counts(self) -> dict[str, int]:
        counts = {kind: len(values) for kind, values in self.angles.items()}
        if self.mdoc is not None:
            counts["mdoc"] = len(self.mdoc.tilts)
        if self.star is not None:
            counts["star"] = self.star.rows
        return counts


def in_step(inputs: Inputs, shape: Sequence[int], kept: Sequence[int] | None, *,
            image_size: tuple[int, int] | None = None, pixel_scale: float = 1.0,
            why_not: str = "") -> tuple[SideFiles | None, list[str]]:
    """:func:`noa_core.tomography.beside.in_step` where a file may be beside the stack: the files to write beside
    the output and the plan's notices."""
    project = (inputs.projects or folder_projects)(None)  # over HTTP: the data root, beneath which each is opened
    try:
        stack_name = project.name_of(inputs[0])
        read = _read(stack_name, files_beside(project, stack_name))
    except NoaError as exc:
        return None, [f"{exc}: no tilt-series files written beside the output"]
    if read is None:
        return None, []
    listed = ", ".join(f.name for f in read.files.values())
    if kept is None:
        return None, [f"{stack_name}: {why_not}: its {listed} are not written beside the output"]
    sections = shape[section_axis(shape)]
    wrong_count = _wrong_count(read, sections)
    if wrong_count is not None:
        return None, [f"{wrong_count}: {listed} not written beside the output"]
    size = image_size if image_size is not None else (int(shape[3]), int(shape[2]))
    return _writer(read, project, list(kept), sections, size, pixel_scale), []


def _wrong_count(read: _Read, sections: int) -> str | None:
    """The first file whose count is not the stack's ``sections``, in words; None: each has one row a section."""
    for kind, count in read.counts().items():
        if count != sections:
            return (f"{read.files[kind].name}: {count} {_WORDS[kind]}, and the stack {read.stack_name} has "
                    f"{sections} sections")
    return None


@dataclass(frozen=True)
class SectionTilts:
    """What the files beside a stack say of its sections, in stack order: each one's tilt angle (degrees) and, where
    they give them, the dose it had received before its exposure (e/Å², as ``tiltseries.pre_exposure`` finds it;
    ``pre_exposure_rule`` says how) and the dose of its exposure (e/Å²); ``sources``: the file each of ``angle``,
    ``pre_exposure`` and ``dose`` comes from. ``files``: every file found beside the stack, read or not (what the
    answer is made of); ``notice``: why no angles are given where files are there."""

    files: dict[str, SideFile]
    angles: np.ndarray | None = None
    pre_exposure: np.ndarray | None = None
    dose: np.ndarray | None = None
    sources: dict[str, str] = field(default_factory=dict)
    pre_exposure_rule: str | None = None
    notice: str | None = None


def section_tilts(project: Project, stack_name: str, sections: int) -> SectionTilts:
    """The tilt of each of the ``sections`` of the stack ``stack_name`` from the files beside it, opened through
    ``project`` (over HTTP: beneath the data root): the angle the mdoc's TiltAngle gives, else the .rawtlt's, the
    .tlt's, the STAR's rlnTomoNominalStageTiltAngle; the pre-exposure the mdoc gives, else the STAR's
    rlnMicrographPreExposure; the dose of each tilt the mdoc's ExposureDose gives where it gives a pre-exposure.
    None of them where there are none; none and a notice where one cannot be read or its count is not the stack's.
    PathRefusedError naming a file the project refuses (a link out of the data root)."""
    try:
        files = files_beside(project, stack_name)
    except FileFormatError as exc:  # larger than any such file, or unreadable
        return SectionTilts({}, notice=f"{exc}: {_NO_TILTS}")
    read, unreadable = _parsed(stack_name, files)
    if unreadable:  # even where no other is a tilt series': a stack's own mdoc may be the one
        return SectionTilts(files, notice=f"{unreadable[0]}: {_NO_TILTS}")
    if read is None:
        return SectionTilts(files)
    wrong_count = _wrong_count(read, sections)
    if wrong_count is not None:
        return SectionTilts(files, notice=f"{wrong_count}: {_NO_TILTS}")
    found = _angles_of(read)
    if found is None:
        listed = ", ".join(f.name for f in read.files.values())
        return SectionTilts(files, notice=f"{listed}: no tilt angle in them: {_NO_TILTS}")
    angles, sources = found[0], {"angle": found[1]}
    pre_exposure = dose = rule = None
    if read.mdoc is not None:
        doses, rule = tomography.tiltseries.pre_exposure(read.mdoc, None)
        if rule is not None:
            pre_exposure, sources["pre_exposure"] = doses, read.files["mdoc"].name
            exposures = [t.exposure for t in read.mdoc.tilts]
            if all(e is not None for e in exposures):
                dose, sources["dose"] = np.array(exposures, np.float64), read.files["mdoc"].name
    if pre_exposure is None and read.star is not None and "rlnMicrographPreExposure" in read.star.columns:
        pre_exposure, rule = read.star.columns["rlnMicrographPreExposure"], "rlnMicrographPreExposure"
        sources["pre_exposure"] = read.files["star"].name
    return SectionTilts(files, angles, pre_exposure, dose, sources, rule)


def _angles_of(read: _Read) -> tuple[np.ndarray, str] | None:
    """The sections' tilt angles and the file they come from: the mdoc's (as SerialEM took them), else the
    .rawtlt's, the .tlt's (after alignment), the STAR's; None where none of them gives one."""
    if read.mdoc is not None:
        return np.array([t.angle for t in read.mdoc.tilts], np.float64), read.files["mdoc"].name
    for kind in ("rawtlt", "tlt"):
        if kind in read.angles:
            return read.angles[kind], read.files[kind].name
    if read.star is not None and "rlnTomoNominalStageTiltAngle" in read.star.columns:
        return read.star.columns["rlnTomoNominalStageTiltAngle"], read.files["star"].name
    return None


def _read(stack_name: str, files: dict[str, SideFile]) -> _Read | None:
    """The tilt-series files beside the stack (:func:`files_beside`), read and checked; None where there are none
    (the files found are not a tilt series': a frame set's mdoc beside a movie, a STAR of something else).
    FileFormatError naming the file that cannot be read, where others are a tilt series'."""
    read, unreadable = _parsed(stack_name, files)
    if read is not None and unreadable:
        raise unreadable[0]
    return read


def _parsed(stack_name: str, files: dict[str, SideFile]) -> tuple[_Read | None, list[FileFormatError]]:
    """The files of a tilt series among ``files``, read (None: none is), and why each of the others cannot be read
    (a STAR of something else is not a tilt series' and is left out unsaid)."""
    angles: dict[str, np.ndarray] = {}
    mdoc = table = None
    unreadable: list[FileFormatError] = []
    for kind, file in files.items():
        try:
            if kind in ("rawtlt", "tlt"):
                angles[kind] = check.read_angles(file.name, file.data)
            elif kind == "mdoc":
                mdoc = tomography.tiltseries.parse(Path(file.name), file.data)
            else:
                found = check.read_star(file.name, file.data, stack_name)
                if any(label in found.columns for label in check.STAR_NUMBERS):  # else not a tilt series' STAR
                    table = found
        except FileFormatError as exc:
            unreadable.append(exc)
    if not angles and mdoc is None and table is None:
        return None, unreadable
    kinds = [*angles, *(["mdoc"] if mdoc is not None else []), *(["star"] if table is not None else [])]
    return _Read(stack_name, {kind: files[kind] for kind in kinds}, angles, mdoc, table), unreadable


def _writer(read: _Read, project: Project, kept: list[int], sections: int, image_size: tuple[int, int],
            pixel_scale: float) -> SideFiles:
    """The files of the output: the rows ``kept``, in that order."""
    def written(output: Path) -> tuple[dict[Path, bytes], list[str]]:
        if formats.output_format(output).name != "mrc":  # a STAR names N@stack: RELION and IMOD read MRC stacks
            return {}, [f"{output}: not an MRC stack: {', '.join(f.name for f in read.files.values())} not written "
                        "beside it"]
        named = side_names(output.name)
        files: dict[Path, bytes] = {}
        for kind, file in read.files.items():
            path = output.parent / named[kind][side_names(read.stack_name)[kind].index(file.name)]
            if path == output or _identity(path) in {f.identity for f in read.files.values()}:
                return {}, [f"{path}: would replace {'the output' if path == output else 'a file beside the input'}: "
                            f"{', '.join(f.name for f in read.files.values())} not written beside the output"]
            if kind in read.angles:
                files[path] = _angles(file.data, kept, sections)
            elif kind == "mdoc":
                assert read.mdoc is not None
                files[path] = _mdoc(read.mdoc, kept, output.name, image_size, pixel_scale)
            else:
                files[path] = _star(file, read.stack_name, kept, _name_of(project, output), pixel_scale)
        return files, [f"beside {output}: {', '.join(path.name for path in files)}, the rows of its {len(kept)} "
                       f"sections (of the {sections} of {read.stack_name}) in its order"]

    return written


def _identity(path: Path) -> tuple[int, int] | None:
    if remote.is_remote(path):  # an object, never a file beside the input
        return None
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _name_of(project: Project, output: Path) -> str:
    """How the STAR names the output stack: as the project names it (as noa tiltseries writes it), else by its name
    alone."""
    try:
        return project.name_of(output)
    except NoaError:
        return output.name


def _angles(data: bytes, kept: list[int], sections: int) -> bytes:
    """An angle file's lines of the sections ``kept``: the file as it is where every section is kept in order."""
    if kept == list(range(sections)):
        return data
    lines = [line for line in data.decode("utf-8", "replace").splitlines() if line.split()]
    return "".join(f"{lines[z].strip()}\n" for z in kept).encode()


def _mdoc(series: TiltSeries, kept: list[int], image_file: str, image_size: tuple[int, int],
          pixel_scale: float) -> bytes:
    """The mdoc of the output: its sections ``kept``, renumbered; ImageFile and ImageSize the output's, PixelSpacing
    ``pixel_scale`` times the input's."""
    def scaled(spacing: float | None) -> float | None:
        return None if spacing is None else spacing * pixel_scale

    header = series.header.model_copy(update={"PixelSpacing": scaled(series.header.PixelSpacing),
                                              **({"ImageSize": image_size} if series.header.ImageSize else {})})
    tilts = [dataclasses.replace(t, record=t.record.model_copy(update={"PixelSpacing": scaled(t.record.PixelSpacing)}))
             for t in series.tilts]
    axis = next((a for a in map(tomography.tiltseries.axis_in, series.titles) if a is not None), 0.0)  # kept as it is
    return tomography.tiltseries.mdoc_text(dataclasses.replace(series, header=header, tilts=tilts), kept, image_file,
                                axis).encode()


def _star(file: SideFile, stack_name: str, kept: list[int], output_name: str, pixel_scale: float) -> bytes:
    """The STAR of the output: the tilt series' loop with the rows ``kept``, each naming its section of the output
    (``N@output``) where it named the input's, the loop named after the output where it was after the input;
    rlnTomoTiltSeriesPixelSize ``pixel_scale`` times the input's; every other block, column and byte as it was."""
    table = star.Star(Path(file.name), file.data)
    tilt_block = check.read_star(file.name, file.data, stack_name).name
    input_stack = posixpath.basename(stack_name)
    pieces: list[bytes | np.ndarray] = []
    for block in table:
        if block.name == tilt_block and block.loop:
            replace = {}
            if "rlnMicrographName" in block.labels:
                names = table.values(block, "rlnMicrographName", np.array(kept, np.int64)).tolist()
                replace["rlnMicrographName"] = np.array(
                    [_image_name(name, z, i, input_stack, output_name) for i, (z, name) in enumerate(zip(kept, names))],
                    "S")
            if PIXEL_SIZE_LABEL in block.labels and pixel_scale != 1.0:
                sizes = table.numbers(block, PIXEL_SIZE_LABEL, rows=np.array(kept, np.int64))
                replace[PIXEL_SIZE_LABEL] = sizes * pixel_scale
            edit = star.LoopEdit(rows=np.array(kept, np.int64), replace=replace)
            edited = table.edited(loops={block.name: edit}, blocks=[block.name])
            # RELION's name of the tilt series: the output's now
            if block.name == tomography.tiltseries.block_name(input_stack):
                output_block = tomography.tiltseries.block_name(posixpath.basename(output_name))
                edited[0] = _renamed(bytes(edited[0]), block.name, output_block)
            pieces.extend(edited)
        elif PIXEL_SIZE_LABEL in block.pairs and pixel_scale != 1.0:
            size = float(block.pairs[PIXEL_SIZE_LABEL]) * pixel_scale
            pieces.extend(table.edited(pairs={block.name: {PIXEL_SIZE_LABEL: repr(size)}}, blocks=[block.name]))
        else:
            pieces.extend(table.edited(blocks=[block.name]))
    return b"".join(piece if isinstance(piece, bytes) else piece.tobytes() for piece in pieces)


def _image_name(value: bytes, z: int, i: int, input_stack: str, output_name: str) -> bytes:
    """The name of the output's section ``i`` where ``value`` named the input's section ``z`` (``N@stack``), else
    ``value`` as it is (a tilt's own micrograph)."""
    parsed = _IMAGE_NAME.match(value)
    if parsed is None or int(parsed.group(1)) != z + 1 or \
            posixpath.basename(parsed.group(2).decode(errors="replace")) != input_stack:
        return value
    return f"{i + 1:06d}@{output_name}".encode()


def _renamed(head: bytes, old: str, new: str) -> bytes:
    """A block's text with its ``data_old`` line made ``data_new``."""
    line = re.compile(rb"(?m)^(\s*)data_" + re.escape(old.encode()) + rb"(?=\s|$)")
    return line.sub(lambda m: m.group(1) + b"data_" + new.encode(), head, count=1)

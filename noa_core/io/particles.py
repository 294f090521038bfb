"""Particle files as image stacks: a RELION STAR or cryoSPARC ``.cs`` file read as the stack of the images its
rows name, in row order, and written as a new stack beside it and a particle file that points at the stack.

Reading (:data:`FORMAT`): each row names one section of an MRC stack (``N@stack.mrcs``, N from 1, in
``rlnImageName``; ``blob/path`` and ``blob/idx``, from 0, in a ``.cs``) by a path relative to the project folder,
where RELION and cryoSPARC run (the ``project_dir`` read option; the current folder by default). The stacks'
headers are read once, one file at a time, and checked: every section named exists, one box size and element
type for all. Their data are read as the tile engine asks (:func:`noa_core.io.mapped.map_gathered`): each tile's
particles are read with ``pread`` straight into its buffer, consecutive sections of one stack in one run, a few
stacks open at a time (:class:`Gather`). Paths inside the file are opened through a :class:`Project`, which the
service replaces by one that keeps every path beneath its data root.

What the rows say travels with the array as :class:`ParticleRows` (:attr:`Metadata.particles`): the rows follow
the sections an operation keeps, and an output named ``.star`` or ``.cs`` is written as its images in one MRC
stack (``OUT.mrcs``) and the particle file naming them, every other value as it was
(:mod:`noa_core.io.particle_files`), the two placed together or not at all.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Protocol

import numpy as np

from noa_core.array import asarray, layout
from noa_core.array.layout import Permutation4, Shape4
from noa_core.errors import (
    FileFormatError,
    MissingFileError,
    NoaError,
    NotAFileError,
    OutputIsInputError,
    UnknownFormatError,
    param,
)
from noa_core.io import mapped, mrc, particle_files, remote
from noa_core.io.metadata import HeaderStatistics, Metadata, Picks
from noa_core.io.particle_files import NewImages, ParticleError, Table
from noa_core.io.protocol import Created, OutputSpec, Probe, ReadRequest
from noa_core.io.read_options import ParticleReadOptions
from noa_core.limits import check_input_size

if TYPE_CHECKING:
    from noa_core.array import Array

# Stacks kept open at once while reading: rows in any order rarely reopen one (of 1024 descriptors a process)
OPEN_STACKS = 128
STACK_SUFFIX = ".mrcs"  # the images of a particle file written: OUT.star -> OUT.mrcs
_NPY_MAGIC = b"\x93NUMPY"


# -- the project folder -----------------------------------------------------------------------------------


class Project(Protocol):
    """The project folder a particle file's paths are relative to: how a named stack is opened, and how a file
    written is named in the particle file written with it."""

    def open(self, name: str) -> int:
        """A read-only descriptor of the file ``name`` (as a row names it) that the caller closes; OSError when
        it cannot be opened, a NoaError when it is refused."""

    def name_of(self, path: Path) -> str:
        """How a particle file names the output file ``path``: relative to the project folder where it lies in
        it; a NoaError where it may not be named."""


class FolderProject:
    """The project folder of a command line or a Python call: ``folder`` (None: the current folder, where RELION
    runs)."""

    def __init__(self, folder: str | os.PathLike | None = None) -> None:
        self.folder = None if folder is None else Path(folder)

    def _base(self) -> Path:
        return Path(os.path.abspath(self.folder if self.folder is not None else Path.cwd()))

    def open(self, name: str) -> int:
        path = Path(name) if os.path.isabs(name) else self._base() / name
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)  # a FIFO does not block the open
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise OSError(errno.EISDIR if stat.S_ISDIR(mode) else errno.EINVAL, "not a regular file")
        return fd

    def name_of(self, path: Path) -> str:
        if remote.is_remote(path):  # named by its URL, relative to no folder
            return str(path)
        absolute, base = Path(os.path.abspath(path)), self._base()
        return str(absolute.relative_to(base)) if absolute.is_relative_to(base) else str(absolute)


# The project of a read, from the ``project_dir`` read option (None: not given). The service passes one whose
# projects keep every path beneath its data root.
Projects = Callable[[str | None], Project]


@dataclass(frozen=True)
class FolderProjects:
    """The projects of this machine's folders (:data:`Projects`): ``project_dir`` relative to ``base`` (None: the
    current folder when read). A Dask client binds ``base`` to its own folder, since a worker runs elsewhere."""

    base: str | None = None

    def __call__(self, project_dir: str | None) -> FolderProject:
        if self.base is None:
            return FolderProject(project_dir)
        return FolderProject(self.base if project_dir is None else os.path.join(self.base, project_dir))


folder_projects = FolderProjects()


# -- the images the rows name -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Stack:
    """One stack a particle file names, from its header: where its sections lie and what they hold."""

    name: str  # as the file names it
    offset: int  # byte offset of the first section
    dtype: np.dtype  # stored element type, in the file's byte order
    sections: int
    height: int
    width: int
    pixel_size: float  # Å, 0 when unknown


@dataclass(frozen=True)
class Images:
    """Where each row's image lies: the stacks named (in first-named order) and, per row, the stack and the
    0-based section in it."""

    stacks: tuple[Stack, ...]
    stack_of: np.ndarray  # int64, one per row
    section: np.ndarray  # int64, one per row


def stack_runs(paths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct paths of ``paths`` (``S`` array) in first-named order, and the index of each row's: rows of
    one stack usually follow one another, so only the rows where the path changes are compared."""
    if paths.size == 0:
        return paths[:0], np.zeros(0, np.int64)
    heads = np.concatenate(([0], np.flatnonzero(paths[1:] != paths[:-1]) + 1))
    distinct, first, inverse = np.unique(paths[heads], return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    lengths = np.diff(np.concatenate((heads, [paths.size])))
    return distinct[order], np.repeat(rank[inverse.reshape(-1)], lengths)


def first_rows(stack_of: np.ndarray) -> np.ndarray:
    """The first row naming each stack (:func:`stack_runs`' numbering): one pass, whatever the count of stacks."""
    return np.unique(stack_of, return_index=True)[1]


def _open_stack(project: Project, name: str, where: Callable[[], str]) -> int:
    """A descriptor of the stack ``name`` opened through ``project``; errors say ``where()`` it is named. A refusal
    (a NoaError, which may also be an OSError: PathRefusedError is a PermissionError) stays a refusal."""
    try:
        return project.open(name)
    except NoaError as exc:
        raise type(exc)(f"{where()}: {exc}") from None
    except OSError as exc:
        raise MissingFileError(f"{where()}: {name}: {exc.strerror or exc}") from None


def stack_header(project: Project, name: str, where: str) -> Stack:
    """The header of the stack ``name`` (read through ``project``); errors say ``where`` it is named."""
    fd = _open_stack(project, name, lambda: where)
    try:
        size = os.fstat(fd).st_size
        raw = os.pread(fd, mrc.HEADER_BYTES, 0)
    finally:
        os.close(fd)
    try:
        if (len(raw) >= mrc.HEADER_BYTES and raw[208:212] != b"MAP "
                and not mrc.FORMAT.claim_by_extension(raw, Path(name))):
            raise UnknownFormatError(f"{name}: not an MRC stack")
        header = mrc.parse_header(Path(name), raw)
        return Stack(name, *mrc.stack_layout(Path(name), header, size))
    except NoaError as exc:
        raise ParticleError(f"{where}: {exc}") from None


def stack_files(table: Table, project: Project) -> Iterator[tuple[str, os.stat_result]]:
    """Each stack ``table`` names (first-named order, as the file names it) and its status, opened through
    ``project`` one at a time: what the images read are made of. Errors name the first row naming the stack."""
    names, stack_of = stack_runs(table.image_names()[0])
    firsts = first_rows(stack_of)
    for index, raw in enumerate(names.tolist()):
        name = raw.decode(errors="surrogateescape")
        fd = _open_stack(project, name, functools.partial(table.where, int(firsts[index]), table.image_field))
        try:
            yield name, os.fstat(fd)
        finally:
            os.close(fd)


def images_of(table: Table, project: Project) -> Images:
    """Where each row of ``table`` has its image, every stack's header read and checked: each section named is
    in its stack, every image has one size (ParticleError naming the first row that differs)."""
    paths, sections = table.image_names()
    names, stack_of = stack_runs(paths)
    firsts = first_rows(stack_of)
    stacks = [stack_header(project, raw.decode(errors="surrogateescape"), table.where(int(row), table.image_field))
              for raw, row in zip(names.tolist(), firsts)]
    counts = np.array([s.sections for s in stacks], np.int64)
    beyond = np.flatnonzero(sections >= counts[stack_of]) if stacks else np.zeros(0, np.int64)
    if beyond.size:
        row = int(beyond[0])
        stack = stacks[stack_of[row]]
        raise ParticleError(f"{table.where(row, table.index_field)}: section {sections[row] + table.first_index} of "
                            f"{stack.name}, which holds {stack.sections}")
    if stacks:
        sizes = np.array([(s.height, s.width) for s in stacks])
        odd = np.flatnonzero((sizes != sizes[0]).any(axis=1))
        if odd.size:
            raise ParticleError(f"{table.where(int(firsts[odd[0]]), table.image_field)}: {stacks[odd[0]].name} holds "
                                f"{sizes[odd[0]][1]} x {sizes[odd[0]][0]} images, {stacks[0].name} (row "
                                f"{int(firsts[0]) + 1}) {sizes[0][1]} x {sizes[0][0]}: one operation "
                                "takes images of one size (choose rows of one size with noa particles select)")
    return Images(tuple(stacks), stack_of, sections)


def _pixel_size(table: Table, images: Images) -> tuple[float, list[str]]:
    """The images' pixel size (Å): what the file says of its rows, else what the stacks' headers say; 0 when
    the rows disagree, with a notice."""
    sizes = table.pixel_sizes()
    _check_group_pixel_sizes(table, sizes)
    distinct = _distinct(sizes)
    if distinct.size == 0:
        from_stacks = {s.pixel_size for s in images.stacks if s.pixel_size > 0}
        return (from_stacks.pop() if len(from_stacks) == 1 else 0.0), []
    if distinct.size > 1:
        return 0.0, [f"{table.path}: the rows' pixel sizes differ ({', '.join(f'{v:g}' for v in distinct[:4])} Å): "
                     "the stack's pixel size is unknown"]
    return float(distinct[0]), []


def _distinct(sizes: np.ndarray) -> np.ndarray:
    """The distinct pixel sizes the rows say (``sizes``, 0 where not said), to RELION's six decimals."""
    return np.unique(np.round(sizes[sizes > 0], 6))


def _check_group_pixel_sizes(table: Table, sizes: np.ndarray) -> None:
    """The rows of one optics group (every row, where the file has no groups) say one pixel size ``sizes`` (Å, 0:
    not said): a ParticleError naming the first row that differs from its group's first."""
    known = np.flatnonzero(sizes > 0)
    groups = table.groups()
    _, first, group = np.unique(np.zeros(known.size, np.int64) if groups is None else groups[known],
                                return_index=True, return_inverse=True)
    values = np.round(sizes[known], 6)
    like = first[group.reshape(-1)]  # each row's group's first row (of the known)
    odd = np.flatnonzero(values != values[like])
    if odd.size:
        at = int(odd[0])
        raise ParticleError(f"{table.where(int(known[at]), table.pixel_field)}: {values[at]:g} Å, but row "
                            f"{int(known[like[at]]) + 1} of its optics group says {values[like[at]]:g} Å: the images "
                            "of one optics group have one pixel size")


def _check_boxes(table: Table, images: Images) -> None:
    """The box the file says of each row (RELION's optics table, cryoSPARC's blob/shape) is its image's."""
    boxes = table.boxes()
    if boxes is None or not images.stacks:
        return
    width = images.stacks[0].width
    wrong = np.flatnonzero(boxes != width)
    if wrong.size:
        row = int(wrong[0])
        raise ParticleError(f"{table.where(row, table.box_field)}: {boxes[row]}, but its image in "
                            f"{images.stacks[images.stack_of[row]].name} is {width} pixels wide")


class Gather:
    """Reads byte ranges of the stack of a particle file's images (its rows' images one after another) from the
    stacks the rows name: what :func:`noa_core.io.mapped.read_view` calls for each run a tile reads.
    Consecutive sections of one stack are one ``pread``; at most :data:`OPEN_STACKS` stacks are open at once.
    Thread-safe: the tile engine reads runs from several threads."""

    def __init__(self, images: Images, dtype: np.dtype, project: Project, where: Callable[[int], str]) -> None:
        self.images = images
        self.dtype = dtype  # the array's element type (native); stacks of another type are converted
        first = images.stacks[0]
        self.section_bytes = first.height * first.width * dtype.itemsize
        self.project = project
        self.where = where
        self.lock = threading.Lock()
        self.open: OrderedDict[int, int] = OrderedDict()  # stack -> descriptor, least recently used first
        self.users: dict[int, int] = {}

    def close(self) -> None:
        with self.lock:
            for fd in self.open.values():
                os.close(fd)
            self.open.clear()

    @contextlib.contextmanager
    def _descriptor(self, stack: int) -> Iterator[int]:
        with self.lock:
            fd = self.open.pop(stack, None)
            if fd is None:
                fd = _open_stack(self.project, self.images.stacks[stack].name,
                                 lambda: self.where(int(np.argmax(self.images.stack_of == stack))))
            self.open[stack] = fd
            self.users[stack] = self.users.get(stack, 0) + 1
            excess = len(self.open) - OPEN_STACKS
            if excess > 0:  # close the least recently used idle ones (the first ones looked at, as a rule)
                idle = []
                for old in self.open:
                    if not self.users.get(old):
                        idle.append(old)
                        if len(idle) == excess:
                            break
                for old in idle:
                    os.close(self.open.pop(old))
        try:
            yield fd
        finally:
            with self.lock:
                self.users[stack] -= 1

    def read_into(self, buffer: memoryview, offset: int) -> bool:
        """Fill ``buffer`` with bytes ``offset ..`` of the gathered stack; False when a stack came back short."""
        done, size = 0, len(buffer)
        stack_of, section = self.images.stack_of, self.images.section
        while done < size:
            row, within = divmod(offset + done, self.section_bytes)
            # the run: the rows after ``row`` that name the next sections of the same stack
            rows = min(len(stack_of), row + -(-(size - done + within) // self.section_bytes))
            last = row + 1
            while last < rows and stack_of[last] == stack_of[row] and section[last] == section[last - 1] + 1:
                last += 1
            length = min(size - done, (last - row) * self.section_bytes - within)
            stack = self.images.stacks[stack_of[row]]
            target = buffer[done:done + length]
            with self._descriptor(int(stack_of[row])) as fd:
                if not self._read(fd, stack, int(section[row]), within, target):
                    return False
            done += length
        return True

    def _read(self, fd: int, stack: Stack, section: int, within: int, target: memoryview) -> bool:
        """Bytes ``within ..`` of section ``section`` of ``stack`` and the sections after it, as the array's type."""
        if stack.dtype == self.dtype:
            at = stack.offset + section * self.section_bytes + within
            return os.preadv(fd, [target], at) == len(target)
        first, count = within // self.dtype.itemsize, len(target) // self.dtype.itemsize
        at = stack.offset + (section * stack.height * stack.width + first) * stack.dtype.itemsize
        raw = os.pread(fd, count * stack.dtype.itemsize, at)
        if len(raw) != count * stack.dtype.itemsize:
            return False
        np.frombuffer(target, self.dtype)[:] = np.frombuffer(raw, stack.dtype)
        return True


# -- the rows through an operation ------------------------------------------------------------------------


@dataclass(frozen=True)
class ParticleRows:
    """The particle-file rows of a stack's sections (:attr:`Metadata.particles`): the file's table, the source
    row of each section, the project its paths are relative to, the images' pixel size (0: unknown, or the rows'
    differ) and width as read. They follow
    the sections an operation keeps (the hooks of :class:`noa_core.io.metadata.FormatFields`); an operation that
    makes new sections, moves axes or joins other files' rows leaves :class:`DroppedRows` saying why."""

    table: Table
    rows: np.ndarray
    project: Project
    pixel_size: float
    box: int

    def permute(self, perm: Permutation4, notices: list[str]) -> ParticleRows | DroppedRows:
        return self if tuple(perm) == (0, 1, 2, 3) else DroppedRows("its axes were permuted")

    def broadcast(self, shape: Shape4, target: Shape4, notices: list[str]) -> ParticleRows | DroppedRows:
        return self if tuple(shape) == tuple(target) else DroppedRows(f"it was broadcast to {tuple(target)}")

    def resized(self, shape: Shape4, target: Shape4, grown_axes: Sequence[int] = ()) -> ParticleRows | DroppedRows:
        if target[0] == shape[0] and target[1] == 1:
            return self
        return DroppedRows(f"it holds {target[0]} x {target[1]} sections for {shape[0]} particles")

    def take_sections(self, sections: int, stored: str | None, picks: Picks, why: str, pixel_scale: float,
                      notices: list[str]) -> ParticleRows | DroppedRows:
        if picks is None:
            return DroppedRows(why or "its sections are not the particles' images")
        chosen = list(picks() if callable(picks) else picks)
        if any(p is None for p in chosen):
            return DroppedRows("it holds new sections")
        return replace(self, rows=self.rows[np.asarray(chosen, np.int64)])

    def joined(self, parts: Sequence[tuple[ParticleRows | DroppedRows | None, int, str | None, str]],
               notices: list[str]) -> ParticleRows | DroppedRows:
        rows = [p for p, _, _, _ in parts]
        if all(isinstance(p, ParticleRows) and p.table is self.table for p in rows):
            return replace(self, rows=np.concatenate([p.rows for p in rows if isinstance(p, ParticleRows)]))
        return DroppedRows("it joins images of several files (noa particles join joins particle files)")


@dataclass(frozen=True)
class DroppedRows:
    """What became of the rows of an operation's particles when its sections no longer are their images."""

    why: str

    def permute(self, perm: Permutation4, notices: list[str]) -> DroppedRows:
        return self

    def broadcast(self, shape: Shape4, target: Shape4, notices: list[str]) -> DroppedRows:
        return self

    def resized(self, shape: Shape4, target: Shape4, grown_axes: Sequence[int] = ()) -> DroppedRows:
        return self

    def take_sections(self, sections, stored, picks, why, pixel_scale, notices) -> DroppedRows:
        return self

    def joined(self, parts, notices) -> DroppedRows:
        return self


# -- the format -------------------------------------------------------------------------------------------


def _read_table(path: Path) -> Table:
    return particle_files.open_table(path)


def _probe_rows(path: Path, request: ReadRequest) -> tuple[Table, Images, Project, Probe]:
    """The table, its images and what a read gives: shape ``(rows, 1, H, W)``, the stacks' type, metadata."""
    table = _read_table(path)
    projects = request.projects or folder_projects
    project = projects(request.options.project_dir)
    images = images_of(table, project)
    _check_boxes(table, images)
    if not images.stacks:
        raise ParticleError(f"{table.where(None)}: no rows: no particles to work on")
    dtype = np.result_type(*{s.dtype.newbyteorder("=") for s in images.stacks})
    pixel, notices = _pixel_size(table, images)
    first = images.stacks[0]
    shape = layout.as_shape4((table.rows, 1, first.height, first.width))
    rows = ParticleRows(table, np.arange(table.rows), project, pixel, first.width)
    metadata = Metadata(format=FORMAT.name, shape=shape, dtype=dtype.name, pixel_size=(pixel, pixel, pixel),
                        order="C", axes=f"one {table.kind} row per image, in row order", path=str(path),
                        notices=notices, particles=rows)
    return table, images, project, Probe(shape, layout.strides_for(shape), dtype, metadata)


def _read(path: Path, request: ReadRequest) -> tuple[Array, Metadata]:
    """The stack of the rows' images; one over this context's voxel limit is refused from the table and the stacks'
    headers, before any image is read."""
    table, images, project, probe = _probe_rows(path, request)
    check_input_size(probe.shape, str(path))
    b, _, h, w = probe.shape
    gather = Gather(images, probe.dtype, project, table.where)
    # with tiles, each tile's particles are read as it asks; else all now, into a temporary file
    flat = mapped.gathered(path, probe.dtype, b * h * w, gather, request.tiles)
    return asarray(flat.reshape(b, 1, h, w)), probe.metadata


class ParticlesFormat:
    """RELION STAR and cryoSPARC .cs particle files: read as the stack of their rows' images; written as the
    images in one MRC stack beside the file (``OUT.mrcs``) and the file naming them (:class:`IndexedFormat`)."""

    name = "particles"
    title = "particle file"
    extensions = particle_files.SUFFIXES
    output_extensions = particle_files.SUFFIXES
    media_type = "text/plain"
    compressed_input = False
    header_statistics = True  # the stack's (MRC)
    store = False
    checks_size = True
    indexed = True
    data_suffix = STACK_SUFFIX
    read_options = ParticleReadOptions
    lacking: Mapping[str, str] = {
        "as_stack/as_volume": "a particle file is read as a stack of its rows' images",
        "series": "particle files hold one series", "channel": "particle files have no channels",
        "level": "particle files have no pyramid levels"}

    def detect(self, head: bytes, path: Path) -> bool:
        return path.suffix.lower() == particle_files.CS_SUFFIX and head.startswith(_NPY_MAGIC)

    def claim_by_extension(self, head: bytes, path: Path) -> bool:
        if path.suffix.lower() == particle_files.CS_SUFFIX:
            raise UnknownFormatError(f"{path}: not a cryoSPARC .cs file: no NumPy array header")
        if b"\x00" in head:
            raise UnknownFormatError(f"{path}: not a STAR file: it holds binary data")
        return True

    def read(self, path: Path, request: ReadRequest) -> tuple[Array, Metadata]:
        return _read(path, request)

    def probe(self, path: Path, request: ReadRequest) -> Probe:
        return _probe_rows(path, request)[3]

    def check_writable(self, dtype: np.dtype, shape: Shape4, path: Path) -> None:
        mrc.FORMAT.check_writable(dtype, shape, path)
        if shape[1] != 1:
            raise FileFormatError(f"{path}: a particle file's images are 2-d; the output is {shape[0]} volumes of "
                                  f"{shape[1]} sections (write an MRC file)")

    def data_path(self, path: Path) -> Path:
        """Where the images of the particle file ``path`` go as one stack: ``OUT.mrcs``."""
        return path.with_suffix(STACK_SUFFIX)

    def data_files(self, spec: OutputSpec) -> list[tuple[Path, np.ndarray]]:
        """The stacks the images of the particle file ``spec.path`` go to, each with the output's sections it holds
        (in order): ``OUT.mrcs`` holding them all, or, with the ``stack_per_input`` write option, one stack per
        source stack in the folder ``OUT`` (the output's name without its extension; :func:`stack_file_names`).
        Refused before any data are computed: an output whose images are no longer the particles', a stack that
        would replace one the rows name."""
        rows = self._checked(spec)[0]
        if not spec.write_options.get("stack_per_input"):
            files = [(self.data_path(spec.path), np.arange(spec.shape[0]))]
        else:
            folder = spec.path.with_suffix("")
            if folder.exists() and not folder.is_dir():
                raise NotAFileError(f"{folder}: is not a folder; the stacks of {spec.path} "
                                    f"({param('stack_per_input')}) go in a folder of that name")
            sources, stack_of = stack_runs(rows.table.image_names()[0][rows.rows])
            order = np.argsort(stack_of, kind="stable")  # each stack's sections, in the output's order
            held = np.split(order, np.cumsum(np.bincount(stack_of, minlength=len(sources)))[:-1])
            names = stack_file_names([raw.decode(errors="surrogateescape") for raw in sources.tolist()])
            files = [(folder / name, sections) for name, sections in zip(names, held)]
        _refuse_sources(files, rows)
        return files

    def create(self, temp: Path, spec: OutputSpec) -> Created:
        """An MRC stack (the rows are checked before, by :meth:`data_files`)."""
        if spec.order != "C":
            raise FileFormatError(f"{spec.path}: particle stacks are stored row by row (order C); RELION and "
                                  "cryoSPARC read no other")
        return mrc.FORMAT.create(temp, spec)

    def finish(self, temp: Path, spec: OutputSpec, statistics: HeaderStatistics) -> None:
        mrc.FORMAT.finish(temp, spec, statistics)

    def _checked(self, spec: OutputSpec) -> tuple[ParticleRows, float]:
        """The rows of the output ``spec`` and its pixel scale (new pixel size over old, 1 when either is unknown); a
        ParticleError when the output's images are no longer the particles'."""
        metadata = spec.metadata
        rows = None if metadata is None else metadata.particles
        kind = "STAR" if spec.path.suffix.lower() == particle_files.STAR_SUFFIX else "cryoSPARC"
        if not isinstance(rows, ParticleRows):
            why = rows.why if isinstance(rows, DroppedRows) else "its input is not a particle file"
            raise ParticleError(f"{spec.path}: a {kind} particle file names one image per particle, and this output "
                                f"is no longer the particles' images: {why}; write an image file (.mrcs)")
        if (rows.table.kind == "STAR") != (kind == "STAR"):
            raise ParticleError(f"{spec.path}: the particles were read from a {rows.table.kind} file; write "
                                f"{'a .star' if rows.table.kind == 'STAR' else 'a .cs'} file (noa particles convert "
                                "converts between them)")
        _, _, h, w = spec.shape
        if h != w:
            raise ParticleError(f"{spec.path}: particle images are square; these are {w} x {h}")
        assert metadata is not None  # the rows are its
        new_pixel = metadata.pixel_size[2]
        if rows.pixel_size == 0 and w != rows.box and (differ := _distinct(rows.table.pixel_sizes())).size > 1:
            sizes = ", ".join(f"{v:g}" for v in differ[:4])
            raise ParticleError(f"{spec.path}: the pixel sizes of {rows.table.path} differ ({sizes} Å, "
                                f"{rows.table.pixel_field}), so those of these {w}-pixel images made from its "
                                f"{rows.box}-pixel ones are unknown: take one optics group at a time (noa particles "
                                "select)")
        return rows, (new_pixel / rows.pixel_size if rows.pixel_size > 0 and new_pixel > 0 else 1.0)

    def written(self, spec: OutputSpec) -> Callable[[Sequence[tuple[Path, np.ndarray]]], list[bytes | np.ndarray]]:
        """What the particle file ``spec.path`` will hold once its stacks are named: a function of
        :meth:`data_files` (each stack's path and the output's sections it holds); a ParticleError when the output's
        images are no longer the particles'."""
        rows, scale = self._checked(spec)
        assert spec.metadata is not None  # the rows are its
        new_pixel, (b, _, _, w) = spec.metadata.pixel_size[2], spec.shape

        def text(files: Sequence[tuple[Path, np.ndarray]]) -> list[bytes | np.ndarray]:
            names = [rows.project.name_of(path).encode(errors="surrogateescape") for path, _ in files]
            stack, section = np.zeros(b, np.int64), np.zeros(b, np.int64)
            for index, (_, held) in enumerate(files):
                stack[held], section[held] = index, np.arange(len(held))
            named = np.array(names, f"S{max(1, *map(len, names))}")[stack]
            return rows.table.written(NewImages(rows.rows, named, section, new_pixel, w, scale))
        return text


def stack_file_names(sources: Sequence[str]) -> list[str]:
    """The file names of the stacks written for the source stacks ``sources`` (paths, in the output rows' first-named
    order) with ``stack_per_input``: each source's file name with ``.mrcs`` for its extension, ``-2``, ``-3``, ...
    after the name where an earlier one took it (whatever the case: a folder may not tell case apart)."""
    taken: set[str] = set()
    last: dict[str, int] = {}  # the last number tried after each name: a run of one name is not tried again
    names = []
    for source in sources:
        stem = PurePosixPath(source).stem or "stack"
        name, number = stem, last.get(stem.lower(), 1)
        while name.lower() in taken:
            number += 1
            name = f"{stem}-{number}"
        last[stem.lower()] = number
        taken.add(name.lower())
        names.append(name + STACK_SUFFIX)
    return names


def _refuse_sources(files: Sequence[tuple[Path, np.ndarray]], rows: ParticleRows) -> None:
    """An OutputIsInputError when a stack of ``files`` that exists (to be replaced) is one the rows name: an input
    is never an output."""
    existing = {}
    for path, _ in files:
        with contextlib.suppress(OSError):
            status = os.stat(path)
            existing[status.st_dev, status.st_ino] = path
    if existing:
        for name, status in stack_files(rows.table, rows.project):
            if (status.st_dev, status.st_ino) in existing:
                raise OutputIsInputError(f"{existing[status.st_dev, status.st_ino]}: is the stack {name} that "
                                         f"{rows.table.path} names, which stays as it is; write the output elsewhere")


FORMAT = ParticlesFormat()

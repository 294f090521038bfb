"""noa extract: for each micrograph, its particles' boxes (noa_core.images.extraction), rescaled, normalised and
inverted as relion_preprocess does, written into MRC stacks in RELION's ``Particles/`` layout beside the particles
STAR naming them; every stack and the STAR placed together, or nothing. ``also_scale`` writes more data sets of the
same boxes Fourier-cropped (or padded) to other sizes from the same read of each micrograph: ``OUT_<size>px.star``
with its stacks in ``Particles_<size>px/`` (or ``OUT_<size>px.mrcs``).

Everything is checked before anything is written: the micrographs' headers (2-d images, one pixel size per optics
group, the box within them), every coordinate (a number, within its micrograph) and every output name.

Resumed (``resume``, RELION's --only_do_unfinished), each micrograph's stacks take their names as soon as they are
written, so that a run that stops (cancelled, killed) leaves the micrographs it finished; a rerun keeps the stacks it
finds (when their shape is the one this extraction writes) and extracts the others. The STARs come last, together.

On a cluster (the driver sets ``PARTS``), this process checks, creates the temporary stacks, writes the STARs and
places everything as here; the micrographs are extracted by its tasks, a share of them each, into those temporary
stacks (``extract_share``), their statistics sent back."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

import numpy as np

from noa_core import limits
from noa_core.array import layout
from noa_core.compute.moments import RunningStatistics
from noa_core.errors import FileFormatError, NoaError, ParameterError, ShapeError, param
from noa_core.fourier.resampling import fourier_resize
from noa_core.images import extraction, intensity
from noa_core.io import atomic, mrc, star
from noa_core.io.metadata import Metadata
from noa_core.io.particles import Project, folder_projects
from noa_core.io.protocol import OutputSpec, ReadRequest
from noa_core.operations.spec import PARTS, Inputs, Options
from noa_core.particles import coordinates
from noa_core.particles.coordinates import Picks

PARTICLES_FOLDER = "Particles"
STACK_SUFFIX = ".mrcs"
CHUNK_BYTES = 8 << 20  # boxes computed at a time: this many bytes of float64 at most, whatever the particle count
CHUNK_WORKING = 8  # a chunk's memory at most, in CHUNK_BYTES: its boxes, and the temporaries of --scale and --norm
# Micrographs extracted at once: as many as the cores allow, their images and chunks within this memory
WORKERS_MEMORY = 256 << 20
_JOB_PREFIX = re.compile(r"^[A-Za-z]+/job\d+/")  # RELION's pipeline folders, which its Particles/ layout drops
# The micrograph's CTF columns RELION copies onto each of its particles.
CTF_COLUMNS = ("rlnCtfImage", "rlnDefocusU", "rlnDefocusV", "rlnDefocusAngle", "rlnCtfBfactor", "rlnCtfScalefactor",
               "rlnPhaseShift", "rlnCtfMaxResolution", "rlnCtfFigureOfMerit")


@dataclass
class Micrograph:
    """One micrograph to extract from: how the particles STAR names it, the file read, its optics group."""

    name: str
    path: Path
    group: int  # 0-based row of the optics table
    pixel_size: float
    where: str  # the file and row that gave it, for messages
    columns: dict[str, bytes] = field(default_factory=dict)  # its CTF columns, copied onto its particles
    by_name: bool = False  # opened through the project by its name (a STAR's row): another process opens it so again
    picks: Picks | None = None
    positions: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    kept: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # the picks' indices extracted
    nbytes: int = 0  # its image in memory
    first: int = 0  # its stack's section of its first particle (the same in every data set)


@dataclass
class Optics:
    """The optics table of the output: its labels and one row per group (values as bytes)."""

    labels: list[str]
    rows: list[list[bytes]]


@dataclass
class DataSet:
    """One data set written: the boxes at ``size`` pixels, its particles STAR and each micrograph's stack."""

    size: int
    star: Path
    folder: str  # where the stacks go beside the STAR (RELION's Particles/)
    background: intensity.Background | None
    stacks: list[Path] = field(default_factory=list)  # each micrograph's, in the micrographs' order
    writers: dict[Path, _StackWriter] = field(default_factory=dict)

    def pixel_size(self, micrograph_pixel: float, box: int) -> float:
        """RELION's output pixel size: the micrograph's, times box / size when rescaled."""
        return micrograph_pixel * box / self.size


def _data_sets(output: Path, options: Options) -> list[DataSet]:
    """The data set OUT names (at --scale, else the box), then one per other size asked for."""
    final = options.scale or options.box
    sizes = options.also_scale or ()
    for size in sizes:
        if size == final or sizes.count(size) > 1:
            raise ParameterError(f"{size} pixels is asked for twice: each size is one data set", "also_scale")
    bg_radius = options.bg_radius

    def background(size: int) -> intensity.Background | None:
        # RELION's --bg_radius is in pixels of the final box: the same circle in each data set's pixels
        return intensity.background((size, size), bg_radius * size / final) if options.norm else None

    sets = [DataSet(final, output, PARTICLES_FOLDER, background(final))]
    for size in sizes:
        named = output.with_name(f"{output.stem}_{size}px{output.suffix}")
        sets.append(DataSet(size, named, f"{PARTICLES_FOLDER}_{size}px", background(size)))
    return sets


def write(inputs: Inputs, output: Path, options: Options, overwrite: bool, progress, resume: bool = False) -> dict:
    if output.suffix.lower() != ".star":
        raise FileFormatError(f"{output}: extract writes a particles STAR (.star) and the stacks it names")
    if resume and options.one_stack:
        raise ParameterError(f"{param('resume')} keeps each micrograph's stack once written; {param('one_stack')} "
                             "writes one stack for all: choose one")
    if options.coords is None and options.coord_suffix is None:
        raise ParameterError("give the coordinates: a file, or the suffix of each micrograph's file", "coords")
    if options.norm and options.bg_radius is None:
        raise ParameterError("normalisation needs the background radius in pixels", "bg_radius")
    for name in ("bg_radius", "white_dust", "black_dust"):
        if options[name] is not None and not options.norm:
            raise ParameterError(f"works on the background of the normalisation: give {param('norm')} too", name)
    data_sets = _data_sets(output, options)
    project = (inputs.projects or folder_projects)(options.project_dir)
    notices: list[str] = []
    with contextlib.ExitStack() as opened:
        micrographs, optics = _micrographs(inputs, options, project, opened)
        _match(micrographs, options, project, opened, notices)
        for mic in micrographs:
            _check_picks(mic, inputs, options, notices)
        micrographs = [mic for mic in micrographs if mic.kept.size]
        if not micrographs:
            raise FileFormatError(f"{output}: no particle to extract")
        stacks: dict[Path, int] = {}
        for data_set in data_sets:
            _place_stacks(micrographs, data_set, options)
            stacks.update(_stack_sizes(micrographs, data_set))
        stars = [data_set.star for data_set in data_sets]
        finished = _finished_stacks(micrographs, data_sets, options) if resume else set()
        for stack in [*stars, *stacks]:  # a stack's folder may not be there yet: made below
            if (stack.parent.is_dir() or stack in stars) and stack not in finished:
                atomic.check_output(stack, overwrite)
        made = _make_folders(stacks)
        temps: list[atomic.TemporaryOutput] = []
        try:
            for data_set in data_sets:
                data_set.writers = {stack: _StackWriter(stack, stacks[stack], data_set.size, options, overwrite,
                                                        temps) for stack in dict.fromkeys(data_set.stacks)
                                    if stack not in finished}
            todo = [i for i, mic in enumerate(micrographs)
                    if any(data_set.stacks[i] not in finished for data_set in data_sets)]
            if finished:
                notices.append(f"{len(micrographs) - len(todo)} micrograph(s) extracted before: their stacks kept "
                               f"({param('resume')})")
            _extract_all(micrographs, todo, inputs, options, data_sets, progress, placing=resume)
            for data_set in data_sets:
                for mic, stack in zip(micrographs, data_set.stacks):  # resumed, each was finished with its micrograph
                    _finish(data_set, stack, mic, options)
                temps.append(star.prepared(data_set.star, _star_text(micrographs, optics, data_set, options, project),
                                           overwrite))
            # the STARs, with the stacks unless they were placed as they were written (resumed)
            atomic.commit_together(temps[-len(data_sets):] if resume else temps)
        except BaseException:
            for temp in temps:
                temp.abort()
            for folder in reversed(made):
                with contextlib.suppress(OSError):  # resumed, the folders of the stacks placed are not empty
                    folder.rmdir()
            raise
    count = sum(mic.kept.size for mic in micrographs)
    notices.append(f"{count} particles from {len(micrographs)} micrograph(s) into {len(data_sets[0].writers)} "
                   "stack(s)")
    notices.extend(f"the same particles at {data_set.size} pixels: {data_set.star}" for data_set in data_sets[1:])
    return {"output": str(output), "notices": notices}


# -- the micrographs ------------------------------------------------------------------------------------------


def _micrographs(inputs: Inputs, options: Options, project, opened: contextlib.ExitStack
                 ) -> tuple[list[Micrograph], Optics]:
    """The micrographs of the inputs in order, and the optics table of the output: a micrographs STAR's (its
    groups), or one group for micrograph files, which must then share one pixel size."""
    micrographs: list[Micrograph] = []
    optics: Optics | None = None
    files = [path for path in inputs if path.suffix.lower() != ".star"]
    for path in inputs:
        if path.suffix.lower() != ".star":
            continue
        if optics is not None:
            raise ParameterError(f"{path}: give one micrographs STAR (or micrograph files)", "inputs")
        mics, optics = _star_micrographs(path, project, opened)
        micrographs.extend(mics)
    if files and optics is not None:
        raise ParameterError(f"{files[0]}: give micrographs as files or as a micrographs STAR, not both", "inputs")
    if optics is not None:
        return micrographs, optics
    for path in files:
        probe = inputs.probe(path)
        pixel = float(probe.metadata.pixel_size[2])
        micrographs.append(Micrograph(project.name_of(path), path, 0, pixel, str(path)))
    pixels = {mic.pixel_size for mic in micrographs}
    if len(pixels) > 1:
        first = micrographs[0]
        other = next(mic for mic in micrographs if mic.pixel_size != first.pixel_size)
        raise FileFormatError(f"{other.path}: pixel size {other.pixel_size:g} Å, {first.path} {first.pixel_size:g} "
                              "Å: micrographs of one optics group share one pixel size (give a micrographs STAR "
                              "with one optics group per pixel size)")
    labels = ["rlnOpticsGroupName", "rlnOpticsGroup", "rlnMicrographPixelSize"]
    return micrographs, Optics(labels, [[b"opticsGroup1", b"1", repr(micrographs[0].pixel_size).encode()]])


def _star_micrographs(path: Path, project, opened: contextlib.ExitStack) -> tuple[list[Micrograph], Optics]:
    text = star.read(path)
    blocks = [b for b in text if b.loop and coordinates.MICROGRAPH_NAME in b.labels]
    if not blocks:
        raise FileFormatError(f"{path}: no loop has an rlnMicrographName column: not a micrographs STAR")
    block = blocks[0]
    if "optics" not in text or "rlnMicrographPixelSize" not in text.block("optics").labels:
        raise FileFormatError(f"{path}: no data_optics table with rlnMicrographPixelSize (RELION 3.1 micrographs)")
    table = text.block("optics")
    optics = Optics(list(table.labels), [list(row) for row in zip(*(text.values(table, label).tolist()
                                                                      for label in table.labels))])
    pixels = text.numbers(table, "rlnMicrographPixelSize")
    groups = text.numbers(table, "rlnOpticsGroup", np.int64).tolist()
    mine = text.numbers(block, "rlnOpticsGroup", np.int64) if "rlnOpticsGroup" in block.labels else \
        np.ones(block.rows, np.int64)
    names = text.values(block, coordinates.MICROGRAPH_NAME).tolist()
    ctf = {label: text.values(block, label).tolist() for label in CTF_COLUMNS if label in block.labels}
    micrographs = []
    for row, (name, group) in enumerate(zip(names, mine.tolist())):
        where = f"{path}: data_{block.name}, row {row + 1}"
        if group not in groups:
            raise FileFormatError(f"{where}, rlnOpticsGroup: group {group} is not in data_optics")
        fd = project.open(name.decode())
        opened.callback(os.close, fd)
        at = groups.index(group)
        micrographs.append(Micrograph(name.decode(), Path(f"/proc/self/fd/{fd}"), at, float(pixels[at]), where,
                                      {label: values[row] for label, values in ctf.items()}, by_name=True))
    return micrographs, optics


# -- their coordinates ----------------------------------------------------------------------------------------


def _match(micrographs: list[Micrograph], options: Options, project: Project, opened: contextlib.ExitStack,
           notices: list[str]) -> None:
    """Each micrograph's picks: from the one coordinate file (matched by name), the files a list of coordinate files
    names, or its own file by suffix."""
    found, listed = coordinates.read_or_list(options.coords) if options.coords is not None else (None, None)
    if listed is not None:
        for mic in micrographs:
            entry = next((row for row in listed if coordinates.same_micrograph(row.micrograph, mic.name)), None)
            if entry is None:
                notices.append(f"{mic.name}: not in {options.coords}; skipped (as RELION skips it)")
                continue
            try:
                mic.picks = _open_picks(project, entry.coordinates, entry.where, opened)
            except FileNotFoundError:
                raise FileFormatError(f"{entry.where}: {entry.coordinates}: no such file") from None
        return
    if found is not None:
        if all(p.micrograph is None for p in found):
            if len(micrographs) != 1:
                raise ParameterError(f"{options.coords}: the coordinates of one micrograph, and {len(micrographs)} "
                                     f"micrographs given (give each its own file with {param('coord_suffix')})",
                                     "coords")
            micrographs[0].picks = found[0]
            return
        for picks in found:
            owners = [mic for mic in micrographs if coordinates.matches(picks, mic.name)]
            if not owners:
                raise FileFormatError(f"{picks.where(0)}: coordinates for micrograph {picks.micrograph}, which is not "
                                      "among the micrographs given")
            for mic in owners:
                mic.picks = picks
        return
    for mic in micrographs:
        named = PurePosixPath(mic.name)
        candidate = str(named.parent / (named.name.split(".", 1)[0] + options.coord_suffix))
        try:
            mic.picks = _open_picks(project, candidate, mic.where, opened)
        except FileNotFoundError:
            notices.append(f"{mic.name}: no coordinate file {candidate}; skipped (as RELION skips it)")


def _open_picks(project: Project, name: str, where: str, opened: contextlib.ExitStack) -> coordinates.Picks:
    """The picks of the coordinate file ``name``, opened in the project folder (over HTTP: beneath the data root, no
    link followed); FileNotFoundError when it is not there, other errors naming ``where`` it was named."""
    try:
        fd = project.open(name)
    except FileNotFoundError:
        raise
    except NoaError as exc:  # a refusal (PathRefusedError is also an OSError) stays one
        raise type(exc)(f"{where}: {exc}") from None
    except OSError as exc:
        raise FileFormatError(f"{where}: {name}: {exc.strerror or exc}") from None
    opened.callback(os.close, fd)
    return coordinates.read(f"/proc/self/fd/{fd}", name)[0]


def _as_named(mic: Micrograph, exc: NoaError) -> NoaError:
    """``exc`` said of the micrograph as the user named it, not of the descriptor it was opened as."""
    return type(exc)(f"{mic.where}: {str(exc).replace(str(mic.path), mic.name)}") if mic.by_name else exc


def _check_picks(mic: Micrograph, inputs: Inputs, options: Options, notices: list[str]) -> None:
    """The micrograph's picks checked against its header, their positions set (``mic.kept``)."""
    try:
        probe = inputs.probe(mic.path)
    except NoaError as exc:
        raise _as_named(mic, exc) from None
    b, d, height, width = probe.shape
    mic.nbytes = b * d * height * width * probe.dtype.itemsize
    if b * d != 1:
        raise ShapeError(f"{mic.where}: {mic.name} holds {b * d} sections; micrographs are single images")
    if options.box > min(height, width):
        raise ParameterError(f"{options.box} pixels: larger than the micrograph {mic.name} ({width} x {height})",
                             "box")
    picks = mic.picks
    if picks is None or not len(picks.xy):
        return
    if options.recentre:
        picks = mic.picks = coordinates.recentred(picks, mic.pixel_size)
    bad = np.flatnonzero(~np.isfinite(picks.xy).all(axis=1))
    if bad.size:
        raise FileFormatError(f"{picks.where(int(bad[0]))}: the coordinate is not a number")
    positions = extraction.integer_positions(picks.xy)
    out = extraction.outside(positions, (height, width))
    dropped = out | (extraction.crossing_edge(positions, options.box, (height, width))
                     if options.edge == "drop" else np.zeros_like(out))
    if out.any() and options.edge != "drop":
        i = int(np.flatnonzero(out)[0])
        raise FileFormatError(f"{picks.where(i)}: ({picks.xy[i, 0]:g}, {picks.xy[i, 1]:g}) lies outside "
                              f"{mic.name} ({width} x {height})")
    if dropped.any():
        notices.append(f"{picks.source}: {int(dropped.sum())} particle(s) of {mic.name} reach beyond it: dropped")
    mic.kept = np.flatnonzero(~dropped)
    mic.positions = positions[mic.kept]


# -- the outputs ----------------------------------------------------------------------------------------------


def _stack_name(name: str) -> PurePosixPath:
    """Where RELION puts a micrograph's stack under Particles/: its folder (a pipeline job's dropped) and name."""
    named = PurePosixPath(_JOB_PREFIX.sub("", name))
    if named.is_absolute() or ".." in named.parts:
        named = PurePosixPath(named.name)
    return named.parent / (named.name.split(".", 1)[0] + STACK_SUFFIX)


def _place_stacks(micrographs: list[Micrograph], data_set: DataSet, options: Options) -> None:
    if options.one_stack:
        data_set.stacks = [data_set.star.with_suffix(STACK_SUFFIX)] * len(micrographs)
        return
    taken: dict[Path, str] = {}
    for mic in micrographs:
        stack = data_set.star.parent / data_set.folder / _stack_name(mic.name)
        if stack in taken:
            raise FileFormatError(f"{mic.where}: {mic.name} and {taken[stack]} would share the stack "
                                  f"{stack}: give micrographs distinct names")
        taken[stack] = mic.name
        data_set.stacks.append(stack)


def _finished_stacks(micrographs: list[Micrograph], data_sets: list[DataSet], options: Options) -> set[Path]:
    """The stacks a run stopped before placed: there with the shape and type this extraction writes them; a stack
    there of another shape is refused (it is not this extraction's)."""
    found = set()
    dtype = np.dtype(np.float16 if options.float16 else np.float32)
    for data_set in data_sets:
        for mic, stack in zip(micrographs, data_set.stacks):
            if not stack.is_file():
                continue
            expected = (mic.kept.size, 1, data_set.size, data_set.size)
            try:
                probe = mrc.FORMAT.probe(stack, ReadRequest(mrc.FORMAT.read_options()))
                same = tuple(probe.shape) == expected and probe.dtype == dtype
            except FileFormatError:
                same = False
            if not same:
                raise FileFormatError(f"{stack}: there already, and not the stack of {mic.name} this extraction "
                                      f"writes ({expected[0]} boxes of {data_set.size} x {data_set.size} {dtype}); "
                                      "remove it to extract it again")
            found.add(stack)
    return found


def _stack_sizes(micrographs: list[Micrograph], data_set: DataSet) -> dict[Path, int]:
    counts: dict[Path, int] = {}
    for mic, stack in zip(micrographs, data_set.stacks):
        mic.first = counts.get(stack, 0)
        counts[stack] = mic.first + mic.kept.size
    return counts


def _make_folders(stacks: dict[Path, int]) -> list[Path]:
    """The stacks' missing folders made (``mkdir -p``); the ones made, to remove should the extraction fail."""
    made: list[Path] = []
    for stack in stacks:
        for folder in (*reversed(stack.parent.parents), stack.parent):
            if not folder.exists():
                folder.mkdir()
                made.append(folder)
    return made


@dataclass(frozen=True)
class _Sections:
    """Where boxes go in one stack's temporary file: all that a process writing them there needs."""

    file: Path  # absolute: a worker runs in a folder of its own
    offset: int  # of the first section
    section: int  # bytes of one box
    dtype: np.dtype

    def write(self, out: BinaryIO, first: int, images: np.ndarray) -> RunningStatistics:
        """``images`` stored from section ``first`` on through ``out`` (:attr:`file`, opened by the caller); the
        statistics of the values stored."""
        values = np.ascontiguousarray(images, self.dtype)
        out.seek(self.offset + first * self.section)
        out.write(values.data)
        return RunningStatistics.of(values)


class _StackWriter:
    """One MRC stack filled section by section in its temporary file, its header finished with the statistics."""

    def __init__(self, path: Path, count: int, box: int, options: Options, overwrite: bool,
                 temps: list[atomic.TemporaryOutput]) -> None:
        self.dtype = np.dtype(np.float16 if options.float16 else np.float32)
        shape = layout.as_shape4((count, 1, box, box))
        limits.check_output_size(shape, self.dtype.itemsize, str(path))
        self.meta = Metadata(format="mrc", shape=shape, dtype=str(self.dtype))
        self.path, self.shape, self.label = path, shape, options.output_label()
        self.temp = atomic.TemporaryOutput(path, overwrite)
        temps.append(self.temp)
        created = mrc.FORMAT.create(self.temp.temp, self._spec())
        self.sections = _Sections(self.temp.temp.absolute(), created.offset, box * box * self.dtype.itemsize,
                                  self.dtype)
        self.stats = RunningStatistics()
        self.finished = False

    def _spec(self) -> OutputSpec:
        return OutputSpec(self.path, self.shape, self.dtype, "C", self.meta, self.label, {})

    def finish(self, pixel_size: float) -> None:
        self.meta.pixel_size = (pixel_size, pixel_size, pixel_size)
        mrc.FORMAT.finish(self.temp.temp, self._spec(), self.stats.result())
        self.finished = True


def _extract_all(micrographs: list[Micrograph], todo: list[int], inputs: Inputs, options: Options,
                 data_sets: list[DataSet], progress, placing: bool) -> None:
    """The particles of the micrographs ``todo`` (indices) into their stacks of each data set: by this process
    (:func:`_extract_here`) or a cluster's tasks (``PARTS``: :func:`extract_share`), their statistics merged here as
    each micrograph ends. ``placing``: each micrograph's stacks finished and given their names as soon as it is done.
    Progress counts every micrograph, those done before included."""
    if not todo:
        return
    writers = {i: [data_set.writers[data_set.stacks[i]] for data_set in data_sets] for i in todo}
    sections = {i: [writer.sections for writer in mine] for i, mine in writers.items()}
    done = len(micrographs) - len(todo)

    def extracted(i: int, statistics: list[RunningStatistics]) -> None:
        nonlocal done
        for writer, stored in zip(writers[i], statistics):
            # where micrographs share a stack (one stack), they end in their order: the statistics are the same bits
            writer.stats.merge(stored)
        if placing:
            for data_set, writer in zip(data_sets, writers[i]):
                _finish(data_set, writer.path, micrographs[i], options)
                writer.temp.commit()
        done += 1
        if progress is not None:
            progress(done, len(micrographs))

    runner = PARTS.get()
    if runner is None:
        _extract_here(micrographs, todo, inputs, options, data_sets, sections, extracted)
        return
    shares = _shares(todo, runner.threads, options.one_stack)
    shipped = [dataclasses.replace(data_set, stacks=[], writers={}) for data_set in data_sets]

    def share_done(k: int, statistics: list[list[RunningStatistics]]) -> None:
        for i, stored in zip(shares[k], statistics):
            extracted(i, stored)

    runner(extract_share, [([_shipped(micrographs[i]) for i in share], options, inputs.projects, shipped,
                            [sections[i] for i in share]) for share in shares], share_done)


def _extract_here(micrographs: list[Micrograph], todo: list[int], inputs: Inputs, options: Options,
                  data_sets: list[DataSet], sections: dict[int, list[_Sections]],
                  extracted: Callable[[int, list[RunningStatistics]], None]) -> None:
    """The micrographs ``todo`` extracted by this process, several at once (reading, NumPy and writing release the
    GIL): as many as the cores allow and WORKERS_MEMORY holds; ``extracted`` called in micrograph order."""
    each = max(micrographs[i].nbytes for i in todo) + CHUNK_WORKING * CHUNK_BYTES
    workers = max(1, min(limits.available_cores(), len(todo), WORKERS_MEMORY // each))
    opening = threading.Lock()  # inputs.open adds to the inputs' notices
    with ThreadPoolExecutor(workers) as pool:
        # each task in a copy of this context: the worker threads would not see its variables
        futures = [pool.submit(contextvars.copy_context().run, _extract, micrographs[i], inputs, options, data_sets,
                               sections[i], opening) for i in todo]
        try:
            for i, future in zip(todo, futures):
                extracted(i, future.result())
        except BaseException:
            for future in futures:
                future.cancel()
            raise


def _shares(todo: list[int], threads: int, one_stack: bool) -> list[list[int]]:
    """The micrographs ``todo`` as a cluster's tasks of consecutive ones: the first alone (it warms the kernel cache:
    noa_core.run.cluster), then about 4 tasks a thread, so that the workers stay evenly busy. One stack for all is
    one task: its micrographs written in order by one process, as here."""
    if one_stack:
        return [todo]
    first, rest = todo[:1], todo[1:]
    per = max(1, len(rest) // (4 * threads))
    return [first] + [rest[k:k + per] for k in range(0, len(rest), per)]


def _shipped(mic: Micrograph) -> Micrograph:
    """What a task needs of ``mic`` (its picks' other columns stay here), its file named for any process."""
    return dataclasses.replace(mic, picks=None, columns={}, path=mic.path if mic.by_name else mic.path.absolute())


def extract_share(share: list[Micrograph], options: Options, projects: Any, data_sets: list[DataSet],
                  sections: list[list[_Sections]]) -> list[list[RunningStatistics]]:
    """A cluster's task: the micrographs of ``share`` extracted one after the other into the temporary stacks the
    caller made (``sections``: each micrograph's in each data set); the statistics of what each stored."""
    inputs = Inputs([], options, projects)
    project = (projects or folder_projects)(options.project_dir)
    statistics = []
    for mic, mine in zip(share, sections):
        with contextlib.ExitStack() as opened:
            if mic.by_name:  # the caller's descriptor is not this process's
                fd = project.open(mic.name)
                opened.callback(os.close, fd)
                mic.path = Path(f"/proc/self/fd/{fd}")
            statistics.append(_extract(mic, inputs, options, data_sets, mine, contextlib.nullcontext()))
    return statistics


def _finish(data_set: DataSet, stack: Path, mic: Micrograph, options: Options) -> None:
    """The header of ``stack`` once its micrographs are extracted: the pixel size of its (first) micrograph."""
    writer = data_set.writers.get(stack)
    if writer is not None and not writer.finished:
        writer.finish(data_set.pixel_size(mic.pixel_size, options.box))


def _extract(mic: Micrograph, inputs: Inputs, options: Options, data_sets: list[DataSet],
             sections: list[_Sections], opening: contextlib.AbstractContextManager) -> list[RunningStatistics]:
    """The micrograph's particles, a chunk at a time: boxed once, then for each data set rescaled, normalised,
    inverted (RELION's order) and stored; the statistics of the values stored in each."""
    try:
        with opening:
            array, _ = inputs.open(mic.path)
        values = array.numpy()[0, 0]
    except NoaError as exc:
        raise _as_named(mic, exc) from None
    mean = float(values.mean(dtype=np.float64)) if options.edge == "mean" else 0.0
    chunk = max(1, CHUNK_BYTES // (8 * max(options.box, *(data_set.size for data_set in data_sets)) ** 2))
    statistics = [RunningStatistics() for _ in data_sets]
    # reused; integers boxed as floats, as RELION computes (a negated uint16 would wrap)
    kept = values.dtype if values.dtype.kind == "f" else np.dtype(np.float32)
    buffer = np.empty((min(chunk, len(mic.positions)), options.box, options.box), kept)
    with contextlib.ExitStack() as files:
        outs = [files.enter_context(open(stack.file, "r+b")) for stack in sections]
        for start in range(0, len(mic.positions), chunk):
            positions = mic.positions[start:start + chunk]
            boxes = extraction.boxes(values, positions, options.box, options.edge, mean, buffer[:len(positions)])
            for k, (data_set, stack, out, stored) in enumerate(zip(data_sets, sections, outs, statistics)):
                images = _finished(boxes, data_set, options, mic.first + start, last=k == len(data_sets) - 1)
                stored.merge(stack.write(out, mic.first + start, images))
        if atomic.durable() and not options.one_stack:
            # the stacks are this micrograph's alone: their bytes reach the disk now, beside the other micrographs'
            # work, instead of stack after stack when all are placed (only their headers are left to sync then)
            for out in outs:
                out.flush()
                os.fsync(out.fileno())
    return statistics


def _finished(boxes: np.ndarray, data_set: DataSet, options: Options, first: int, last: bool) -> np.ndarray:
    """A chunk of boxes as the data set stores them: rescaled, normalised, inverted, in RELION's order (``first``:
    the stack's section of the chunk's first box, which seeds the dust noise; ``last``: no other data set needs
    the boxes after this one)."""
    rescaled = data_set.size != options.box
    # float64 as RELION computes only where values change: a float32 box copied is RELION's to the bit
    # (normalising alone makes its own float64 copy)
    images = boxes.astype(np.float64) if rescaled else boxes
    if rescaled:
        images = fourier_resize(images[:, None], (data_set.size, data_set.size), like="relion").numpy()[:, 0]
    if data_set.background is not None:
        images = intensity.background_normalized(images, data_set.background, options.white_dust,
                                                 options.black_dust, first)
    if options.invert_contrast:
        # negated where it is, unless these are the boxes another data set still needs
        images = np.negative(images) if images is boxes and not last else np.negative(images, out=images)
    return images


def _star_text(micrographs: list[Micrograph], optics: Optics, data_set: DataSet, options: Options, project
               ) -> Iterator[bytes | np.ndarray]:
    """The data set's particles STAR: the optics table (image pixel size, size and dimensionality added; the
    micrographs' pixel size dropped, as RELION does) and one row per particle."""
    final = data_set.size
    drop = {"rlnMicrographPixelSize"}
    labels = [label for label in optics.labels if label not in drop]
    pixel_at = optics.labels.index("rlnMicrographPixelSize")
    columns: dict[str, list] = {label: [] for label in labels}
    for row in optics.rows:
        for label, value in zip(optics.labels, row):
            if label not in drop:
                columns[label].append(value)
    added = {"rlnImagePixelSize": [data_set.pixel_size(float(row[pixel_at]), options.box) for row in optics.rows],
             "rlnImageSize": [final] * len(optics.rows), "rlnImageDimensionality": [2] * len(optics.rows)}
    yield from star.loop_text("optics", {**{k: np.array(v) for k, v in columns.items()},
                                         **{k: np.array(v) for k, v in added.items()}})
    group_numbers = [row[optics.labels.index("rlnOpticsGroup")] for row in optics.rows]
    particles: dict[str, list] = {}
    written = 0
    for mic, stack_path in zip(micrographs, data_set.stacks):
        assert mic.picks is not None
        picks, kept = mic.picks, mic.kept
        stack = project.name_of(stack_path)
        rows = {
            coordinates.COORDINATE_X: picks.xy[kept, 0].tolist(), coordinates.COORDINATE_Y: picks.xy[kept, 1].tolist(),
            "rlnImageName": [f"{mic.first + i + 1:06d}@{stack}".encode() for i in range(kept.size)],
            coordinates.MICROGRAPH_NAME: [mic.name.encode()] * kept.size,
            "rlnOpticsGroup": [group_numbers[mic.group]] * kept.size,
            **{label: [value] * kept.size for label, value in mic.columns.items()}}
        for label, values in picks.columns.items():  # re-extraction: the particles' other columns kept
            if label not in rows:
                rows[label] = values[kept].tolist()
        before = written
        for label in [*particles, *(label for label in rows if label not in particles)]:
            # a column some micrographs lack is empty on their rows
            particles.setdefault(label, [b""] * before).extend(rows.get(label, [b""] * kept.size))
        written += kept.size
    yield from star.loop_text("particles", {label: _column(values) for label, values in particles.items()})


def _column(values: list) -> np.ndarray:
    """A STAR column: numbers as numbers, text as bytes."""
    if values and all(isinstance(v, (float, int)) and not isinstance(v, bool) for v in values):
        return np.array(values, np.float64 if any(isinstance(v, float) for v in values) else np.int64)
    return np.array([v if isinstance(v, bytes) else repr(v).encode() for v in values], "S")

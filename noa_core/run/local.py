"""Outputs written in this process, tile by tile, so memory stays bounded: one output (:func:`write_plan`,
:func:`write`) with the text files placed beside it, or several from one input, all or none
(:func:`write_several`)."""

from __future__ import annotations

import contextlib
import math
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from noa_core import io, kernels  # faces: a report (noa info) loads no writer, small files no numba
from noa_core.compute import compute_path
from noa_core.compute.tiles import TILE_BYTES
from noa_core.errors import MissingFileError, NotAFileError, OutputExistsError, param
from noa_core.io.formats import strip_image_suffix
from noa_core.io.remote import as_path, check_folder, exists, remote_path, upload_together
from noa_core.operations import FileTask
from noa_core.operations.plan import Plan, check_distinct
from noa_core.run.batch import PathLike, Progress


def write_plan(plan: Plan, dst: PathLike, *, overwrite: bool = False, device: str = "cpu",
               progress: Progress | None = None) -> list[str]:
    """Create ``dst`` (never one of the plan's inputs) and fill it tile by tile as ``plan`` says, its side files
    placed with it (:func:`placed_with_side_files`); return notices. Small work (inputs and output) is computed with
    NumPy, the rest with the kernels (:mod:`noa_core.compute.compute_path`)."""
    inputs = io.formats.input_bytes(plan.inputs)
    work = None if inputs is None else max(inputs, math.prod(plan.shape) * plan.dtype.itemsize)
    with placed_with_side_files(plan, dst, overwrite) as placing, \
            compute_path.for_size(work if device == "cpu" else None, "writing"), \
            plan.create(placing.target, overwrite=overwrite) as writer:
        if not compute_path.numpy_path():  # loaded while the output's blocks are allocated: a second each, at most
            kernels.runtime.load_cpu_target()
        keys = plan.keys(writer, TILE_BYTES)
        io.fill(writer, plan.sources, None, progress=progress, reads=plan.tile_reads(device), keys=keys)
        if progress is not None:  # a last word before the commit: a job cancelled after its last tile stops here
            progress(len(keys), len(keys))
    return placing.told([*plan.notices, *writer.notices])


@dataclass
class Placing:
    """Where an output is written (``target``): its own name ``dst``, or that name in a hidden folder beside it
    when files are placed with it; :meth:`told` gives the notices of the output and of those files."""

    dst: Path
    target: Path
    side_notices: list[str]

    def told(self, notices: list[str]) -> list[str]:
        """``notices`` of the output written at :attr:`target`, naming it ``dst``, then those of its side files."""
        if self.target != self.dst:
            notices = [n.replace(str(self.target), str(self.dst)) for n in notices]
        return [*notices, *self.side_notices]


@contextlib.contextmanager
def placed_with_side_files(plan: Plan, dst: PathLike, overwrite: bool) -> Iterator[Placing]:
    """Where to write the output of ``plan`` named ``dst``: ``dst`` itself, or where the plan has side files
    (:attr:`Plan.side_files`: a tilt series' angle, mdoc and STAR files), ``dst``'s name in a hidden folder beside
    it, into which they are written on a clean exit; then all of them take their names together, or none does
    (:func:`placed_together`). Each is refused before anything is written where it exists (without ``overwrite``)
    or is one of the plan's inputs."""
    dst = as_path(dst)
    files, notices = ({}, []) if plan.side_files is None else plan.side_files(dst)
    if not files:
        yield Placing(dst, dst, notices)
        return
    for path in (dst, *files):
        io.atomic.check_output(path, overwrite)
        check_distinct(path, plan.inputs)
    with placed_together([dst, *files], overwrite) as staging:
        yield Placing(dst, staging / dst.name, notices)
        for path, data in files.items():
            (staging / path.name).write_bytes(data)


@contextlib.contextmanager
def placed_together(outputs: Sequence[Path], overwrite: bool) -> Iterator[Path]:
    """A hidden folder ``.noa-several-*`` beside ``outputs`` (one folder, one file system), in which the caller
    writes each of them under its name; on a clean exit they are made durable, then renamed into place, one
    ``rename`` each (:class:`~noa_core.io.atomic.Placement`): all of them or none. Outputs on object storage are
    written in a hidden folder of this machine's temporary folder instead, then uploaded one by one, the first
    removed again where a later one fails (:func:`~noa_core.io.remote.upload_together`).

    On any failure or interruption (SIGTERM, Ctrl-C) before or during the renames, the outputs already renamed are
    taken back and those they replaced restored, so nothing else changed. A process killed outright (SIGKILL)
    before the renames leaves only the hidden folder; during them (a few milliseconds), the outputs renamed so far
    have their names and the rest, with the outputs they were to replace, wait in the hidden folder (remove
    ``.noa-several-*`` folders no process is using)."""
    folder = outputs[0].parent
    urls = [url for url in map(remote_path, outputs) if url is not None]  # all of them (one folder), or none
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=None if urls else folder))
    placement = None
    try:
        must_sync = io.atomic.durable() and not urls  # uploaded: nothing of this machine's is kept
        with io.atomic.scratch_outputs():  # synced together below: one fsync per file, not two, and no waits between
            yield staging
        if urls:
            upload_together([(staging / url.name, url) for url in urls], overwrite)
        else:
            if must_sync:  # every output durable before any takes its name
                for out in outputs:
                    io.atomic.fsync_output(staging / out.name, out)
            placement = io.atomic.Placement([(staging / out.name, out) for out in outputs], overwrite)
            placement.place()
            if must_sync:
                io.atomic.fsync_folder(folder)
    except BaseException:
        if placement is not None:
            placement.undo()
        shutil.rmtree(staging, ignore_errors=True)
        raise
    io.atomic.PLACED.extend(outputs)
    shutil.rmtree(staging)  # empty, or holding the outputs that were replaced


def write(task: FileTask, src: PathLike, dst: PathLike, *, overwrite: bool = False,
          progress: Progress | None = None) -> list[str]:
    """Write ``dst`` from ``src`` with ``task`` in this process; return notices."""
    return write_plan(task.plan(src), dst, overwrite=overwrite, device=task.device, progress=progress)


STAGING_PREFIX = ".noa-several-"  # the hidden folder outputs wait in until every one is complete


def output_names(src: PathLike, suffixes: Sequence[str], stem: str | None = None) -> list[str]:
    """The names of several outputs of ``src``: its stem (image extension and compression stripped), or
    ``stem``, followed by each suffix ('movie.mrcs.gz', '_000.mrcs' -> 'movie_000.mrcs')."""
    stem = strip_image_suffix(as_path(src).name) if stem is None else stem
    return [stem + suffix for suffix in suffixes]


def write_several(task: FileTask, src: PathLike, out_dir: PathLike, *, overwrite: bool = False,
                  progress: Progress | None = None, planned: list | None = None,
                  stem: str | None = None) -> tuple[list[Path], list[str]]:
    """Write every output of a several-output ``task`` (``Operation.plans``) from ``src`` into ``out_dir``:
    all of them or none; return ``(outputs, notices)``.

    Every output is first written (each atomically, tile by tile) into a hidden folder
    ``out_dir/.noa-several-*`` on the same file system; only when all are complete are they renamed
    into place together (:func:`placed_together`); on object storage, uploaded together.
    ``out_dir`` is created when missing (and removed again on failure); on object storage it is a prefix of keys,
    whose bucket is checked. ``planned``: ``task.plans(src)`` when already made; ``stem``: the outputs' names
    begin with it instead of ``src``'s stem.
    """
    src, out_dir = as_path(src), as_path(out_dir)
    if planned is None:
        planned = task.plans(src)  # headers read and checked before anything is created
    outputs = [out_dir / name for name in output_names(src, [suffix for suffix, _ in planned], stem)]
    url = remote_path(out_dir)
    if url is not None:  # a prefix of keys: nothing to create
        check_folder(url)
    elif out_dir.exists() and not out_dir.is_dir():
        raise NotAFileError(f"{out_dir}: the output folder is a file")
    elif not out_dir.parent.is_dir():
        raise MissingFileError(f"{out_dir}: the folder {out_dir.parent} does not exist")
    existing = [out for out in outputs if exists(out)]
    if existing and not overwrite:
        more = f" (and {len(existing) - 1} more of the {len(outputs)} outputs)" if len(existing) > 1 else ""
        raise OutputExistsError(f"{existing[0]}: exists{more}; give {param('overwrite')} to replace them")
    for out in existing:
        check_distinct(out, task.reads(src))
    created = url is None and not out_dir.exists()
    if created:
        out_dir.mkdir()
    notices: list[str] = []
    try:
        with placed_together(outputs, overwrite) as staging:
            for done, (out, (_, plan)) in enumerate(zip(outputs, planned, strict=True), 1):
                written = write_plan(plan, staging / out.name, device=task.device)
                notices.extend(n.replace(str(staging / out.name), str(out)) for n in written)
                if progress is not None:
                    progress(done, len(outputs))
            if progress is not None:  # a last word before the outputs take their names: a cancelled job stops here
                progress(len(outputs), len(outputs))
    except BaseException:
        if created:
            with contextlib.suppress(OSError):  # only when empty: nothing of anyone else's goes
                out_dir.rmdir()
        raise
    return outputs, notices

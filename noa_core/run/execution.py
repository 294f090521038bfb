"""One way to run an operation of any kind on files: what the CLI, the service (uploads, paths, jobs), the Dask
tasks and the warm-up all call.

:func:`execute` checks the values against the declaration, applies the caller's limits (a service's voxel
limit: every input refused from its header as it is read, and the outputs while they are planned, before
anything is built in proportion to them), and runs the operation as its kind says: this module is the one
place that tells the kinds apart.

Example::

    from noa_core import operations
    from noa_core.run import execute

    execute(operations.get("bin"), ["map.mrc"], "binned.mrc", {"factor": 2})
    execute(operations.get("stats"), ["map.mrc"])  # a report: its JSON-ready result
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from noa_core.errors import NoaError, ParameterError
from noa_core.io.remote import as_path
from noa_core.limits import check_voxels, voxel_limit
from noa_core.operations import (
    Edits,
    FileTask,
    Inputs,
    Operation,
    Options,
    Reports,
    Writes,
    WritesDataSet,
    WritesSeveral,
)
from noa_core.run.batch import FileResult, PathLike, Progress
from noa_core.run.local import write_plan, write_several

if TYPE_CHECKING:
    from noa_core.operations.plan import Plan


@dataclass(frozen=True)
class Limits:
    """What one call may do: ``max_voxels``, the most voxels an input or output may hold (a service's
    ``--max-voxels``; None: what a file can hold)."""

    max_voxels: int | None = None


NO_LIMITS = Limits()


@dataclass(frozen=True)
class Call:
    """One call of :func:`execute`: its checked options and where it reads and writes."""

    operation: Operation
    options: Options
    inputs: list[Path]
    output: Path | None
    limits: Limits
    progress: Progress | None
    overwrite: bool
    dry_run: bool
    stem: str | None
    projects: Any
    resume: bool


def _refuse_broadcast(operation: Operation, inputs: Sequence[Path], options: Options, projects: Any,
                      limits: Limits) -> None:
    """Several inputs refused over the voxel limit from their headers, before any is read: the per-axis maximum of
    their shapes bounds every broadcast of them (ewise's output), which their reads one by one would refuse only
    once all were read (a compressed one decompressed). One input is refused as it is read."""
    if limits.max_voxels is not None and operation.reads_data and len(inputs) > 1:
        reading = Inputs(list(inputs), options, projects)
        check_voxels([reading.probe(path).shape for path in inputs], limits.max_voxels)


def checked_plan(task: FileTask, src: PathLike, limits: Limits = NO_LIMITS) -> Plan:
    """What ``task`` writes for the pair whose input is ``src``, refused over ``limits`` from the headers: several
    inputs together first, each input as planning reads it (:func:`noa_core.io.formats.read`), the output while
    planning, before anything is built in proportion to it."""
    _refuse_broadcast(task.operation, task.inputs(src), task.options, task.projects, limits)
    with voxel_limit(limits.max_voxels):
        return task.plan(src)


def execute(operation: Operation, inputs: Sequence[PathLike], output: PathLike | None = None,
            values: Mapping[str, Any] | None = None, *, limits: Limits = NO_LIMITS, progress: Progress | None = None,
            overwrite: bool = False, dry_run: bool = False, stem: str | None = None,
            projects: Any = None, resume: bool = False) -> dict[str, Any]:
    """Run ``operation`` on ``inputs`` (a, b, c, ... in order) with the parameter ``values``; return its
    JSON-ready result.

    Args:
        output: the output file (:class:`~noa_core.operations.Writes`), or the folder of the outputs
            (:class:`~noa_core.operations.WritesSeveral`, named after the input or ``stem``); None otherwise.
        values: the parameters' values (or :class:`~noa_core.operations.Options` already checked).
        limits: what this call may do (:class:`Limits`).
        progress: ``progress(done, total)`` after each tile of a written output.
        overwrite: replace outputs that exist.
        dry_run: an edit says what it would change and changes nothing.
        projects: how the paths particle files name are opened (:data:`noa_core.io.particles.Projects`; None:
            this machine's folders, relative to the ``project_dir`` option). The service keeps them in its root.
        resume: a data set (:class:`~noa_core.operations.WritesDataSet`) keeps the parts it finished should it
            stop, and a rerun keeps those it finds instead of writing them again.

    Returns:
        a report's or an edit's result; ``{"output", "notices"}`` for an output written;
        ``{"outputs", "notices"}`` for several.

    Raises:
        ParameterError: a bad value, naming the parameter; other NoaErrors for the data and files.
    """
    options = operation.options(values)
    call = Call(operation, options, [as_path(p) for p in inputs], None if output is None else as_path(output), limits,
                progress, overwrite, dry_run, stem, projects, resume)
    run = _KINDS.get(type(operation)) or next(run for kind, run in _KINDS.items() if isinstance(operation, kind))
    return run(call)


def _writes(call: Call) -> dict[str, Any]:
    operation = call.operation
    assert isinstance(operation, Writes)
    if call.output is None:
        raise ParameterError(f"{operation.name}: writes a file; give the output", "output")
    task = operation.task(call.options, shared=call.inputs[1:], projects=call.projects)
    plan = checked_plan(task, call.inputs[0], call.limits)
    notices = write_plan(plan, call.output, overwrite=call.overwrite, device=task.device, progress=call.progress)
    return {"output": str(call.output), "notices": notices}


def _writes_several(call: Call) -> dict[str, Any]:
    operation = call.operation
    assert isinstance(operation, WritesSeveral)
    if call.output is None:
        raise ParameterError(f"{operation.name}: writes several files; give their folder", "output")
    task = operation.task(call.options, projects=call.projects)
    with voxel_limit(call.limits.max_voxels):
        planned = task.plans(call.inputs[0])
    outputs, notices = write_several(task, call.inputs[0], call.output, overwrite=call.overwrite,
                                     progress=call.progress, planned=planned, stem=call.stem)
    return {"outputs": [str(p) for p in outputs], "notices": notices}


def _writes_data_set(call: Call) -> dict[str, Any]:
    operation = call.operation
    assert isinstance(operation, WritesDataSet)
    if call.output is None:
        raise ParameterError(f"{operation.name}: writes a particle file and its stacks; give the output", "output")
    operation.check_inputs(len(call.inputs))
    with voxel_limit(call.limits.max_voxels):  # every image it opens, and every stack it writes
        return operation.write(Inputs(call.inputs, call.options, call.projects), call.output, call.options,
                               call.overwrite, call.progress, call.resume)


def _reports(call: Call) -> dict[str, Any]:
    operation = call.operation
    assert isinstance(operation, Reports)
    # each input as it is read; one that reads headers only (info) describes a file of any size
    _refuse_broadcast(operation, call.inputs, call.options, call.projects, call.limits)
    with voxel_limit(call.limits.max_voxels if operation.reads_data else None):
        return operation.run_report(call.inputs if operation.max_inputs > 1 else call.inputs[0], call.options,
                                    call.projects)


def _edits(call: Call) -> dict[str, Any]:
    operation = call.operation
    assert isinstance(operation, Edits)
    return operation.edit(call.inputs[0], call.options, call.dry_run)


# The kinds, and how each runs: the one place that tells them apart.
_KINDS: dict[type[Operation], Callable[[Call], dict[str, Any]]] = {
    Writes: _writes, WritesSeveral: _writes_several, WritesDataSet: _writes_data_set, Reports: _reports,
    Edits: _edits}


def write_pair(task: FileTask, src: Path, dst: Path, overwrite: bool,
               progress: Progress | None = None, resume: bool = False) -> FileResult:
    """One pair of a batch: a user error (bad input, existing output) is its result; anything else raises."""
    try:
        written = execute(task.operation, task.inputs(src), dst, task.options, overwrite=overwrite, progress=progress,
                          projects=task.projects, resume=resume)
        return FileResult(src, dst, "written", tuple(written["notices"]))
    except (NoaError, OSError) as exc:
        return FileResult(src, dst, "failed", error=exc)

"""The local driver: outputs written in this process, tile by tile, so memory stays bounded."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from noa_core.errors import NoaError
from noa_core.io.stream import TILE_BYTES
from noa_core.operations import FileTask
from noa_core.operations.plan import Plan
from noa_core.run.batch import FileResult, PathLike, Progress, split_complete


def write_plan(plan: Plan, dst: PathLike, *, overwrite: bool = False, device: str = "cpu",
               progress: Progress | None = None) -> list[str]:
    """Create ``dst`` (never one of the plan's inputs) and fill it tile by tile as ``plan`` says; return notices."""
    from noa_core import io

    with plan.create(dst, overwrite=overwrite) as writer:
        io.fill(writer, plan.sources, None, progress=progress, reads=plan.tile_reads(device),
                keys=plan.keys(writer, TILE_BYTES))
    return [*plan.notices, *writer.notices]


def write(task: FileTask, src: PathLike, dst: PathLike, *, overwrite: bool = False,
          progress: Progress | None = None) -> list[str]:
    """Write ``dst`` from ``src`` with ``task`` in this process; return notices."""
    return write_plan(task.plan(src), dst, overwrite=overwrite, device=task.device, progress=progress)


def write_pair(task: FileTask, src: Path, dst: Path, overwrite: bool,
               progress: Progress | None = None) -> FileResult:
    """One pair of a batch: a user error (bad input, existing output) is its result; anything else raises."""
    try:
        return FileResult(src, dst, "written", tuple(write(task, src, dst, overwrite=overwrite, progress=progress)))
    except (NoaError, OSError) as exc:
        return FileResult(src, dst, "failed", error=exc)


class LocalDriver:
    """Pairs written one after the other in this process (the kernels use every core)."""

    def write(self, task: FileTask, src: PathLike, dst: PathLike, *, overwrite: bool = False,
              progress: Progress | None = None) -> list[str]:
        return write(task, src, dst, overwrite=overwrite, progress=progress)

    def run_batch(self, task: FileTask, pairs: Sequence[tuple[PathLike, PathLike]], *, overwrite: bool = False,
                  resume: bool = False, on_result: Callable[[FileResult], None] | None = None,
                  progress: Progress | None = None) -> list[FileResult]:
        todo, complete = split_complete(pairs) if resume else ([(Path(s), Path(d)) for s, d in pairs], [])
        results = {}
        for src, dst in complete:
            results[(src, dst)] = FileResult(src, dst, "skipped")
            if on_result is not None:
                on_result(results[(src, dst)])
        for done, (src, dst) in enumerate(todo, 1):
            # A lone pair reports its tiles; several report pairs.
            result = write_pair(task, src, dst, overwrite, progress if len(todo) == 1 else None)
            results[(src, dst)] = result
            if on_result is not None:
                on_result(result)
            if progress is not None and len(todo) > 1:
                progress(done, len(todo))
        return [results[(Path(s), Path(d))] for s, d in pairs]

"""What every driver shares: the per-pair result, the driver interface, and resumption."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from noa_core.io.remote import as_path, complete

if TYPE_CHECKING:
    from noa_core.operations import FileTask

Progress = Callable[[int, int], None]
PathLike = str | Path
Pairs = list[tuple[Path, Path]]


@dataclass(frozen=True)
class FileResult:
    """What became of one pair of a batch: 'written', 'skipped' (the output was complete) or 'failed'."""

    src: Path
    dst: Path
    status: str
    notices: tuple[str, ...] = ()
    error: BaseException | None = None


class Driver(Protocol):
    def write(self, task: FileTask, src: PathLike, dst: PathLike, *, overwrite: bool = False,
              progress: Progress | None = None) -> list[str]:
        """Write ``dst`` from ``src``; return the notices for the user."""

    def run_batch(self, task: FileTask, pairs: Sequence[tuple[PathLike, PathLike]], *, overwrite: bool = False,
                  resume: bool = False, on_result: Callable[[FileResult], None] | None = None,
                  progress: Progress | None = None) -> list[FileResult]:
        """Write every pair; one result per pair, in order. ``resume`` skips pairs whose output exists;
        ``on_result`` is called as each pair ends (skipped ones first); ``progress(done, total)``
        counts pairs, or tiles (tasks) when one pair is left."""


def split_complete(pairs: Sequence[tuple[PathLike, PathLike]]) -> tuple[Pairs, Pairs]:
    """``(to_do, complete)``: pairs whose output does not exist yet, and those whose output does.

    Outputs are written to a temporary file and renamed, so an existing output is a complete one (a store on object
    storage, written in place, once its group metadata are there: :func:`noa_core.io.remote.complete`): resuming an
    interrupted batch skips those and redoes the others from scratch.
    """
    todo: list[tuple[Path, Path]] = []
    done: list[tuple[Path, Path]] = []
    for src, dst in pairs:
        pair = as_path(src), as_path(dst)
        (done if complete(pair[1]) else todo).append(pair)
    return todo, done


# -- several outputs from one input (operations declared with ``plans``: a split) -------------------

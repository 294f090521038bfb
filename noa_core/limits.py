"""Limits on outputs, checked from the parameters before anything is built in proportion to an output.

A plan calls :func:`check_output_size` as soon as its output's shape is known, before it lists sections or
allocates anything sized by it; every input read (:func:`noa_core.io.formats.read`) is given to
:func:`check_input_size` from its header, and a data set (a tilt series) names there the images its files name;
a service sets its voxel limit around planning, reports and data sets with :func:`voxel_limit`.
:data:`MAX_OUTPUT_BYTES` bounds every output, whatever the door.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
from collections.abc import Iterator, Sequence

from noa_core.errors import LimitError, MemoryLimitError

MAX_OUTPUT_BYTES = 1 << 48  # 256 TiB: the most one output may hold (as MRC reading allows)

_CHECK_MEMORY: contextvars.ContextVar[bool] = contextvars.ContextVar("noa_check_memory", default=True)
# The most voxels an output planned, or an input read, in this context may have (None: no limit beyond what a file
# can hold).
_VOXELS: contextvars.ContextVar[int | None] = contextvars.ContextVar("noa_output_voxels", default=None)


@contextlib.contextmanager
def voxel_limit(limit: int | None) -> Iterator[None]:
    """Within this block (this thread or task), plans refuse outputs of more than ``limit`` voxels, before
    they build anything in proportion to the output, and reads refuse such inputs from their headers (a service's
    ``--max-voxels``)."""
    token = _VOXELS.set(limit)
    try:
        yield
    finally:
        _VOXELS.reset(token)


def check_output_size(shape: Sequence[int], itemsize: int = 1, what: str = "") -> None:
    """LimitError when an output of ``shape`` exceeds this context's voxel limit, or (``itemsize`` bytes an
    element) :data:`MAX_OUTPUT_BYTES`; ``what`` (a file) begins the message."""
    voxels = math.prod(shape)
    limit = _VOXELS.get()
    where = f"{what}: " if what else ""
    if limit is not None and voxels > limit:
        raise LimitError(f"{where}the output of shape {tuple(shape)} would have {voxels} voxels; the limit is {limit}")
    if voxels * itemsize > MAX_OUTPUT_BYTES:
        raise LimitError(f"{where}the output of shape {tuple(shape)} would be {voxels * itemsize:.4g} bytes, more "
                         f"than the {MAX_OUTPUT_BYTES >> 40} TiB noa writes")


def limited() -> bool:
    """Whether a voxel limit holds in this context (:func:`voxel_limit`)."""
    return _VOXELS.get() is not None


def check_input_size(shape: Sequence[int], what: str) -> None:
    """LimitError when an image of ``shape`` read in this context (``what``: its file) exceeds its voxel limit
    (:func:`voxel_limit`): :func:`noa_core.io.formats.read` checks every input so, from its header."""
    voxels, limit = math.prod(shape), _VOXELS.get()
    if limit is not None and voxels > limit:
        raise LimitError(f"{what}: shape {tuple(shape)} has {voxels} voxels; the limit is {limit}")


def check_voxels(shapes: Sequence[Sequence[int]], limit: int) -> None:
    """LimitError when inputs or an output of ``shapes`` (BDHW, or fewer axes padded on the left) could exceed
    ``limit`` voxels: their per-axis maximum bounds every shape a broadcast of them can produce, so the check
    needs no knowledge of the operation's rules (a service's ``--max-voxels``, checked from the headers)."""
    given = [tuple(s) for s in shapes]
    rank = max(len(s) for s in given)
    padded = [(1,) * (rank - len(s)) + s for s in given]
    bound = math.prod(max(dims) for dims in zip(*padded, strict=True))
    if bound > limit:
        raise LimitError(f"the output would have {bound} voxels; the limit is {limit}")


def available_memory() -> int | None:
    """The bytes this machine (or its container's memory cgroup, when that is less) can still give a process:
    /proc/meminfo's MemAvailable; None where unknown (no check is made then)."""
    try:
        with open("/proc/meminfo", "rb") as file:
            free = next((int(line.split()[1]) * 1024 for line in file if line.startswith(b"MemAvailable:")), None)
    except (OSError, ValueError, IndexError):
        return None
    try:  # cgroup v2: what the container may still take
        with open("/sys/fs/cgroup/memory.max", "rb") as file:
            most = file.read().strip()
        with open("/sys/fs/cgroup/memory.current", "rb") as file:
            used = int(file.read().strip())
        if most != b"max" and free is not None:
            free = min(free, max(0, int(most) - used))
    except (OSError, ValueError):
        pass
    return free


def _size(nbytes: float) -> str:
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.3g} {unit}"
    return f"{int(nbytes)} bytes"


def check_working_memory(nbytes: int, what: str) -> None:
    """MemoryLimitError when a computation that must hold ``nbytes`` in memory at once (a whole image, its
    transforms and its output) needs more than this machine has available (where known). ``what`` names
    the file and the operation. Not checked while tasks re-plan an output already planned
    (:func:`replanning`): there, other tasks' memory is no reason to fail part-way."""
    if not _CHECK_MEMORY.get():
        return
    free = available_memory()
    if free is not None and nbytes > free:
        raise MemoryLimitError(f"{what}: one image (or volume) and its transforms need {_size(nbytes)} of memory "
                               f"at once; this machine has {_size(free)} available")


@contextlib.contextmanager
def replanning() -> Iterator[None]:
    """Within this block, plans skip the memory check: a task re-plans what its driver already checked."""
    token = _CHECK_MEMORY.set(False)
    try:
        yield
    finally:
        _CHECK_MEMORY.reset(token)


def available_cores() -> int:
    """CPU cores this process may run on: its affinity mask, which containers and batch systems restrict."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1

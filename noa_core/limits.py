"""Limits on outputs, checked from the parameters before anything is built in proportion to an output.

A plan calls :func:`check_output_size` as soon as its output's shape is known, before it lists sections or
allocates anything sized by it; a service sets its voxel limit around planning with
:func:`output_voxel_limit`. :data:`MAX_OUTPUT_BYTES` bounds every output, whatever the door.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator, Sequence

from noa_core.errors import LimitError

MAX_OUTPUT_BYTES = 1 << 48  # 256 TiB: the most one output may hold (as MRC reading allows)

# The most voxels an output planned in this context may have (None: no limit beyond what a file can hold).
_OUTPUT_VOXELS: contextvars.ContextVar[int | None] = contextvars.ContextVar("noa_output_voxels", default=None)


@contextlib.contextmanager
def output_voxel_limit(limit: int | None) -> Iterator[None]:
    """Within this block (this thread or task), plans refuse outputs of more than ``limit`` voxels, before
    they build anything in proportion to the output (a service's ``--max-voxels``)."""
    token = _OUTPUT_VOXELS.set(limit)
    try:
        yield
    finally:
        _OUTPUT_VOXELS.reset(token)


def check_output_size(shape: Sequence[int], itemsize: int = 1) -> None:
    """LimitError when an output of ``shape`` exceeds this context's voxel limit, or (``itemsize`` bytes an
    element) :data:`MAX_OUTPUT_BYTES`."""
    voxels = math.prod(shape)
    limit = _OUTPUT_VOXELS.get()
    if limit is not None and voxels > limit:
        raise LimitError(f"the output of shape {tuple(shape)} would have {voxels} voxels; the limit is {limit}")
    if voxels * itemsize > MAX_OUTPUT_BYTES:
        raise LimitError(f"the output of shape {tuple(shape)} would be {voxels * itemsize:.4g} bytes, more than the "
                         f"{MAX_OUTPUT_BYTES >> 40} TiB noa writes")

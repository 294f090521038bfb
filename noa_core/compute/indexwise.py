"""Index-wise operations: call a function for every BDHW index of a shape."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from noa_core.array import Array, layout
from noa_core.compute import user_kernels
from noa_core.compute.dispatch import backend, common_device


def iwise(shape: int | Sequence[int], op: Callable, *args: Any) -> None:
    """Call ``op(b, d, h, w, *args)`` for every index of ``shape`` (padded to BDHW).

    ``op`` is a Python function numba can compile (CPU) or a CUDA device function body (CUDA).
    Array arguments reach ``op`` as 4-d NumPy views (numba device arrays on CUDA) indexed
    ``a[b, d, h, w]`` (vector/matrix elements add trailing dimensions); other arguments pass as
    they are. Each thread walks its indices in rightmost (C) order, but there is no guarantee on
    the order across indices: they run in parallel, so ``op`` must not depend on it (write each
    index's own output, or use atomics on CUDA). Arrays must share one device, which decides where
    ``op`` runs (CPU when no array is given). Kernels are cached by what defines ``op`` (code,
    closure values, globals read, defaults: see :mod:`noa_core.compute.user_kernels`), so a lambda written
    in a loop compiles once.

    Args:
        shape: the index space, up to 4 sizes padded on the left to BDHW.
        op: ``op(b, d, h, w, *args)``, a function numba compiles.
        *args: what ``op`` takes after the index: Arrays (on one device) and other values.

    Raises:
        DeviceError: Arrays on different devices, or CUDA is not available.
    """
    shape4 = layout.as_shape4(shape)
    arrays = [a for a in args if isinstance(a, Array)]
    device = common_device(arrays) if arrays else "cpu"
    if layout.element_count(shape4) == 0:
        return
    kernels = backend(device)
    op = user_kernels.canonical(op)  # equal functions share their compiled kernels
    views = [kernels.view4d(a) if isinstance(a, Array) else a for a in args]
    kernels.iwise(op, shape4, views)

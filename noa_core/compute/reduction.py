"""Reductions over the whole array or chosen BDHW axes; reduced axes keep size 1 (results stay 4-d).

Built-ins: :func:`sum`, :func:`mean`, :func:`min`, :func:`max`, :func:`var`, :func:`std`; a user's
reduction goes through :func:`reduce_ewise`. Float sums accumulate in float64 (complex128), integer
sums in int64/uint64 like NumPy; variance is two-pass (mean, then squared deviations) as NumPy's.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from noa_core.array import Array, dtypes, empty, layout
from noa_core.compute import user_kernels
from noa_core.compute.dispatch import FLOAT16_COMPUTE, backend, common_device, computes_as, flat_buffer, launch, widened
from noa_core.errors import DTypeError, ShapeError
from noa_core.kernels.operators import BUILTIN_OPS

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

Axes = int | Sequence[int] | None


def normalize_axes(axes: Axes) -> tuple[int, ...]:
    """Axes as sorted indices in 0..3 (negative values count from the width); None means all."""
    if axes is None:
        return (0, 1, 2, 3)
    values = (axes,) if isinstance(axes, int) else tuple(axes)
    out = set()
    for a in values:
        if not isinstance(a, (int, np.integer)) or not -4 <= a < 4:
            raise ShapeError(f"axis {a!r} is not one of 0..3 (batch, depth, height, width) or -4..-1")
        out.add(int(a) % 4)
    return tuple(sorted(out))


def _reduce(inputs: Sequence[Array], pre: Callable, combine: Callable, final: Callable, initial,
            axes: Axes, out_dtype: np.dtype) -> Array:
    """Reduce ``pre(*inputs)`` with ``combine`` from ``initial``, then ``final``, over ``axes``."""
    device = common_device(list(inputs))
    for a in inputs:
        if dtypes.element_shape_of(a.dtype):
            raise DTypeError(f"reductions take scalar element types, not {a.dtype}")
    inputs = [widened(a) for a in inputs]
    shape = layout.broadcast_shapes(*(a.shape for a in inputs))
    strides = [layout.broadcast_strides(a.shape, a.strides, shape) for a in inputs]
    reduced = normalize_axes(axes)
    out_shape = tuple(1 if i in reduced else n for i, n in enumerate(shape))
    rshape = tuple(n if i in reduced else 1 for i, n in enumerate(shape))
    n_out = layout.element_count(out_shape)
    out = empty(out_shape, out_dtype, "C", device)
    if n_out == 0:
        return out
    # Reduced dimensions in the fastest order of the first input, merged where every input allows.
    perm = layout.iteration_order(rshape, strides[0])
    planned_shape, planned = layout.merge_dimensions(layout.permute(rshape, perm),
                                                     *(layout.permute(st, perm) for st in strides))
    kept = [tuple(0 if i in reduced else s for i, s in enumerate(st)) for st in strides]
    compute_dtype = computes_as(out_dtype, device)
    result = out if compute_dtype == out_dtype else empty(out_shape, compute_dtype, "C", device)
    bufs = [flat_buffer(a)[0] for a in inputs]
    backend(device).reduce(pre, combine, final, bufs, out_shape, kept, planned_shape, planned, initial,
                           flat_buffer(result)[0])
    if result is not out:
        np.copyto(out.numpy(), result.numpy(), casting="unsafe")
    return out


def reduce_ewise(inputs: Array | Sequence[Array], initial: complex | np.generic, combine: Callable, *,
                 preprocess: Callable | None = None, final: Callable | None = None, axes: Axes = None,
                 dtype: DTypeLike | None = None) -> Array:
    """A user-defined reduction: ``final(combine(... combine(initial, preprocess(*x[i])) ...))``.

    ``preprocess`` maps the inputs' elements at one index to an accumulator value (default: the
    single input's element); ``combine(acc, acc) -> acc`` must be associative and commutative with
    ``initial`` as identity (the order of combination is not specified); ``final`` maps the
    accumulator to the result (default: identity). All three are Python functions numba can
    compile. ``initial`` is a scalar whose type is the accumulator's; the result type is ``dtype``
    (default: the accumulator's). Inputs broadcast together; reduced axes keep size 1.

    Args:
        inputs: an Array, or a list or tuple of Arrays on one device.
        initial: the accumulator's first value and identity; its type is the accumulator's.
        combine: ``combine(acc, acc) -> acc``.
        preprocess: ``preprocess(*elements) -> acc`` (default: the single input's element).
        final: ``final(acc) -> result`` (default: identity).
        axes: the BDHW axes reduced (0..3, or -4..-1 from the width): one, several, or None for all.
        dtype: the result's scalar type (default: the accumulator's).

    Returns:
        The reduction, 4-d with the reduced axes of size 1.

    Raises:
        ValueError: several inputs and no ``preprocess``.
        DTypeError: ``initial`` is not a scalar, an unsupported type, or vector or matrix elements.
        ShapeError: an axis outside 0..3 and -4..-1.
        BroadcastError: inputs whose shapes do not broadcast together.
        DeviceError: inputs on different devices.
    """
    ins = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    # Equal functions (a lambda evaluated again) share their compiled kernels: see user_kernels.
    combine = user_kernels.canonical(combine)
    preprocess = None if preprocess is None else user_kernels.canonical(preprocess)
    final = None if final is None else user_kernels.canonical(final)
    if preprocess is None:
        if len(ins) != 1:
            raise ValueError(f"reduce_ewise with {len(ins)} inputs needs a preprocess function")
        preprocess = BUILTIN_OPS["identity"]
    acc = np.asarray(initial)
    if acc.ndim != 0:
        raise DTypeError(f"initial must be a scalar, got an array of shape {acc.shape}")
    acc_dtype = dtypes.scalar_dtype(acc.dtype)
    out_dtype = dtypes.scalar_dtype(dtype) if dtype is not None else acc_dtype
    return _reduce(ins, preprocess, combine, final or BUILTIN_OPS["identity"], acc_dtype.type(initial), axes,
                   out_dtype)


def _sum_dtype(dt: np.dtype) -> np.dtype:
    """Accumulator of a sum: int64/uint64 for integers (as NumPy), float64/complex128 for floats."""
    if dt.kind in "bi":
        return np.dtype(np.int64)
    if dt.kind == "u":
        return np.dtype(np.uint64)
    return np.dtype(np.complex128 if dt.kind == "c" else np.float64)


def _scalar_input(array: Array) -> np.dtype:
    if dtypes.element_shape_of(array.dtype):
        raise DTypeError(f"reductions take scalar element types, not {array.dtype}")
    return array.dtype


def sum(array: Array, axes: Axes = None) -> Array:  # noqa: A001 (mirrors numpy.sum)
    """Sum over ``axes`` (all by default); integers sum in int64/uint64, floats in float64.

    Args:
        array: the array reduced (scalar elements).
        axes: the BDHW axes reduced (0..3, or -4..-1 from the width): one, several, or None for all.

    Returns:
        The sums, of the input's type for floats (int64 or uint64 for integers), reduced axes of size 1.

    Raises:
        DTypeError: vector or matrix elements.
        ShapeError: an axis outside 0..3 and -4..-1.
    """
    dt = _scalar_input(array)
    acc = _sum_dtype(dt)
    out_dtype = dt if dt.kind in "fc" else acc
    add, ident = BUILTIN_OPS["add"], BUILTIN_OPS["identity"]
    return _reduce([array], ident, add, ident, acc.type(0), axes, out_dtype)


def _count(array: Array, axes: Axes) -> int:
    return math.prod(array.shape[i] for i in normalize_axes(axes))


def _mean(array: Array, axes: Axes, result_dtype: np.dtype | None = None) -> Array:
    """The mean summed in float64 (complex128) and rounded to ``result_dtype`` (default: kept wide)."""
    acc = np.dtype(np.complex128 if array.dtype.kind == "c" else np.float64)
    add, ident = BUILTIN_OPS["add"], BUILTIN_OPS["identity"]
    total = _reduce([array], ident, add, ident, acc.type(0), axes, acc)
    out = total if result_dtype in (None, acc) else empty(total.shape, result_dtype, "C", array.device)
    # One launch divides in the accumulator's type and rounds into the result's.
    launch(BUILTIN_OPS["divide"], [total, np.float64(_count(array, axes))], [out])
    return out


def _float_result(dt: np.dtype) -> np.dtype:
    return dt if dt.kind in "fc" else np.dtype(np.float64)


def mean(array: Array, axes: Axes = None) -> Array:
    """Mean over ``axes``; the result type is NumPy's (float64 for integers). Empty: NaN.

    Args:
        array: the array reduced (scalar elements).
        axes: the BDHW axes reduced (0..3, or -4..-1 from the width): one, several, or None for all.

    Returns:
        The means, reduced axes of size 1.

    Raises:
        DTypeError: vector or matrix elements.
        ShapeError: an axis outside 0..3 and -4..-1.
    """
    return _mean(array, axes, _float_result(_scalar_input(array)))


def _extremum(array: Array, axes: Axes, name: str) -> Array:
    dt = _scalar_input(array)
    if dt.kind == "c":
        raise DTypeError(f"{name} is not defined for complex element type {dt}")
    kept = math.prod(n for i, n in enumerate(array.shape) if i not in normalize_axes(axes))
    if _count(array, axes) == 0 and kept > 0:
        raise ShapeError(f"{name} of an empty reduction (shape {array.shape}, axes {normalize_axes(axes)}) has no "
                         "identity")
    # The identity of a float16 reduction is a float32 infinity on every device: the accumulator
    # is float32, as the CPU computes float16 anyway.
    compute = FLOAT16_COMPUTE if dt == np.float16 else dt
    if compute.kind == "f":
        initial = compute.type(np.inf if name == "min" else -np.inf)
    elif compute.kind == "b":
        initial = np.bool_(name == "min")
    else:
        info = np.iinfo(compute)
        initial = compute.type(info.max if name == "min" else info.min)
    op = BUILTIN_OPS["minimum" if name == "min" else "maximum"]
    ident = BUILTIN_OPS["identity"]
    return _reduce([array], ident, op, ident, initial, axes, dt)


def min(array: Array, axes: Axes = None) -> Array:  # noqa: A001
    """Minimum over ``axes``; NaN propagates as in NumPy. Refused over an empty axis.

    Args:
        array: the array reduced (scalar elements).
        axes: the BDHW axes reduced (0..3, or -4..-1 from the width): one, several, or None for all.

    Returns:
        The minima, of the input's type, reduced axes of size 1.

    Raises:
        DTypeError: complex, vector or matrix elements.
        ShapeError: an axis outside 0..3 and -4..-1, or an empty reduction.
    """
    return _extremum(array, axes, "min")


def max(array: Array, axes: Axes = None) -> Array:  # noqa: A001
    """Maximum over ``axes``; NaN propagates as in NumPy. Refused over an empty axis.

    Args:
        array: the array reduced (scalar elements).
        axes: the BDHW axes reduced (0..3, or -4..-1 from the width): one, several, or None for all.

    Returns:
        The maxima, of the input's type, reduced axes of size 1.

    Raises:
        DTypeError: complex, vector or matrix elements.
        ShapeError: an axis outside 0..3 and -4..-1, or an empty reduction.
    """
    return _extremum(array, axes, "max")


def _variance(array: Array, axes: Axes, ddof: int, final: str) -> Array:
    dt = _scalar_input(array)
    m = _mean(array, axes)
    shape = array.shape
    sq = BUILTIN_OPS["squared_deviation_complex" if dt.kind == "c" else "squared_deviation"]
    add, ident = BUILTIN_OPS["add"], BUILTIN_OPS["identity"]
    total = _reduce([array, m.broadcast(shape)], sq, add, ident, np.float64(0), axes, np.dtype(np.float64))
    # NumPy divides by max(n - ddof, 0): 0/0 is NaN and x/0 is inf, without raising.
    divisor = np.float64(builtins.max(_count(array, axes) - ddof, 0))
    result_dtype = np.dtype(dt.char.lower()) if dt.kind == "c" else _float_result(dt)
    out = empty(total.shape, result_dtype, "C", array.device)
    launch(BUILTIN_OPS["divide"], [total, divisor], [total])
    launch(BUILTIN_OPS[final], [total], [out])
    return out


def var(array: Array, axes: Axes = None, ddof: int = 0) -> Array:
    """Variance over ``axes`` with ``ddof`` delta degrees of freedom (two-pass, like NumPy).

    Args:
        array: the array reduced (scalar elements).
        axes: the BDHW axes reduced (0..3, or -4..-1 from the width): one, several, or None for all.
        ddof: delta degrees of freedom: the sum of squared deviations is divided by ``max(n - ddof, 0)``.

    Returns:
        The variances (real; float64 for integers), reduced axes of size 1.

    Raises:
        DTypeError: vector or matrix elements.
        ShapeError: an axis outside 0..3 and -4..-1.
    """
    return _variance(array, axes, ddof, "identity")


def std(array: Array, axes: Axes = None, ddof: int = 0) -> Array:
    """Standard deviation over ``axes`` with ``ddof`` delta degrees of freedom.

    Args:
        array: the array reduced (scalar elements).
        axes: the BDHW axes reduced (0..3, or -4..-1 from the width): one, several, or None for all.
        ddof: delta degrees of freedom: the sum of squared deviations is divided by ``max(n - ddof, 0)``.

    Returns:
        The standard deviations (real; float64 for integers), reduced axes of size 1.

    Raises:
        DTypeError: vector or matrix elements.
        ShapeError: an axis outside 0..3 and -4..-1.
    """
    return _variance(array, axes, ddof, "square_root")

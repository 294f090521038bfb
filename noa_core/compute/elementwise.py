"""Element-wise operations: :func:`ewise` and the functions built on it.

:func:`copy`, :func:`permute_copy`, :func:`astype`, :func:`fill` and :func:`arithmetic` back the
methods and operators of :class:`~noa_core.array.Array`; validation, planning and the launch
itself are :mod:`noa_core.compute.dispatch`'s.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from noa_core.array import Array, dtypes, empty, layout, resolve_copy_order
from noa_core.compute import user_kernels
from noa_core.compute.conversion import convert_into
from noa_core.compute.dispatch import Operand, common_device, launch
from noa_core.errors import DTypeError
from noa_core.kernels.operators import BUILTIN_OPS

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, DTypeLike

# Python's operators map to the built-in element operators (whose kernels are cached on disk).
_OPERATOR_ALIASES: dict[Callable, str] = {
    operator.add: "add", operator.sub: "subtract", operator.mul: "multiply", operator.truediv: "divide",
    operator.neg: "negate",
}


def resolve_op(op: str | Callable) -> Callable:
    """A built-in operator by name ('add', 'multiply', ...) or Python operator, else ``op`` itself."""
    if isinstance(op, str):
        if op not in BUILTIN_OPS:
            raise ValueError(f"unknown built-in operator {op!r}; known: {', '.join(sorted(BUILTIN_OPS))}")
        return BUILTIN_OPS[op]
    if op in _OPERATOR_ALIASES:
        return BUILTIN_OPS[_OPERATOR_ALIASES[op]]
    if not callable(op):
        raise TypeError(f"op {op!r} is neither a built-in operator name nor a function")
    # An equal lambda evaluated again reuses the kernels compiled for the first (user_kernels).
    return user_kernels.canonical(op)


# -- public functions ------------------------------------------------------------------------------


def ewise(inputs: Operand | Sequence[Operand], outputs: Array | Sequence[Array],
          op: str | Callable) -> Array | Sequence[Array]:
    """Compute ``outputs[idx] = op(*inputs[idx])`` for every index of the outputs' shape.

    ``op`` is a built-in operator ('add', 'subtract', 'multiply', 'divide', 'negate', 'identity',
    ...), a Python operator (``operator.mul``) or a Python function numba can compile; with several
    outputs it returns a tuple. Inputs (Arrays or scalars) are broadcast onto the outputs' shape;
    results are cast to each output's type on store. Outputs must share one shape, be writable,
    have no broadcast dimension and overlap no input other than element-for-element (in place).
    Returns ``outputs``.

    Kernels built around a Python function are cached by what defines it (code, closure values,
    the globals it reads, defaults; :mod:`noa_core.compute.user_kernels`), not by identity: a lambda
    evaluated again in a loop compiles once.

    Args:
        inputs: an Array or scalar, or a list or tuple of them.
        outputs: an Array, or a list or tuple of Arrays of one shape.
        op: a built-in operator's name, a Python operator or a function numba compiles, taking one value per input
            and returning one per output.

    Returns:
        ``outputs``, filled.

    Raises:
        ValueError: an unknown built-in operator name, or no output.
        TypeError: ``op`` is not callable, or an input or output of another kind.
        ShapeError: outputs of different shapes.
        StrideError: an output with a broadcast dimension.
        ReadOnlyError: a read-only output.
        OverlapError: an output overlapping an input other than element for element, or another output.
        DeviceError: operands on different devices.
        DTypeError: vector or matrix elements.
    """
    ins = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    outs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    launch(resolve_op(op), ins, outs)
    return outputs


def copy(array: Array, order: str = "C") -> Array:
    """A new array packed in 'C' or 'F' order ('K' keeps F for F arrays, C otherwise).

    Args:
        array: the array to copy (any strides, any device).
        order: 'C', 'F' or 'K'.

    Returns:
        The copy, on ``array``'s device.

    Raises:
        LayoutError: ``order`` is not 'C', 'F' or 'K'.
    """
    out = empty(array.shape, array.dtype, resolve_copy_order(array, order), array.device)
    launch(BUILTIN_OPS["identity"], [array], [out], raw=True)
    return out


def permute_copy(array: Array, perm: Sequence[int]) -> Array:
    """A new C-contiguous array holding ``array.permute(perm)`` (a cache-blocked transpose).

    Args:
        array: the array to copy.
        perm: a permutation of (0, 1, 2, 3): ``out.shape[i] == array.shape[perm[i]]``.

    Returns:
        The permuted copy.

    Raises:
        PermutationError: ``perm`` is not a permutation of 0..3.
    """
    return copy(array.permute(perm), "C")


def fill(array: Array, value: ArrayLike) -> Array:
    """Set every element of ``array`` to ``value`` (in place) and return it.

    For vector and matrix elements, ``value`` is a scalar or anything of the element's shape.

    Args:
        array: the writable array to fill.
        value: the value, converted to ``array``'s element type.

    Returns:
        ``array``.

    Raises:
        ReadOnlyError: ``array`` is read-only.
        StrideError: ``array`` has a broadcast dimension.
    """
    base = dtypes.base_of(array.dtype)
    element = np.broadcast_to(np.asarray(value, dtype=base), dtypes.element_shape_of(array.dtype))
    source = Array(np.ascontiguousarray(element).reshape((1,) + element.shape), 0, (1, 1, 1, 1), (1, 1, 1, 1),
                   array.dtype).to(array.device)
    launch(BUILTIN_OPS["identity"], [source.broadcast(array.shape)], [array], raw=True)
    return array


def astype(array: Array, dtype: DTypeLike, *, clamp: bool = False) -> Array:
    """A new array of element type ``dtype`` (same layout order as ``array`` when packed).

    Without ``clamp``, a C-style cast like NumPy's ``astype``; with ``clamp=True``, values are
    clamped to the target's range (see :func:`convert_into`).

    Args:
        array: the array to convert.
        dtype: the element type of the result.
        clamp: clamp values to the target's range (NaN -> 0 for integers) instead of a C-style cast.

    Returns:
        The converted array (a copy, even when ``dtype`` is ``array``'s).

    Raises:
        DTypeError: ``dtype`` is not supported, or a conversion between vector or matrix types.
    """
    target = dtypes.element_dtype(dtype)
    if target == array.dtype:
        return copy(array, "K")
    out = empty(array.shape, target, resolve_copy_order(array, "K"), array.device)
    return convert_into(array, out, mode="clamp" if clamp else "cast")


# -- arithmetic (used by Array's operators) -------------------------------------------------------


_UFUNCS = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.true_divide,
           "negate": np.negative}


def _loop_dtypes(name: str, operands: Sequence[Operand]) -> tuple[np.dtype, ...]:
    """NumPy's loop dtypes for the ufunc behind ``name`` (Python scalars are weak, as in NumPy 2)."""
    descr = tuple(x.dtype if isinstance(x, Array) else (x.dtype if isinstance(x, np.generic) else type(x))
                  for x in operands)
    for x in operands:
        if isinstance(x, Array) and dtypes.element_shape_of(x.dtype):
            raise DTypeError(f"arithmetic takes scalar element types, not {x.dtype}")
    try:
        return _UFUNCS[name].resolve_dtypes(descr + (None,))
    except (TypeError, np.exceptions.DTypePromotionError) as exc:
        listed = ", ".join(str(d) for d in descr)
        raise DTypeError(f"{name} is not defined for element types {listed}: {exc}") from None


def arithmetic(name: str, *operands: Operand) -> Array:
    """``name`` ('add', 'subtract', 'multiply', 'divide', 'negate') on Arrays and scalars into a
    new array; the result type is NumPy's and the shape the broadcast of the operands' shapes."""
    loop = _loop_dtypes(name, operands)
    arrays = [x for x in operands if isinstance(x, Array)]
    device = common_device(arrays)
    shape = layout.broadcast_shapes(*(a.shape for a in arrays))
    # Scalars take the loop's type, so that float32 * 0.1 computes in float32 as NumPy does.
    ins = [x if isinstance(x, Array) else np.array(x, dtype=dt)[()] for x, dt in zip(operands, loop)]
    out = empty(shape, loop[-1], "C", device)
    launch(BUILTIN_OPS[name], ins, [out])
    return out

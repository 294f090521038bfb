"""Element-wise operations: :func:`ewise` and the functions built on it.

:func:`copy`, :func:`permute_copy`, :func:`astype`, :func:`fill` and :func:`arithmetic` back the
methods and operators of :class:`~noa_core.array.Array`; validation, planning and the launch
itself are :mod:`noa_core.dispatch`'s.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence

import numpy as np

from noa_core import dtypes, layout, user_kernels
from noa_core.array import Array, empty, resolve_copy_order
from noa_core.dispatch import FLOAT16_COMPUTE, Operand, common_device, half_bits, launch
from noa_core.errors import DTypeError
from noa_core.kernels import BUILTIN_OPS
from noa_core.reduction import max as reduce_max
from noa_core.reduction import min as reduce_min
from noa_core.moments import block_moments

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


def ewise(inputs: Operand | Sequence[Operand], outputs: Array | Sequence[Array], op: str | Callable):
    """Compute ``outputs[idx] = op(*inputs[idx])`` for every index of the outputs' shape.

    ``op`` is a built-in operator ('add', 'subtract', 'multiply', 'divide', 'negate', 'identity',
    ...), a Python operator (``operator.mul``) or a Python function numba can compile; with several
    outputs it returns a tuple. Inputs (Arrays or scalars) are broadcast onto the outputs' shape;
    results are cast to each output's type on store. Outputs must share one shape, be writable,
    have no broadcast dimension and overlap no input other than element-for-element (in place).
    Returns ``outputs``.

    Kernels built around a Python function are cached by what defines it (code, closure values,
    the globals it reads, defaults; :mod:`noa_core.user_kernels`), not by identity: a lambda
    evaluated again in a loop compiles once.
    """
    ins = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    outs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    launch(resolve_op(op), ins, outs)
    return outputs


def copy(array: Array, order: str = "C") -> Array:
    """A new array packed in 'C' or 'F' order ('K' keeps F for F arrays, C otherwise)."""
    out = empty(array.shape, array.dtype, resolve_copy_order(array, order), array.device)
    launch(BUILTIN_OPS["identity"], [array], [out], raw=True)
    return out


def permute_copy(array: Array, perm: Sequence[int]) -> Array:
    """A new C-contiguous array holding ``array.permute(perm)`` (a cache-blocked transpose)."""
    return copy(array.permute(perm), "C")


def fill(array: Array, value) -> Array:
    """Set every element of ``array`` to ``value`` (in place) and return it.

    For vector and matrix elements, ``value`` is a scalar or anything of the element's shape.
    """
    base = dtypes.base_of(array.dtype)
    element = np.broadcast_to(np.asarray(value, dtype=base), dtypes.element_shape_of(array.dtype))
    source = Array(np.ascontiguousarray(element).reshape((1,) + element.shape), 0, (1, 1, 1, 1), (1, 1, 1, 1),
                   array.dtype).to(array.device)
    launch(BUILTIN_OPS["identity"], [source.broadcast(array.shape)], [array], raw=True)
    return array


def _clamp_bounds(source: np.dtype, target: np.dtype) -> tuple[np.generic, np.generic] | None:
    """Target range expressed in the source's (real) type, or None when no clamping is needed."""
    src = np.dtype(source.char.lower()) if source.kind == "c" else source
    # float16 cannot hold every bound (uint16's 65535 rounds to inf): float16 sources compare in
    # float32, which is also what the CPU computes them in.
    src = FLOAT16_COMPUTE if src == np.float16 else src
    if target.kind == "f":
        if src.kind != "f" or np.finfo(src).max <= np.finfo(target).max:
            return None
        return src.type(np.finfo(target).min), src.type(np.finfo(target).max)
    if target.kind not in "iu" or src.kind == "b":
        return None
    info = np.iinfo(target)
    if src.kind in "iu":
        s = np.iinfo(src)
        return src.type(max(info.min, s.min)), src.type(min(info.max, s.max))
    lo, hi = src.type(info.min), src.type(info.max)
    # The largest float not above the integer maximum (e.g. float32(2**31 - 1) rounds up to 2**31).
    while int(hi) > info.max:
        hi = np.nextafter(hi, src.type(-np.inf))
    return lo, hi


CONVERSION_MODES = ("cast", "clamp", "checked")


def _check_range(source: Array, target: np.dtype) -> None:
    """Raise DTypeError when some value of ``source`` cannot be represented in ``target``."""
    if source.dtype.kind == "c" and target.kind != "c":
        raise DTypeError(f"cannot convert complex {source.dtype} to {target}: the imaginary part would be lost")
    if target.kind not in "iuf" or source.dtype.kind == "b" or source.size == 0:
        return
    if target.kind == "f":
        if source.dtype.kind != "f" or np.finfo(source.dtype).max <= np.finfo(target).max:
            return
        limits = (float(np.finfo(target).min), float(np.finfo(target).max))
    else:
        if source.dtype.kind in "iu" and np.can_cast(source.dtype, target):
            return
        limits = (int(np.iinfo(target).min), int(np.iinfo(target).max))
    if source.device == "cpu" and source.dtype.kind in "fiu":  # one vectorized pass for both (NaN propagates alike)
        found = block_moments(source)
        lo, hi = source.dtype.type(found.min), source.dtype.type(found.max)
    else:
        lo = reduce_min(source).numpy().reshape(-1)[0]
        hi = reduce_max(source).numpy().reshape(-1)[0]
    if target.kind == "f":  # NaN and inf carry over; only finite values beyond the range overflow
        lo, hi = (lo if np.isfinite(lo) else 0), (hi if np.isfinite(hi) else 0)
    if np.isnan(lo) or np.isnan(hi):
        raise DTypeError(f"{source.dtype} values include NaN, which {target} cannot hold; clamp them (--clamp, NaN -> 0)")
    if lo < limits[0] or hi > limits[1]:
        raise DTypeError(
            f"values {lo}..{hi} of {source.dtype} do not fit {target} ({limits[0]}..{limits[1]}); "
            "clamp them (--clamp) or choose a wider type"
        )


def convert_into(source: Array, out: Array, *, mode: str = "cast") -> Array:
    """Write ``source`` (broadcast onto ``out``'s shape) into ``out``, converting to ``out.dtype``.

    ``mode`` says what happens to values the target type cannot hold: 'cast' converts like C and
    NumPy's ``astype`` (complex to real keeps the real part; out-of-range float to integer is
    undefined); 'clamp' clamps to the target's range, NaN becoming 0 for integer targets (float
    targets keep NaN; complex targets are not clamped); 'checked' raises DTypeError naming the
    values and the range, and refuses complex to real. Returns ``out``.
    """
    if mode not in CONVERSION_MODES:
        raise ValueError(f"conversion mode {mode!r} is not one of {CONVERSION_MODES}")
    target = out.dtype
    if target == source.dtype:
        launch(BUILTIN_OPS["identity"], [source], [out], raw=True)
        return out
    if dtypes.element_shape_of(target) or dtypes.element_shape_of(source.dtype):
        raise DTypeError(f"conversion between scalar element types only; {source.dtype} to {target} is not supported")
    if target.kind == "b":
        launch(BUILTIN_OPS["nonzero"], [source], [out])
        return out
    if mode == "checked":
        _check_range(source, target)
    bounds = _clamp_bounds(source.dtype, target) if mode == "clamp" else None
    if bounds is not None:
        op = BUILTIN_OPS["clamp_nan_to_zero" if target.kind in "iu" else "clamp_keep_nan"]
        launch(op, [source, *bounds], [out])
    elif source.dtype.kind == "c" and target.kind != "c":
        launch(BUILTIN_OPS["real_part"], [source], [out])
    elif target == np.float16 and source.dtype.kind == "f" and out.device == "cpu":
        launch(BUILTIN_OPS["half_bits"], [source], [half_bits(out)])  # one pass, no float32 copy
    elif source.dtype == np.float16 and target == FLOAT16_COMPUTE and out.device == "cpu":
        launch(BUILTIN_OPS["half_value"], [half_bits(source)], [out])
    else:
        launch(BUILTIN_OPS["identity"], [source], [out])
    return out


def astype(array: Array, dtype, *, clamp: bool = False) -> Array:
    """A new array of element type ``dtype`` (same layout order as ``array`` when packed).

    Without ``clamp``, a C-style cast like NumPy's ``astype``; with ``clamp=True``, values are
    clamped to the target's range (see :func:`convert_into`).
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

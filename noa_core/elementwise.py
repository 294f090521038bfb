"""Element-wise operations: validate operands, broadcast, plan the order, pick the back-end, launch.

:func:`ewise` is the general entry; :func:`copy`, :func:`permute_copy`, :func:`astype`,
:func:`fill` and the arithmetic operators of :class:`~noa_core.array.Array` are built on it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from numbers import Number

import numpy as np

from noa_core import dtypes, layout
from noa_core.array import Array, empty, resolve_copy_order
from noa_core.errors import DeviceError, DTypeError, OverlapError, ReadOnlyError, ShapeError, StrideError
from noa_core.kernels import BUILTIN_OPS
from noa_core.kernels import cpu as cpu_kernels

Operand = Array | Number | np.generic

# Python's operators map to the built-in element operators (whose kernels are cached on disk).
_OPERATOR_ALIASES: dict[Callable, str] = {
    operator.add: "add", operator.sub: "subtract", operator.mul: "multiply", operator.truediv: "divide",
    operator.neg: "negate",
}


def backend(device: str):
    """The kernel module of ``device``: :mod:`noa_core.kernels.cpu` or :mod:`noa_core.kernels.cuda`."""
    if device == "cpu":
        return cpu_kernels
    from noa_core import devices

    devices.require_cuda()
    from noa_core.kernels import cuda as cuda_kernels

    return cuda_kernels


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
    return op


def common_device(arrays: Sequence[Array]) -> str:
    """The device every array lives on; DeviceError naming both devices when they differ."""
    device = arrays[0].device
    for a in arrays[1:]:
        if a.device != device:
            raise DeviceError(f"operands live on different devices: {device} and {a.device}; move them with .to()")
    return device


def _address(array: Array) -> int:
    """Address in bytes of element [0,0,0,0] (for overlap checks across distinct buffer objects)."""
    buf = array.buffer
    interface = getattr(buf, "__cuda_array_interface__", None) if array.device == "cuda" else None
    base = interface["data"][0] if interface else buf.__array_interface__["data"][0]
    return base + array.offset * array.itemsize


def _check_outputs(outputs: Sequence[Array]) -> None:
    shape = outputs[0].shape
    for out in outputs:
        if not isinstance(out, Array):
            raise TypeError(f"outputs must be Arrays, got {type(out).__name__}")
        if out.shape != shape:
            raise ShapeError(f"outputs must share one shape, got {shape} and {out.shape}")
        if layout.is_broadcast(out.shape, out.strides):
            raise StrideError(
                f"output of shape {out.shape} with strides {out.strides} has a broadcast (stride-0) dimension; "
                "writing through it would race"
            )
        if not out.writable:
            raise ReadOnlyError(f"output of shape {out.shape} is read-only")


def _check_overlap(inputs: Sequence[tuple[Array, tuple]], outputs: Sequence[Array]) -> None:
    """Refuse outputs overlapping an input other than element-for-element, or another output."""
    def byte_layout(a: Array, strides) -> tuple:
        return _address(a), tuple(s * a.itemsize for s in strides)

    shape = outputs[0].shape
    for i, out in enumerate(outputs):
        o_addr, o_strides = byte_layout(out, out.strides)
        for inp, strides in inputs:
            i_addr, i_strides = byte_layout(inp, strides)
            if not layout.may_overlap(o_addr, shape, o_strides, i_addr, shape, i_strides, max(out.itemsize, inp.itemsize)):
                continue
            if inp.itemsize == out.itemsize and layout.same_elements(o_addr, o_strides, i_addr, i_strides, shape):
                continue  # in place: each element is read, then written, by the same iteration
            raise OverlapError(
                f"output (shape {out.shape}, strides {out.strides}) overlaps an input (shape {inp.shape}, "
                f"strides {inp.strides}) other than element-for-element; write to a new array"
            )
        for other in outputs[i + 1:]:
            a_addr, a_strides = byte_layout(other, other.strides)
            if layout.may_overlap(o_addr, shape, o_strides, a_addr, shape, a_strides, max(out.itemsize, other.itemsize)):
                raise OverlapError(f"two outputs of shape {shape} overlap (strides {out.strides} and {other.strides})")


def flat_buffer(array: Array, word: np.dtype | None = None):
    """The buffer as 1-D, starting at element [0,0,0,0], and the number of units per element.

    Units are the scalar type, or ``word`` (an unsigned integer reinterpreting the bytes, used by
    raw copies so that one kernel serves every element type of a given size).
    """
    buf = array.buffer
    unit = word if word is not None else dtypes.base_of(array.dtype)
    k = array.itemsize // unit.itemsize
    if array.device == "cpu":
        if not buf.flags.c_contiguous:
            raise StrideError(f"the buffer of an array of shape {array.shape} is not contiguous")
        flat = buf.reshape(-1)
        if word is not None:
            flat = flat.view(word)
    else:
        flat = buf.reshape(buf.shape[0] * (buf.size // max(buf.shape[0], 1)))
    return flat[array.offset * k:], k


def _fold_element_run(shape: tuple, strides: list[tuple], k: int) -> list[tuple[list[int], tuple, list[tuple]]]:
    """Express elements of ``k`` packed units as an inner dimension of 4-d launches.

    Returns ``(unit offsets per operand, shape, strides)`` per launch: one launch when the planned
    shape has a free (size-1) outer dimension, else one per index of the outermost dimension.
    """
    scaled = [tuple(s * k for s in st) for st in strides]
    if k == 1:
        return [([0] * len(strides), shape, scaled)]
    if shape[0] == 1:
        merged_shape, merged = layout.merge_dimensions(shape[1:] + (k,), *(st[1:] + (1,) for st in scaled))
        return [([0] * len(strides), merged_shape, list(merged))]
    launches = []
    for i in range(shape[0]):
        for offsets, fshape, fstrides in _fold_element_run((1,) + shape[1:], strides, k):
            launches.append(([o + i * st[0] for o, st in zip(offsets, scaled)], fshape, fstrides))
    return launches


def launch(op: Callable, inputs: Sequence[Operand], outputs: Sequence[Array], *, raw: bool = False) -> None:
    """Validate, broadcast, plan and run ``outputs = op(*inputs)``.

    ``raw`` marks a same-type copy: elements are moved as packed machine words, so any element type
    (vectors, matrices, float16, complex) takes the same kernel.
    """
    outputs = list(outputs)
    if not outputs:
        raise ValueError("ewise needs at least one output")
    _check_outputs(outputs)
    arrays = [x for x in inputs if isinstance(x, Array)]
    for x in inputs:
        if not isinstance(x, (Array, Number, np.generic)):
            raise TypeError(f"inputs must be Arrays or scalars, got {type(x).__name__}")
    device = common_device(arrays + outputs)
    shape = outputs[0].shape
    broadcast = [(a, layout.broadcast_strides(a.shape, a.strides, shape)) for a in arrays]
    _check_overlap(broadcast, outputs)
    if not raw:
        for a in arrays + outputs:
            if dtypes.element_shape_of(a.dtype):
                raise DTypeError(f"element-wise operators take scalar element types, not {a.dtype}; "
                                 "copy, permute_copy and fill accept vectors and matrices")
    if layout.element_count(shape) == 0:
        return
    if device == "cpu" and not raw and any(a.dtype == np.float16 for a in arrays + outputs):
        _launch_via_float32(op, inputs, outputs)
        return

    strides_in = {id(a): st for a, st in broadcast}
    planned_shape, planned = layout.plan_iteration(shape, *(o.strides for o in outputs),
                                                   *(strides_in[id(x)] for x in inputs if isinstance(x, Array)))
    word = np.dtype(f"u{_word_size(outputs[0].itemsize)}") if raw and device == "cpu" else None
    flats = [flat_buffer(o, word) for o in outputs] + [flat_buffer(x, word) for x in inputs if isinstance(x, Array)]
    k = flats[0][1]
    kernels = backend(device)
    n_out = len(outputs)
    for offsets, fshape, fstrides in _fold_element_run(tuple(planned_shape), list(planned), k):
        bufs = [f[o:] if o else f for (f, _), o in zip(flats, offsets)]
        out_bufs, in_bufs = bufs[:n_out], iter(bufs[n_out:])
        in_strides_iter = iter(fstrides[n_out:])
        ins, in_strides = [], []
        for x in inputs:
            is_array = isinstance(x, Array)
            ins.append(next(in_bufs) if is_array else x)
            in_strides.append(next(in_strides_iter) if is_array else None)
        kernels.ewise(op, ins, out_bufs, fshape, in_strides, fstrides[:n_out])


def _word_size(itemsize: int) -> int:
    """The widest machine word (8, 4, 2 or 1 bytes) that divides an element."""
    return next(w for w in (8, 4, 2, 1) if itemsize % w == 0)


def _launch_via_float32(op: Callable, inputs: Sequence[Operand], outputs: Sequence[Array]) -> None:
    """numba has no float16 arithmetic on the CPU: compute in float32 and round with NumPy."""
    from noa_core.array import asarray

    f32 = np.dtype(np.float32)
    def widen(x: Operand) -> Operand:
        if isinstance(x, Array):
            return asarray(x.numpy().astype(f32)) if x.dtype == np.float16 else x
        return np.float32(x) if isinstance(x, np.float16) else x

    ins = [widen(x) for x in inputs]
    temps = [empty(o.shape, f32, resolve_copy_order(o, "K")) if o.dtype == np.float16 else o for o in outputs]
    launch(op, ins, temps)
    for o, t in zip(outputs, temps):
        if t is not o:
            np.copyto(o.numpy(), t.numpy(), casting="unsafe")


# -- public functions ------------------------------------------------------------------------------


def ewise(inputs: Operand | Sequence[Operand], outputs: Array | Sequence[Array], op: str | Callable):
    """Compute ``outputs[idx] = op(*inputs[idx])`` for every index of the outputs' shape.

    ``op`` is a built-in operator ('add', 'subtract', 'multiply', 'divide', 'negate', 'identity',
    ...), a Python operator (``operator.mul``) or a Python function numba can compile; with several
    outputs it returns a tuple. Inputs (Arrays or scalars) are broadcast onto the outputs' shape;
    results are cast to each output's type on store. Outputs must share one shape, be writable,
    have no broadcast dimension and overlap no input other than element-for-element (in place).
    Returns ``outputs``.
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
    src = np.dtype(np.float32) if src == np.float16 else src  # float16 is computed in float32
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
    from noa_core.reduction import max as reduce_max
    from noa_core.reduction import min as reduce_min

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

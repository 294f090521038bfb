"""Running kernels over Arrays: shared by element-wise and reduction code.

Picks the back-end of a device, checks that operands share one device and that outputs can be
written safely (no broadcast dimension, no overlap with an input other than element-for-element),
plans the iteration order and launches; the float16 policy lives here, once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from numbers import Number
from types import ModuleType
from typing import TypeAlias

import numpy as np

from noa_core import kernels
from noa_core.array import Array, devices, dtypes, empty, layout, resolve_copy_order
from noa_core.array.dtypes import FLOAT16_COMPUTE
from noa_core.errors import DeviceError, DTypeError, OverlapError, ReadOnlyError, ShapeError, StrideError
from noa_core.kernels import cpu as cpu_kernels
from noa_core.kernels.operators import BUILTIN_OPS

Operand: TypeAlias = Array | Number | np.generic


def backend(device: str) -> ModuleType:
    """The kernel module of ``device``: :mod:`noa_core.kernels.cpu` or :mod:`noa_core.kernels.cuda`."""
    if device == "cpu":
        return cpu_kernels
    devices.require_cuda()
    return kernels.cuda  # numba-cuda loads only when a GPU is used


def common_device(arrays: Sequence[Array]) -> str:
    """The device every array lives on; DeviceError naming both devices when they differ."""
    device = arrays[0].device
    for a in arrays[1:]:
        if a.device != device:
            raise DeviceError(f"operands live on different devices: {device} and {a.device}; move them with .to()")
    return device


# -- float16 -------------------------------------------------------------------------------------
# numba has no float16 arithmetic on the CPU: there, float16 operands are computed in float32
# (inputs widened with NumPy, results rounded back by NumPy on store). Raw copies move float16 bits
# untouched, and CUDA computes in float16 natively.



def computes_as(dtype: np.dtype, device: str) -> np.dtype:
    """The type that arithmetic on elements of ``dtype`` runs in on ``device``."""
    return FLOAT16_COMPUTE if device == "cpu" and dtype == np.float16 else dtype


HALF_BITS = np.dtype(np.uint16)


def half_bits(array: Array) -> Array:
    """The elements of a float16 array as their uint16 bits (the same memory): what the CPU kernels
    that convert to and from float16 (``half_bits``, ``half_value``) read and write."""
    return Array(array.buffer.view(HALF_BITS), array.offset, array.shape, array.strides, HALF_BITS, array.device)


def widened(operand: Operand) -> Operand:
    """``operand``, or a float32 copy of a float16 array on the CPU or of a float16 scalar
    (scalars go with the arrays of a launch, which decide the device)."""
    if isinstance(operand, Array):
        if operand.device == "cpu" and operand.dtype == np.float16:
            copy = empty(operand.shape, FLOAT16_COMPUTE, resolve_copy_order(operand, "K"))
            launch(BUILTIN_OPS["half_value"], [half_bits(operand)], [copy])
            return copy
        return operand
    return FLOAT16_COMPUTE.type(operand) if isinstance(operand, np.float16) else operand


# -- output checks -------------------------------------------------------------------------------


def _address(array: Array) -> int:
    """Address in bytes of element [0,0,0,0] (for overlap checks across distinct buffer objects)."""
    buf = array.buffer
    interface = getattr(buf, "__cuda_array_interface__", None) if array.device == "cuda" else None
    base = interface["data"][0] if interface else buf.__array_interface__["data"][0]
    return base + array.offset * array.itemsize


def check_outputs(outputs: Sequence[Array]) -> None:
    """Outputs must be Arrays of one shape, writable, without a broadcast (stride-0) dimension."""
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


def check_overlap(inputs: Sequence[tuple[Array, layout.Strides4]], outputs: Sequence[Array]) -> None:
    """Refuse outputs overlapping an input other than element-for-element, or another output.

    ``inputs`` pairs each input with its strides broadcast onto the outputs' shape.
    """
    def byte_layout(a: Array, strides: Sequence[int]) -> tuple[int, tuple[int, ...]]:
        return _address(a), tuple(s * a.itemsize for s in strides)

    shape = outputs[0].shape
    for i, out in enumerate(outputs):
        o_addr, o_strides = byte_layout(out, out.strides)
        for inp, strides in inputs:
            i_addr, i_strides = byte_layout(inp, strides)
            # each span ends with its own last element: a wider output right after a narrower input does not overlap it
            if not layout.may_overlap(o_addr, shape, o_strides, i_addr, shape, i_strides, out.itemsize, inp.itemsize):
                continue
            if inp.itemsize == out.itemsize and layout.same_elements(o_addr, o_strides, i_addr, i_strides, shape):
                continue  # in place: each element is read, then written, by the same iteration
            raise OverlapError(
                f"output (shape {out.shape}, strides {out.strides}) overlaps an input (shape {inp.shape}, "
                f"strides {inp.strides}) other than element-for-element; write to a new array"
            )
        for other in outputs[i + 1:]:
            a_addr, a_strides = byte_layout(other, other.strides)
            if layout.may_overlap(o_addr, shape, o_strides, a_addr, shape, a_strides, out.itemsize, other.itemsize):
                raise OverlapError(f"two outputs of shape {shape} overlap (strides {out.strides} and {other.strides})")


# -- launch --------------------------------------------------------------------------------------


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


def _word_size(itemsize: int) -> int:
    """The widest machine word (8, 4, 2 or 1 bytes) that divides an element."""
    return next(w for w in (8, 4, 2, 1) if itemsize % w == 0)


def launch(op: Callable, inputs: Sequence[Operand], outputs: Sequence[Array], *, raw: bool = False) -> None:
    """Validate, broadcast, plan and run ``outputs = op(*inputs)``.

    ``raw`` marks a same-type copy: elements are moved as packed machine words, so any element type
    (vectors, matrices, float16, complex) takes the same kernel.
    """
    outputs = list(outputs)
    if not outputs:
        raise ValueError("ewise needs at least one output")
    check_outputs(outputs)
    arrays = [x for x in inputs if isinstance(x, Array)]
    for x in inputs:
        if not isinstance(x, (Array, Number, np.generic)):
            raise TypeError(f"inputs must be Arrays or scalars, got {type(x).__name__}")
    device = common_device(arrays + outputs)
    shape = outputs[0].shape
    broadcast = [(a, layout.broadcast_strides(a.shape, a.strides, shape)) for a in arrays]
    check_overlap(broadcast, outputs)
    if not raw:
        for a in arrays + outputs:
            if dtypes.element_shape_of(a.dtype):
                raise DTypeError(f"element-wise operators take scalar element types, not {a.dtype}; "
                                 "copy, permute_copy and fill accept vectors and matrices")
    if layout.element_count(shape) == 0:
        return
    if not raw and any(computes_as(a.dtype, device) != a.dtype for a in arrays + outputs):
        _launch_widened(op, inputs, outputs)
        return

    strides_in = {id(a): st for a, st in broadcast}
    planned_shape, planned = layout.plan_iteration(shape, *(o.strides for o in outputs),
                                                   *(strides_in[id(x)] for x in inputs if isinstance(x, Array)))
    word = np.dtype(f"u{_word_size(outputs[0].itemsize)}") if raw and device == "cpu" else None
    flats = [flat_buffer(o, word) for o in outputs] + [flat_buffer(x, word) for x in inputs if isinstance(x, Array)]
    k = flats[0][1]
    kernels = backend(device)
    n_out = len(outputs)
    for offsets, fshape, fstrides in _fold_element_run(planned_shape, list(planned), k):
        bufs = [f[o:] if o else f for (f, _), o in zip(flats, offsets)]
        out_bufs, in_bufs = bufs[:n_out], iter(bufs[n_out:])
        in_strides_iter = iter(fstrides[n_out:])
        ins, in_strides = [], []
        for x in inputs:
            is_array = isinstance(x, Array)
            ins.append(next(in_bufs) if is_array else x)
            in_strides.append(next(in_strides_iter) if is_array else None)
        if raw and device == "cuda" and tuple(fshape[:3]) == (1, 1, 1) and all(st[3] == 1 for st in fstrides):
            kernels.copy_packed(ins[0], out_bufs[0], int(fshape[3]))  # the driver's copy: no kernel beats it
            continue
        kernels.ewise(op, ins, out_bufs, fshape, in_strides, fstrides[:n_out])


def _launch_widened(op: Callable, inputs: Sequence[Operand], outputs: Sequence[Array]) -> None:
    """Run ``op`` on float32 copies of float16 operands and round into the float16 outputs."""
    temps = [o if computes_as(o.dtype, o.device) == o.dtype
             else empty(o.shape, computes_as(o.dtype, o.device), resolve_copy_order(o, "K")) for o in outputs]
    launch(op, [widened(x) for x in inputs], temps)
    for o, t in zip(outputs, temps):
        if t is not o:
            launch(BUILTIN_OPS["half_bits"], [t], [half_bits(o)])

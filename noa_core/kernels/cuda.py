"""numba-cuda kernels: element-wise, index-wise and reductions, one thread per output index.

Same calling convention as :mod:`noa_core.kernels.cpu` (1-D buffers offset to element 0, planned
shapes and strides), so the front-ends stay back-end agnostic. Kernels use grid-stride loops;
consecutive threads take consecutive innermost indices, so stride-1 operands are coalesced.
Transposes (input and output contiguous along different dimensions) go through a shared-memory
tile instead, so that both the reads and the writes are coalesced.
Kernels are compiled once per process (numba-cuda has no on-disk cache for generated code), each
from its template's source under a ``<noa kernel ...>`` name (see :mod:`noa_core.kernels.sources`).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numba
import numpy as np
from numba import cuda, types

from noa_core.kernels.operators import half_precision, power, power_typer, true_divide, true_divide_typer
from noa_core.kernels.sources import compile_template, operand_variants, transpose_plan

THREADS = 256
# Transpose tiles: TILE x TILE elements per block, read and written by TILE x TILE_ROWS threads.
TILE, TILE_ROWS = 32, 8
MAX_GRID_YZ = 65535  # blocks along the grid's y and z (x allows 2**31 - 1)
MAX_BLOCKS = 4096
# Threads cooperating on one reduced output (each takes every n-th reduced element, coalesced).
# The simulator runs each thread as a Python thread: keep it small there.
REDUCE_THREADS = 64 if numba.config.ENABLE_CUDASIM else 1 << 18
# Partials per output above which they are combined in two steps (the simulator's figure: so that its tests take it).
REDUCE_GROUPED = 16 if numba.config.ENABLE_CUDASIM else 1024


def _half_precision_typer(x):
    """numba-cuda's implementation of :func:`~noa_core.kernels.operators.half_precision`: a cast to float16 from
    double (one rounding), which numba-cuda lowers to the GPU's own conversion."""
    if isinstance(x, (types.Float, types.Integer, types.Boolean)):
        return lambda x: np.float32(np.float16(np.float64(x)))
    return None


if not numba.config.ENABLE_CUDASIM:  # the simulator runs true_divide's, power's and half_precision's Python bodies
    from numba.cuda.extending import overload as cuda_overload

    cuda_overload(true_divide, target="cuda")(true_divide_typer)
    cuda_overload(power, target="cuda")(power_typer)
    cuda_overload(half_precision, target="cuda")(_half_precision_typer)

_LOCK = threading.Lock()
_KERNELS: dict[tuple, Callable] = {}

# A flat index to 4 indices. 64-bit divisions cost dozens of instructions each on a GPU: a contiguous space (the
# planner folds it to (1, 1, 1, n)) skips them.
_DECOMPOSE = """
        if flat:
            i3 = t
            i2 = 0
            i1 = 0
            i0 = 0
        else:
            i3 = t % n3
            r = t // n3
            i2 = r % n2
            r = r // n2
            i1 = r % n1
            i0 = r // n1"""
_FLAT = """
    flat = n0 == 1 and n1 == 1 and n2 == 1"""

_EWISE = """
def {name}({args}, shape, strides):
    n0, n1, n2, n3 = shape""" + _FLAT + """
    for t in range(cuda.grid(1), n0 * n1 * n2 * n3, cuda.gridsize(1)):""" + _DECOMPOSE + """
{body}
"""

_TRANSPOSE = """
def {name}(in0, out0, shape, si, so):
    n0, n1, n2, n3 = shape
    # One column of padding: reading a tile column then hits 32 different banks. A shared array's shape must be
    # constants: numba-cuda types TILE + 1 in a kernel as a run-time int64 (refused on a GPU, not in the simulator).
    tile = cuda.shared.array(shape=(TILE, TILE_PADDED), dtype=tile_type)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    y0 = cuda.blockIdx.y * TILE  # along dim 2, where the input is contiguous
    x0 = cuda.blockIdx.x * TILE  # along dim 3, where the output is contiguous
    for plane in range(cuda.blockIdx.z, n0 * n1, cuda.gridDim.z):
        i1 = plane % n1
        i0 = plane // n1
        bi = i0 * si[0] + i1 * si[1]
        bo = i0 * so[0] + i1 * so[1]
        y = y0 + tx
        # Loops of constant bounds, unrolled, whose addresses step by additions: a thread's four reads are in flight
        # together (a loop over range(ty, TILE, TILE_ROWS) issued them one at a time: a fifth of a copy's bandwidth)
        at = bi + y * si[2] + (x0 + ty) * si[3]
        for j in range(0, TILE, TILE_ROWS):
            if y < n2 and x0 + ty + j < n3:
                tile[ty + j, tx] = op(in0[at])
            at += TILE_ROWS * si[3]
        cuda.syncthreads()
        x = x0 + tx
        at = bo + (y0 + ty) * so[2] + x * so[3]
        for j in range(0, TILE, TILE_ROWS):
            if y0 + ty + j < n2 and x < n3:
                out0[at] = tile[tx, ty + j]
            at += TILE_ROWS * so[2]
        cuda.syncthreads()
"""

_IWISE = """
def {name}(shape{args}):
    n0, n1, n2, n3 = shape""" + _FLAT + """
    for t in range(cuda.grid(1), n0 * n1 * n2 * n3, cuda.gridsize(1)):""" + _DECOMPOSE + """
        op(i0, i1, i2, i3{args})
"""

_REDUCE = """
def {name}({args}, out_shape, kstrides, rshape, rstrides, n_chunks, partials, initial):
    n0, n1, n2, n3 = rshape""" + _FLAT + """
    o1, o2, o3 = out_shape[1], out_shape[2], out_shape[3]
    task = cuda.grid(1)
    if task >= partials.shape[0] * n_chunks:
        return
    o = task // n_chunks
    c = task % n_chunks
    k3 = o % o3
    q = o // o3
    k2 = q % o2
    q = q // o2
    k1 = q % o1
    k0 = q // o1
    acc = initial
    for t in range(c, n0 * n1 * n2 * n3, n_chunks):""" + _DECOMPOSE + """
{body}
    partials[o, c] = acc
"""

_REDUCE_PARTIAL = """
def {name}(partials, grouped):
    groups = grouped.shape[1]
    task = cuda.grid(1)
    if task < grouped.shape[0] * groups:
        o = task // groups
        g = task % groups
        acc = partials[o, g]
        for c in range(g + groups, partials.shape[1], groups):
            acc = combine(acc, partials[o, c])
        grouped[o, g] = acc
"""

_REDUCE_FINAL = """
def {name}(partials, result):
    o = cuda.grid(1)
    if o < partials.shape[0]:
        acc = partials[o, 0]
        for c in range(1, partials.shape[1]):
            acc = combine(acc, partials[o, c])
        result[o] = final(acc)
"""


def _offset(strides: str, j: int, index: str = "i") -> str:
    return " + ".join(f"{index}{d} * {strides}[{4 * j + d}]" for d in range(4))


def _ewise_source(name: str, kinds: str, n_out: int) -> str:
    ins = [f"in{k}" for k in range(len(kinds))]
    outs = [f"out{k}" for k in range(n_out)]
    arrays = [x for x, kind in zip(ins, kinds) if kind == "a"] + outs
    loads = ", ".join(f"{x}[{_offset('strides', arrays.index(x))}]" if kind == "a" else x
                      for x, kind in zip(ins, kinds))
    if n_out == 1:
        body = [f"out0[{_offset('strides', arrays.index('out0'))}] = op({loads})"]
    else:
        body = [f"res = op({loads})"] + [f"{o}[{_offset('strides', arrays.index(o))}] = res[{k}]"
                                         for k, o in enumerate(outs)]
    return _EWISE.format(name=name, args=", ".join(ins + outs), body="\n".join(" " * 8 + line for line in body))


def _reduce_source(name: str, n_in: int) -> str:
    ins = [f"in{k}" for k in range(n_in)]
    loads = ", ".join(f"{x}[{_offset('kstrides', j, 'k')} + {_offset('rstrides', j)}]" for j, x in enumerate(ins))
    return _REDUCE.format(name=name, args=", ".join(ins), body=f"        acc = combine(acc, pre({loads}))")


# Every template, by kernel kind: ``render(name, variant)`` gives the source of the kernel ``name``
# for ``variant`` (as in the CPU back-end; a transpose's variant is its tile's type, which the
# source does not depend on); template_variants lists them.
TEMPLATES: dict[str, Callable[[str, str], str]] = {
    "ewise": lambda name, variant: _ewise_source(name, variant.split("_")[0], int(variant.split("_")[1])),
    "transpose": lambda name, variant: _TRANSPOSE.format(name=name),
    "iwise": lambda name, variant: _IWISE.format(name=name, args="".join(f", a{k}" for k in range(int(variant)))),
    "reduce": lambda name, variant: _reduce_source(name, int(variant)),
    "reduce_partial": lambda name, variant: _REDUCE_PARTIAL.format(name=name),
    "reduce_final": lambda name, variant: _REDUCE_FINAL.format(name=name),
}


def template_variants(kind: str, max_operands: int = 3) -> list[str]:
    """The variants of :data:`TEMPLATES` ``kind`` (see :func:`noa_core.kernels.sources.operand_variants`)."""
    return {**operand_variants(max_operands), "transpose": ["float32", "complex128"], "reduce_partial": ["1"]}[kind]


def _device_function(op: Callable) -> Callable:
    py_func = getattr(op, "py_func", op)  # a CPU dispatcher's Python function compiles for CUDA too
    return cuda.jit(device=True)(py_func)


def _kernel(kind: str, variant: str, ops: dict[str, Callable], constants: dict | None = None) -> Any:
    key = (kind, variant, tuple(ops.items()))
    with _LOCK:
        kernel = _KERNELS.get(key)
        if kernel is None:
            name = f"cuda_{kind}_{variant}_{len(_KERNELS)}"
            namespace = {"cuda": cuda, **(constants or {})}
            namespace.update({k: _device_function(f) for k, f in ops.items()})
            kernel = cuda.jit(compile_template(TEMPLATES[kind](name, variant), name, __name__, namespace))
            _KERNELS[key] = kernel
    return kernel


def forget(op: Callable) -> None:
    """Drop the kernels built around ``op`` (an evicted user function), so that their memory can go."""
    with _LOCK:
        for key in [key for key in _KERNELS if any(f is op for _, f in key[2])]:
            del _KERNELS[key]


def _grid(count: int) -> tuple[int, int]:
    threads = max(1, min(THREADS, count))
    return min(MAX_BLOCKS, math.ceil(count / threads)), threads


def _flat_strides(strides: Sequence[Sequence[int]]) -> tuple[int, ...]:
    return tuple(int(s) for st in strides for s in st)


def ewise(op: Callable, inputs: Sequence, outputs: Sequence, shape: Sequence[int],
          in_strides: Sequence[Sequence[int] | None], out_strides: Sequence[Sequence[int]]) -> None:
    """Run ``outputs[...] = op(*inputs)`` over a planned, non-empty 4-d iteration space."""
    if len(inputs) == 1 and in_strides[0] is not None and len(outputs) == 1 and outputs[0].dtype.kind in "iufc":
        plan = transpose_plan(shape, in_strides[0], out_strides[0], TILE_ROWS)
        if plan is not None and plan[0][2] <= TILE * MAX_GRID_YZ:
            _transpose(op, inputs[0], outputs[0], *plan)
            return
    kinds = "".join("s" if st is None else "a" for st in in_strides)
    strides = _flat_strides([st for st in in_strides if st is not None] + list(out_strides))
    variant = f"{kinds}_{len(outputs)}"
    kernel = _kernel("ewise", variant, {"op": op})
    blocks, threads = _grid(int(np.prod(shape)))
    kernel[blocks, threads](*inputs, *outputs, tuple(int(n) for n in shape), strides)
    cuda.synchronize()


def copy_packed(source, out, count: int) -> None:
    """``out[:count] = source[:count]`` between device buffers of one element type: the driver's device-to-device
    copy (twice the speed of an element-wise kernel on an H200)."""
    out[:count].copy_to_device(source[:count])
    cuda.synchronize()


def _transpose(op: Callable, source, out, shape: tuple[int, ...], si: tuple[int, ...], so: tuple[int, ...]) -> None:
    """The tiled transpose: ``shape``, ``si``, ``so`` as planned by :func:`transpose_plan`."""
    tile_type = numba.from_dtype(out.dtype)
    constants = {"TILE": TILE, "TILE_PADDED": TILE + 1, "TILE_ROWS": TILE_ROWS, "tile_type": tile_type}
    kernel = _kernel("transpose", str(tile_type), {"op": op}, constants)
    n0, n1, n2, n3 = shape
    grid = (math.ceil(n3 / TILE), math.ceil(n2 / TILE), min(n0 * n1, MAX_GRID_YZ))
    kernel[grid, (TILE, TILE_ROWS)](source, out, shape, si, so)
    cuda.synchronize()


def iwise(op: Callable, shape: Sequence[int], args: Sequence) -> None:
    """Call ``op(b, d, h, w, *args)`` for every index of ``shape``, one thread per index."""
    kernel = _kernel("iwise", str(len(args)), {"op": op})
    blocks, threads = _grid(int(np.prod(shape)))
    kernel[blocks, threads](tuple(int(n) for n in shape), *args)
    cuda.synchronize()


def reduce(pre: Callable, combine: Callable, final: Callable, inputs: Sequence, out_shape: Sequence[int],
           kstrides: Sequence[Sequence[int]], rshape: Sequence[int], rstrides: Sequence[Sequence[int]],
           initial, result) -> None:
    """Reduce ``pre(*inputs)`` over ``rshape`` for each output index (see the CPU back-end)."""
    n_out = int(np.prod(out_shape))
    n_red = int(np.prod(rshape))
    n_chunks = max(1, min(n_red, REDUCE_THREADS // n_out))
    partials = cuda.device_array((n_out, n_chunks), dtype=np.asarray(initial).dtype)
    kernel = _kernel("reduce", str(len(inputs)), {"pre": pre, "combine": combine})
    # No grid-stride loop here: one thread per (output, chunk) task, so the grid covers them all.
    threads = max(1, min(THREADS, n_out * n_chunks))
    blocks = math.ceil(n_out * n_chunks / threads)
    kernel[blocks, threads](*inputs, tuple(int(n) for n in out_shape), _flat_strides(kstrides),
                            tuple(int(n) for n in rshape), _flat_strides(rstrides), n_chunks, partials, initial)
    if n_chunks > REDUCE_GROUPED:  # one thread per output finishes: give it sqrt(n_chunks) partials, not all
        groups = math.isqrt(n_chunks - 1) + 1
        grouped = cuda.device_array((n_out, groups), dtype=partials.dtype)
        threads = max(1, min(THREADS, n_out * groups))
        _kernel("reduce_partial", "1", {"combine": combine})[math.ceil(n_out * groups / threads), threads](
            partials, grouped)
        partials = grouped
    finish = _kernel("reduce_final", "1", {"combine": combine, "final": final})
    threads = max(1, min(THREADS, n_out))
    finish[math.ceil(n_out / threads), threads](partials, result)
    cuda.synchronize()


def view4d(array):
    """A 4-d device-array view of an Array (element strides converted to bytes)."""
    shape = array.shape + array.element_shape
    itemsize = array.itemsize
    inner = array.buffer.strides[1:]
    strides = tuple(s * itemsize for s in array.strides) + tuple(inner)
    if numba.config.ENABLE_CUDASIM:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
        from numpy.lib.stride_tricks import as_strided

        host = array.buffer._ary[array.offset:]
        return FakeCUDAArray(as_strided(host, shape=shape, strides=strides))
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    return DeviceNDArray(shape, strides, array.buffer.dtype,
                         gpu_data=array.buffer.gpu_data.view(array.offset * itemsize))

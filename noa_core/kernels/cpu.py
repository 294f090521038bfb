"""numba CPU kernels: element-wise (general and cache-blocked transpose), index-wise, reductions.

Every kernel is generated from one source template per kind and compiled once, serial, over the tasks of one
part of a flattened task index (for load balance whatever the shape); :func:`noa_core.kernels.runtime.launch`
runs the parts on several threads, or as one part on the calling thread for small arrays, where waking threads
costs more than the work. Callers hand
over 1-D buffers already offset to element [0,0,0,0], and shapes/strides already planned by
:func:`noa_core.array.layout.plan_iteration` (innermost dimension last, usually stride 1).

Kernels built for :data:`noa_core.kernels.operators.BUILTIN_OPS` or for expressions of
:mod:`noa_core.compute.expr` are cached on disk (``cache=True``); kernels built around any other user function
are compiled once per process and kept in memory.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.core.registry import CPUDispatcher
from numba.extending import intrinsic, register_jitable

from noa_core.array import scalar_ops
from noa_core.array.scalar_ops import CHUNK, LANES
from noa_core.kernels import runtime
from noa_core.kernels.operators import BUILTIN_OPS
from noa_core.kernels.runtime import SERIAL_THRESHOLD, compile_kernel, launch, read_only
from noa_core.kernels.sources import operand_variants, transpose_plan

# Elements per parallel task along the innermost dimension: large enough to amortise the task
# bookkeeping, small enough that a single long contiguous row still spreads over every thread.
# Transpose tile edge: a TILE x TILE buffer of the output type stays in L1 (16 KiB for float32).
TILE_SMALL, TILE_LARGE = 64, 32
# Edge of the blocks full tiles are written in (a multiple-of-it tile edge is required).
MICRO = 8
assert MICRO & (MICRO - 1) == 0, "the register transpose needs a power-of-two block edge"
# Below this edge length a dimension is too short for tiles to pay off.
MIN_TILE_EDGE = 8

# numba dates cache entries by this module's file only; the operators live in kernels/__init__.py and
# noa_core/scalar_ops.py. Naming cached kernels after a digest of those files retires their entries when an
# operator changes.
_OPS_DIGEST = hashlib.sha1(Path(__file__).with_name("__init__.py").read_bytes()
                           + Path(scalar_ops.__file__).read_bytes()).hexdigest()[:8]

# The NaN-propagating extrema, compiled, for the module's own jitted helpers.
_minimum, _maximum = numba.njit(BUILTIN_OPS["minimum"]), numba.njit(BUILTIN_OPS["maximum"])


@intrinsic
def _transpose_block(typingctx, src, src_start, src_stride, dst, dst_start, dst_stride):
    """``dst[dst_start + j*dst_stride + i] = src[src_start + i*src_stride + j]`` for i, j < MICRO.

    MICRO vector loads, log2(MICRO) rounds of shuffles and MICRO vector stores. LLVM turns the
    scalar version of this loop into 2 * MICRO**2 scalar moves; the shuffles it maps to the
    target's own (unpack, blend, permute) instructions. Elements move as machine words of at most
    64 bits (a 16-byte element as two), so any element type takes the same code. Accesses assume
    no alignment (NumPy aligns a complex128 to 8 bytes only) and are not bounds-checked, even
    under NUMBA_BOUNDSCHECK: callers stay in bounds.
    """
    sig = types.none(src, src_start, src_stride, dst, dst_start, dst_stride)

    def codegen(context, builder, signature, args):
        src_arr, src_off, src_step, dst_arr, dst_off, dst_step = args
        item_bits = context.get_abi_sizeof(context.get_data_type(signature.args[3].dtype)) * 8
        word_bits = min(item_bits, 64)
        words = item_bits // word_bits  # words per element
        word, vector = ir.IntType(word_bits), ir.VectorType(ir.IntType(word_bits), MICRO * words)

        def rows(array, array_type, offset, step):
            data = cgutils.create_struct_proxy(array_type)(context, builder, value=array).data
            base = builder.bitcast(data, word.as_pointer())
            starts = [builder.add(offset, builder.mul(step, ir.Constant(step.type, i))) for i in range(MICRO)]
            return [builder.bitcast(builder.gep(base, [builder.mul(e, ir.Constant(e.type, words))]),
                                    vector.as_pointer())
                    for e in starts]

        def mask(elements):
            """A shuffle mask over element indices of the pair (a, b), spelled in words."""
            return ir.Constant(ir.VectorType(ir.IntType(32), MICRO * words),
                               [e * words + w for e in elements for w in range(words)])

        block = [builder.load(p, align=1) for p in rows(src_arr, signature.args[0], src_off, src_step)]
        # Round d swaps bit d of the row index with bit d of the column index between rows i and
        # i + d; after every round (MICRO is a power of two) the block is transposed.
        d = 1
        while d < MICRO:
            low = mask([c if c & d == 0 else MICRO + c - d for c in range(MICRO)])
            high = mask([c + d if c & d == 0 else MICRO + c for c in range(MICRO)])
            for i in range(MICRO):
                if i & d == 0:
                    a, b = block[i], block[i + d]
                    block[i] = builder.shuffle_vector(a, b, low)
                    block[i + d] = builder.shuffle_vector(a, b, high)
            d *= 2
        for value, p in zip(block, rows(dst_arr, signature.args[3], dst_off, dst_step)):
            builder.store(value, p, align=1)
        return context.get_dummy_value()

    return sig, codegen


_LOCK = threading.Lock()
_KERNELS: dict[tuple, Callable] = {}
_BUILT = [0]  # kernels built by this process (forgotten ones included)


def built_count() -> int:
    """How many kernels this process has built (each compiles at its first call per argument types)."""
    return _BUILT[0]

# -- templates ---------------------------------------------------------------------------------

# The task loop of element-wise kernels: one task per run of at most ``chunk`` elements of a row,
# so that a long row still spreads over every thread. Format fields: hoist (before the loop).
_CHUNKED_TASKS = """
    n0, n1, n2, n3 = shape
    n_chunks = (n3 + chunk - 1) // chunk
{hoist}
    for task in parts_of(n0 * n1 * n2 * n_chunks):
        c = task % n_chunks
        r = task // n_chunks
        i2 = r % n2
        r = r // n2
        i1 = r % n1
        i0 = r // n1
        start = c * chunk
        m = min(n3 - start, chunk)"""

_EWISE = """
def {name}({args}, shape, strides, unit, chunk, control):""" + _CHUNKED_TASKS + """
{bases}
        if unit:
{views}
            for i in range(m):
{unit_body}
        else:
            for i in range(m):
{strided_body}
"""

_TRANSPOSE = """
def {name}(in0, out0, shape, si, so, tile, control):
    n0, n1, n2, n3 = shape
    t2 = (n2 + tile - 1) // tile
    t3 = (n3 + tile - 1) // tile
    s3 = si[3]
    s2 = so[2]
    buf = np.empty((tile, tile), dtype=out0.dtype)  # one per thread: an L1-resident tile, reused
    for task in parts_of(n0 * n1 * t2 * t3):
        b = task % t3
        r = task // t3
        a = r % t2
        r = r // t2
        i1 = r % n1
        i0 = r // n1
        y0 = a * tile
        x0 = b * tile
        ny = min(tile, n2 - y0)
        nx = min(tile, n3 - x0)
        bi = i0 * si[0] + i1 * si[1] + y0 + x0 * s3
        bo = i0 * so[0] + i1 * so[1] + y0 * s2 + x0
        # Read whole input runs (contiguous along dim 2) into an L1-resident tile, then write
        # whole output runs (contiguous along dim 3): both memory streams stay sequential and no
        # cache line is evicted before it is used, whatever the power-of-two row lengths.
        for x in range(nx):
            src = in0[bi + x * s3:bi + x * s3 + ny]
            row = buf[x]
            for y in range(ny):
                row[y] = op(src[y])
        if ny == tile and nx == tile:
            # Full tiles are written in {micro}x{micro} blocks, each transposed in vector registers.
            flat = buf.reshape(tile * tile)
            for yy in range(0, tile, {micro}):
                for xx in range(0, tile, {micro}):
                    transpose_block(flat, xx * tile + yy, tile, out0, bo + yy * s2 + xx, s2)
        else:
            for y in range(ny):
                dst = out0[bo + y * s2:bo + y * s2 + nx]
                for x in range(nx):
                    dst[x] = buf[x, y]
"""

_IWISE = """
def {name}(shape{args}, control):
    n0, n1, n2, n3 = shape
    for task in parts_of(n0 * n1 * n2):
        i2 = task % n2
        r = task // n2
        i1 = r % n1
        i0 = r // n1
        for i3 in range(n3):
            op(i0, i1, i2, i3{args})
"""

_REDUCE = """
def {name}({args}, out_shape, kstrides, rshape, rstrides, n_rc, n_ic, unit, partials, initial, control):
    o1, o2, o3 = out_shape[1], out_shape[2], out_shape[3]
    r0, r1, r2, r3 = rshape
    rows = r0 * r1 * r2
    rows_per = (rows + n_rc - 1) // n_rc
    inner_per = (r3 + n_ic - 1) // n_ic
    n_chunks = n_rc * n_ic
{hoist}
    for task in parts_of(partials.shape[0] * n_chunks):
        o = task // n_chunks
        c = task % n_chunks
        rc = c // n_ic
        ic = c % n_ic
        k3 = o % o3
        t = o // o3
        k2 = t % o2
        t = t // o2
        k1 = t % o1
        k0 = t // o1
        start = ic * inner_per
        m = min(r3 - start, inner_per)
        acc = initial
        for row in range(rc * rows_per, min(rows, (rc + 1) * rows_per)):
            j2 = row % r2
            t = row // r2
            j1 = t % r1
            j0 = t // r1
{bases}
            if unit:
{views}
                # A local accumulator per run: with reassociation allowed (combine must be
                # associative and commutative) LLVM splits it over SIMD lanes.
                run = initial
                for i in range(m):
                    run = combine(run, pre({v0}))
                acc = combine(acc, run)
            else:
                for i in range(m):
                    acc = combine(acc, pre({strided}))
        partials[o, c] = acc
"""

_REDUCE_FINAL = """
def {name}(partials, result, control):
    for o in parts_of(partials.shape[0]):
        acc = partials[o, 0]
        for c in range(1, partials.shape[1]):
            acc = combine(acc, partials[o, c])
        result[o] = final(acc)
"""


def _indent(lines: Sequence[str], depth: int) -> str:
    return "\n".join(" " * (4 * depth) + line for line in lines)


def _ewise_source(name: str, kinds: str, n_out: int) -> str:
    """Source of an element-wise kernel; ``kinds`` has 'a' (array) or 's' (scalar) per input."""
    ins = [f"in{k}" for k in range(len(kinds))]
    outs = [f"out{k}" for k in range(n_out)]
    arrays = [x for x, kind in zip(ins, kinds) if kind == "a"] + outs  # order of ``strides``
    # Strides arrive as an (operands, 4) array; numba's parfors cannot capture nested tuples.
    hoist = [f"s{j}_{d} = strides[{j}, {d}]" for j in range(len(arrays)) for d in range(4)]
    bases = [f"b_{x} = i0 * s{j}_0 + i1 * s{j}_1 + i2 * s{j}_2 + start * s{j}_3" for j, x in enumerate(arrays)]
    views = [f"v_{x} = {x}[b_{x}:b_{x} + m]" for x in arrays]
    unit_args = ", ".join(f"v_{x}[i]" if kind == "a" else x for x, kind in zip(ins, kinds))
    strided_args = ", ".join(f"{x}[b_{x} + i * s{arrays.index(x)}_3]" if kind == "a" else x
                             for x, kind in zip(ins, kinds))

    def store(prefix: Callable[[str], str], call: str) -> list[str]:
        if n_out == 1:
            return [f"{prefix('out0')} = op({call})"]
        return [f"res = op({call})"] + [f"{prefix(o)} = res[{k}]" for k, o in enumerate(outs)]

    unit_body = store(lambda o: f"v_{o}[i]", unit_args)
    strided_body = store(lambda o: f"{o}[b_{o} + i * s{arrays.index(o)}_3]", strided_args)
    return _EWISE.format(name=name, args=", ".join(ins + outs), hoist=_indent(hoist, 1), bases=_indent(bases, 2),
                         views=_indent(views, 3), unit_body=_indent(unit_body, 4),
                         strided_body=_indent(strided_body, 4))


def _reduce_source(name: str, n_in: int) -> str:
    ins = [f"in{k}" for k in range(n_in)]
    hoist = [f"{kind}{j}_{d} = {kind}strides[{j}, {d}]" for kind in "kr" for j in range(n_in) for d in range(4)]
    bases = [f"b_{x} = (k0 * k{j}_0 + k1 * k{j}_1 + k2 * k{j}_2 + k3 * k{j}_3"
             f" + j0 * r{j}_0 + j1 * r{j}_1 + j2 * r{j}_2 + start * r{j}_3)" for j, x in enumerate(ins)]
    views = [f"v_{x} = {x}[b_{x}:b_{x} + m]" for x in ins]

    strided = ", ".join(f"{x}[b_{x} + i * r{j}_3]" for j, x in enumerate(ins))
    return _REDUCE.format(name=name, args=", ".join(ins), hoist=_indent(hoist, 1), bases=_indent(bases, 3),
                          views=_indent(views, 4), v0=", ".join(f"v_{x}[i]" for x in ins), strided=strided)


# Every template, by kernel kind: ``render(name, variant)`` gives the source of the kernel ``name``
# for ``variant`` (the operand layout, spelled as in the kernel's name); template_variants lists them.
TEMPLATES: dict[str, Callable[[str, str], str]] = {
    "ewise": lambda name, variant: _ewise_source(name, variant.split("_")[0], int(variant.split("_")[1])),
    "transpose": lambda name, variant: _TRANSPOSE.format(name=name, micro=MICRO),
    "iwise": lambda name, variant: _IWISE.format(name=name, args="".join(f", a{k}" for k in range(int(variant)))),
    "reduce": lambda name, variant: _reduce_source(name, int(variant)),
    "reduce_final": lambda name, variant: _REDUCE_FINAL.format(name=name),
    "moments": lambda name, variant: _moments_source(name, variant == "c"),
}


def template_variants(kind: str, max_operands: int = 3) -> list[str]:
    """The variants of :data:`TEMPLATES` ``kind`` (see :func:`noa_core.kernels.sources.operand_variants`)."""
    return {**operand_variants(max_operands), "transpose": ["11"], "moments": ["r", "c"]}[kind]


# -- compilation -------------------------------------------------------------------------------


def _as_dispatcher(op: Callable) -> CPUDispatcher:
    return op if isinstance(op, CPUDispatcher) else numba.njit(op)


def _op_name(op: Callable) -> str | None:
    """A stable name for ``op``, under which its kernels may be cached on disk: a built-in's name,
    or the tag noa_core.compute.expr gives a compiled expression; None for any other user function."""
    name = getattr(op, "__name__", "")
    if BUILTIN_OPS.get(name) is op:
        return name
    return getattr(op, "noa_cache_tag", None)


def _kernel(kind: str, variant: str, ops: dict[str, Callable], fastmath: set[str] | bool = False,
            helpers: dict[str, Callable] | None = None) -> Callable:
    """Compile (once) the kernel ``kind`` (:data:`TEMPLATES`) for ``variant`` around ``ops`` (names in
    the template), over the tasks of one part; :func:`noa_core.kernels.runtime.launch` runs the parts.

    ``helpers`` are this module's own jitted functions that the template calls: unlike ops they
    do not decide whether the kernel may be cached (an edit of this file retires its cache anyway).
    """
    names = [_op_name(f) for f in ops.values()]
    cacheable = all(n is not None for n in names)
    key = (kind, variant, tuple(ops.items()))
    kernel = _KERNELS.get(key)
    if kernel is not None:
        return kernel
    with _LOCK:
        kernel = _KERNELS.get(key)
        if kernel is None:
            tag = f"{'_'.join(map(str, names))}_{_OPS_DIGEST}" if cacheable else f"user{len(_KERNELS)}"
            name = f"{kind}_{tag}_{variant}"
            namespace = {"np": np, **(helpers or {})}
            namespace.update({k: _as_dispatcher(f) for k, f in ops.items()})
            kernel = compile_kernel(TEMPLATES[kind](name, variant), name, __name__, namespace, cacheable,
                                    error_model="numpy", fastmath=fastmath)
            _KERNELS[key] = kernel
            _BUILT[0] += 1
    return kernel


def forget(op: Callable) -> None:
    """Drop the kernels built around ``op`` (an evicted expression), so that their memory can go."""
    with _LOCK:
        for key in [key for key in _KERNELS if any(f is op for _, f in key[2])]:
            del _KERNELS[key]


def _parallel(count: int) -> bool:
    return count >= SERIAL_THRESHOLD and numba.get_num_threads() > 1



# -- entry points ------------------------------------------------------------------------------


def ewise(op: Callable, inputs: Sequence, outputs: Sequence[np.ndarray], shape: Sequence[int],
          in_strides: Sequence[Sequence[int] | None], out_strides: Sequence[Sequence[int]]) -> None:
    """Run ``outputs[...] = op(*inputs)`` over a planned, non-empty 4-d iteration space.

    ``inputs`` are 1-D arrays (offset to element 0) or scalars (``in_strides`` None for those);
    ``outputs`` are 1-D arrays. The innermost planned dimension should be the output's fastest.
    """
    count = int(np.prod(shape))
    parallel = _parallel(count)
    shape = tuple(int(n) for n in shape)
    inputs = [read_only(x) for x in inputs]
    arrays_in = [isinstance(x, np.ndarray) for x in inputs]
    first_strides = in_strides[0]
    if len(inputs) == 1 and arrays_in[0] and first_strides is not None and len(outputs) == 1:
        plan = transpose_plan(shape, first_strides, out_strides[0], MIN_TILE_EDGE)
        if plan is not None:
            tile = TILE_SMALL if outputs[0].itemsize <= 4 else TILE_LARGE
            kernel = _kernel("transpose", "11", {"op": op}, helpers={"transpose_block": _transpose_block})
            launch(kernel, parallel, inputs[0], outputs[0], *plan, tile)
            return
    kinds = "".join("a" if a else "s" for a in arrays_in)
    strides = np.array([st for st, a in zip(in_strides, arrays_in) if a] + list(out_strides), dtype=np.int64)
    unit = bool((strides[:, 3] == 1).all()) or shape[3] == 1
    chunk = CHUNK if parallel else max(shape[3], 1)
    variant = f"{kinds}_{len(outputs)}"
    kernel = _kernel("ewise", variant, {"op": op})
    launch(kernel, parallel, *inputs, *outputs, shape, strides, unit, chunk)


def iwise(op: Callable, shape: Sequence[int], args: Sequence) -> None:
    """Call ``op(b, d, h, w, *args)`` for every index of ``shape`` (rightmost order per thread)."""
    shape = tuple(int(n) for n in shape)
    kernel = _kernel("iwise", str(len(args)), {"op": op})
    launch(kernel, _parallel(int(np.prod(shape))), shape, *args)


def reduce(pre: Callable, combine: Callable, final: Callable, inputs: Sequence[np.ndarray],
           out_shape: Sequence[int], kstrides: Sequence[Sequence[int]], rshape: Sequence[int],
           rstrides: Sequence[Sequence[int]], initial, result: np.ndarray) -> None:
    """Reduce ``pre(*inputs)`` over ``rshape`` for each output index of ``out_shape``.

    ``kstrides`` address an output index in each input, ``rstrides`` the reduced (planned)
    dimensions; ``result`` is a C-ordered 1-D array of ``prod(out_shape)`` elements.
    """
    n_out = int(np.prod(out_shape))
    n_red = int(np.prod(rshape))
    parallel = _parallel(n_out * n_red)
    n_rc = n_ic = 1
    if parallel and n_out < 4 * numba.get_num_threads():
        # Few outputs: split each reduction into chunks so that every thread gets work.
        wanted = max(1, min(256, n_red // CHUNK))
        rows = int(np.prod(rshape[:3]))
        n_rc = min(rows, wanted)
        n_ic = max(1, min(wanted // n_rc, int(rshape[3]) // CHUNK))
    reduced_strides = np.array(rstrides, dtype=np.int64).reshape(len(inputs), 4)
    kept_strides = np.array(kstrides, dtype=np.int64).reshape(len(inputs), 4)
    unit = bool((reduced_strides[:, 3] == 1).all()) or rshape[3] == 1
    partials = np.empty((n_out, n_rc * n_ic), dtype=np.asarray(initial).dtype)
    ops = {"pre": pre, "combine": combine}
    variant = str(len(inputs))
    kernel = _kernel("reduce", variant, ops, fastmath={"reassoc"})
    launch(kernel, parallel, *(read_only(x) for x in inputs), tuple(int(n) for n in out_shape), kept_strides,
            tuple(int(n) for n in rshape), reduced_strides, n_rc, n_ic, unit, partials, initial)
    finish = _kernel("reduce_final", "1", {"combine": combine, "final": final})
    launch(finish, parallel and n_out >= SERIAL_THRESHOLD, partials, result)


def view4d(array) -> np.ndarray:
    """The 4-d NumPy view of an Array handed to index-wise functions."""
    return array.numpy()


# -- moments: count, min, max, mean and squared deviations in one memory pass -------------------


# Independent accumulators per run. LLVM does not vectorize a min/max reduction unless it may
# assume there are no NaNs, which numba cannot promise; per-lane accumulators turn the reduction
# into an element-wise update that it does vectorize (measured 3x faster on a 32K run).


@numba.njit(nogil=True, cache=runtime.CACHE_ENABLED)
def _run_sum_min_max(run):
    """Sum (float64) and NaN-propagating min and max of a contiguous real 1-d run."""
    n = run.shape[0]
    rows = n // LANES
    sums = np.zeros(LANES)
    lows = np.full(LANES, np.inf)
    highs = np.full(LANES, -np.inf)
    for r in range(rows):
        x = run[r * LANES:(r + 1) * LANES]
        for k in range(LANES):
            v = np.float64(x[k])
            sums[k] += v
            lows[k] = _minimum(v, lows[k])
            highs[k] = _maximum(v, highs[k])
    s, lo, hi = 0.0, np.inf, -np.inf
    for k in range(LANES):
        s += sums[k]
        lo = _minimum(lows[k], lo)
        hi = _maximum(highs[k], hi)
    for i in range(rows * LANES, n):
        v = np.float64(run[i])
        s += v
        lo = _minimum(v, lo)
        hi = _maximum(v, hi)
    return s, lo, hi


@numba.njit(nogil=True, cache=runtime.CACHE_ENABLED)
def _run_squared_deviations(run, mean):
    """Sum of (x - mean)**2 over a contiguous real 1-d run, in float64."""
    n = run.shape[0]
    rows = n // LANES
    sums = np.zeros(LANES)
    for r in range(rows):
        x = run[r * LANES:(r + 1) * LANES]
        for k in range(LANES):
            d = np.float64(x[k]) - mean
            sums[k] += d * d
    acc = 0.0
    for k in range(LANES):
        acc += sums[k]
    for i in range(rows * LANES, n):
        d = np.float64(run[i]) - mean
        acc += d * d
    return acc


def _moments_source(name: str, complex_input: bool) -> str:
    # Each task takes one run of at most CHUNK elements: a first pass for min, max and the sum, a
    # second pass, over the run still in cache, for the squared deviations from the run's mean.
    # Runs are then merged with Chan et al.'s formula, which keeps the precision of two passes.
    # Contiguous real runs take the vectorized helpers; strided and complex ones the loops below.
    first = ("s += v" if complex_input else "s += v\nlo = minimum(lo, v)\nhi = maximum(hi, v)").split("\n")
    deviation = "d.real * d.real + d.imag * d.imag" if complex_input else "d * d"
    loops = [f"s = {'0j' if complex_input else '0.0'}", "lo = np.inf", "hi = -np.inf",
             "for i in range(m):", "    v = buf[base + i * s3]", *("    " + line for line in first),
             "mean = s / m", "acc = 0.0",
             "for i in range(m):", "    d = buf[base + i * s3] - mean", f"    acc += {deviation}"]
    if complex_input:
        body = _indent(loops, 2)
    else:
        fast = ["run = buf[base:base + m]", "s, lo, hi = run_sum_min_max(run)", "mean = s / m",
                "acc = run_squared_deviations(run, mean)"]
        body = "\n".join([_indent(["if unit:"], 2), _indent(fast, 3), _indent(["else:"], 2), _indent(loops, 3)])
    tasks = _CHUNKED_TASKS.format(hoist="    s0, s1, s2, s3 = strides[0], strides[1], strides[2], strides[3]")
    return f"""
def {name}(buf, shape, strides, chunk, unit, counts, lows, highs, means, m2s, control):{tasks}
        base = i0 * s0 + i1 * s1 + i2 * s2 + start * s3
{body}
        counts[task] = m
        lows[task] = lo
        highs[task] = hi
        means[task] = mean
        m2s[task] = acc
"""


def moments(buf: np.ndarray, shape: Sequence[int], strides: Sequence[int]) -> tuple:
    """(count, min, max, mean, sum of squared deviations) of a planned, non-empty 4-d operand.

    Real inputs are accumulated in float64 (min and max propagate NaN, as NumPy's); complex ones in
    complex128, with min and max left at +-inf (they have no order).
    """
    complex_input = buf.dtype.kind == "c"
    shape = tuple(int(n) for n in shape)
    count = int(np.prod(shape))
    chunk = min(CHUNK, shape[3])
    tasks = shape[0] * shape[1] * shape[2] * ((shape[3] + chunk - 1) // chunk)
    parallel = _parallel(count)
    kernel = _kernel("moments", "c" if complex_input else "r",
                     {"minimum": BUILTIN_OPS["minimum"], "maximum": BUILTIN_OPS["maximum"]},
                     helpers={"run_sum_min_max": _run_sum_min_max, "run_squared_deviations": _run_squared_deviations})
    counts = np.empty(tasks, np.int64)
    lows, highs, m2s = np.empty(tasks), np.empty(tasks), np.empty(tasks)
    means = np.empty(tasks, np.complex128 if complex_input else np.float64)
    unit = shape[3] == 1 or strides[3] == 1
    launch(kernel, parallel, read_only(buf), shape, np.array(strides, dtype=np.int64), chunk, unit, counts, lows,
            highs, means, m2s)
    return _merge_moments(counts, lows, highs, means, m2s)


chan_merge = register_jitable(scalar_ops.chan_merge)


@numba.njit(nogil=True, cache=runtime.CACHE_ENABLED)
def _merge_moments(counts, lows, highs, means, m2s):
    n = counts[0]
    lo, hi, mean, m2 = lows[0], highs[0], means[0], m2s[0]
    for t in range(1, counts.shape[0]):
        n, mean, m2 = chan_merge(n, mean, m2, counts[t], means[t], m2s[t])
        lo = _minimum(lo, lows[t])
        hi = _maximum(hi, highs[t])
    return n, lo, hi, mean, m2

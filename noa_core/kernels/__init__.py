"""Kernel back-ends (``cpu``, ``cuda``) and the element operators they share.

The operators below are plain Python functions: each back-end compiles them for its target
(``numba.njit`` on the CPU, ``numba.cuda.jit(device=True)`` on CUDA), so one definition serves
both. They are referred to by name (:data:`BUILTIN_OPS`), which lets the CPU back-end cache the
kernels it generates for them on disk.

Kernels are generated from source templates because the number of operands (and whether each
input is an array or a scalar) varies: numba cannot index heterogeneous tuples with a loop
variable, so each arity gets its own text, compiled with :func:`compile_template`.

Reading generated kernels: every generated source (back-end kernels, expression element functions)
is compiled by :func:`compile_source` under a file name of its own, ``<noa kernel NAME #HASH>``, whose
lines are registered with :mod:`linecache`, so tracebacks, numba's error messages and
``inspect.getsource`` show the generated lines. ``NOA_DUMP_KERNELS=1`` prints each source to stderr
when it is first compiled; :func:`generated_sources` returns those of this process (name -> source).
"""

from __future__ import annotations

import hashlib
import itertools
import linecache
import math
import os
import sys
import threading
from collections.abc import Callable, Sequence
from types import FunctionType

import numpy as np
from llvmlite import ir
from numba import types
from numba.core.caching import CompileResultCacheImpl, FunctionCache
from numba.extending import intrinsic, overload

from noa_core.kernels import runtime  # noqa: F401  (configures numba before any kernel is compiled)
from noa_core.array.scalar_ops import maximum, minimum


# -- element operators -------------------------------------------------------------------------


def identity(x):
    return x


def real_part(x):
    return x.real


def nonzero(x):
    return x != 0


def add(a, b):
    return a + b


def subtract(a, b):
    return a - b


def multiply(a, b):
    return a * b


def true_divide(a, b):
    """``a / b`` as NumPy computes it: a complex division by zero gives inf/nan, not an exception.

    This Python body is what numba's CUDA simulator runs (NumPy scalars already behave so); compiled
    code uses the overload below, because numba raises ZeroDivisionError for complex divisors even
    with ``error_model='numpy'``.
    """
    return a / b


def true_divide_typer(a, b):
    """numba's implementation of :func:`true_divide` for the argument types ``a`` and ``b``.

    Registered for the CPU here and for CUDA by :mod:`noa_core.kernels.cuda` (numba-cuda keeps its
    own registry); self-contained so that it compiles for either target.
    """
    if not (isinstance(a, types.Complex) or isinstance(b, types.Complex)):
        return lambda a, b: a / b
    # The result keeps NumPy's promoted precision (complex64 stays complex64).
    result = np.result_type(np.dtype(str(a)), np.dtype(str(b))).type

    def complex_divide(a, b):
        if b == 0:
            # x / +0.0 in IEEE arithmetic, part by part, without a division numba could trap.
            re, im = a.real, a.imag
            re = math.nan if re != re or re == 0 else (math.inf if re > 0 else -math.inf)
            im = math.nan if im != im or im == 0 else (math.inf if im > 0 else -math.inf)
            return result(complex(re, im))
        return result(a / b)

    return complex_divide


overload(true_divide)(true_divide_typer)


def divide(a, b):
    return true_divide(a, b)


def negate(a):
    return -a


def square_root(x):
    return math.sqrt(x)


def clamp_keep_nan(x, lo, hi):
    """Clamp to [lo, hi]; NaN stays NaN (float targets)."""
    v = x.real
    if v < lo:
        return lo
    if v > hi:
        return hi
    return v


def clamp_nan_to_zero(x, lo, hi):
    """Clamp to [lo, hi]; NaN becomes 0 (integer targets)."""
    v = x.real
    if v != v:
        return lo - lo
    if v < lo:
        return lo
    if v > hi:
        return hi
    return v


@intrinsic
def _to_half_bits(typingctx, value):
    """The IEEE half-precision bits of a float (round to nearest even): LLVM's ``fptrunc``, which
    becomes an F16C instruction where the CPU has it (numba has no float16 type on the CPU)."""
    if not isinstance(value, types.Float):
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))

    return types.uint16(value), codegen


@intrinsic
def _from_half_bits(typingctx, bits):
    """The float32 value of IEEE half-precision bits (exact): LLVM's ``fpext``."""
    if not isinstance(bits, types.Integer) or bits.bitwidth != 16:
        return None

    def codegen(context, builder, signature, args):
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())

    return types.float32(bits), codegen


def half_bits(x):
    """float -> float16, written as its bits into a uint16 view of the output (CPU only)."""
    return _to_half_bits(x)


def half_value(x):
    """float16 bits (a uint16 view of the input) -> float32 (CPU only)."""
    return _from_half_bits(x)


def squared_deviation(x, m):
    d = x - m
    return d * d


def squared_deviation_complex(x, m):
    d = x - m
    return d.real * d.real + d.imag * d.imag


BUILTIN_OPS: dict[str, Callable] = {
    f.__name__: f
    for f in (identity, real_part, nonzero, add, subtract, multiply, divide, negate, square_root,
              clamp_keep_nan, clamp_nan_to_zero, squared_deviation, squared_deviation_complex,
              minimum, maximum, half_bits, half_value)
}


def operand_variants(max_operands: int = 3) -> dict[str, list[str]]:
    """The variants of the templates both back-ends have, with up to ``max_operands`` inputs, outputs or
    extra arguments (ewise: 'a'/'s' per input, then the number of outputs); each back-end adds its own."""
    counts = range(1, max_operands + 1)
    return {
        "ewise": [f"{''.join(kinds)}_{n_out}" for n_in in counts for kinds in itertools.product("as", repeat=n_in)
                  for n_out in counts],
        "iwise": [str(n) for n in range(max_operands + 1)],
        "reduce": [str(n) for n in counts],
        "reduce_final": ["1"],
    }


def transpose_plan(shape: Sequence[int], in_strides: Sequence[int], out_strides: Sequence[int],
                   min_edge: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None:
    """When a tiled transpose pays off, the planned (shape, input strides, output strides)
    reordered so that the input is contiguous along dimension 2 and the output along 3; else None.

    That is when the output is contiguous innermost but the input is not, and the input is
    contiguous along another dimension; both edges of the tile must be at least ``min_edge`` long.
    """
    if out_strides[3] != 1 or in_strides[3] in (0, 1) or shape[3] < min_edge:
        return None
    for j in (2, 1, 0):
        if in_strides[j] == 1 and shape[j] >= min_edge:
            perm = [0, 1, 2, 3]
            perm[j], perm[2] = 2, j
            return (tuple(int(shape[p]) for p in perm), tuple(int(in_strides[p]) for p in perm),
                    tuple(int(out_strides[p]) for p in perm))
    return None


# -- generated source ---------------------------------------------------------------------------

_SOURCES: dict[str, str] = {}  # file name -> source, of every source compiled by this process
_SOURCES_LOCK = threading.Lock()


def kernel_filename(source: str, name: str) -> str:
    """The file name ``source`` is compiled under: ``<noa kernel NAME #HASH>``, the hash telling
    apart different sources given the same name."""
    return f"<noa kernel {name} #{hashlib.sha1(source.encode()).hexdigest()[:8]}>"


def compile_source(source: str, name: str, scope: dict) -> dict:
    """Execute generated ``source`` in ``scope`` (updated and returned), under its own file name.

    The source is registered with :mod:`linecache` under :func:`kernel_filename`, so that a
    traceback through the generated code, numba's error messages and ``inspect.getsource`` show its
    lines (not unrelated lines of a real module). With ``NOA_DUMP_KERNELS`` set (and not ``0``), a
    source is printed to stderr, under that name, the first time it is compiled. Sources are kept
    for the life of the process (a few KB each; the machine code numba keeps for them is far larger).
    """
    filename = kernel_filename(source, name)
    with _SOURCES_LOCK:
        first = filename not in _SOURCES
        _SOURCES[filename] = source
        # mtime None: linecache.checkcache keeps the entry (there is no file to compare it with).
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    if first and os.environ.get("NOA_DUMP_KERNELS", "0") not in ("", "0"):
        print(f"# ---- {filename}\n{source.strip(chr(10))}\n# ---- end {filename}", file=sys.stderr, flush=True)
    exec(compile(source, filename, "exec"), scope)  # noqa: S102 - text generated by noa, not user input
    return scope


def generated_sources() -> dict[str, str]:
    """The generated sources this process compiled: ``<noa kernel ...>`` file name -> source."""
    with _SOURCES_LOCK:
        return dict(_SOURCES)


def compile_template(source: str, name: str, module: str, namespace: dict) -> Callable:
    """Compile generated source into the function ``name``, belonging to the module named ``module``.

    The source gets a file name of its own (:func:`compile_source`); the function's ``__module__`` is
    the back-end's, which numba rebuilds a cached kernel's environment from. Such a function has no
    real source file, which numba's own cache locators require: :func:`cache_on_disk` caches it by
    the back-end module's file instead, as before.
    """
    scope = compile_source(source, name, dict(namespace, __name__=module))
    func = scope[name]
    func.__qualname__ = name
    return func


class _GeneratedCacheImpl(CompileResultCacheImpl):
    """numba's cache implementation, locating a generated function by its module's file.

    numba finds a function's cache directory, and dates its entries, by the file the function's code
    was compiled from, and gives up on a ``<...>`` name. A generated kernel's text is fixed by its
    back-end module's templates (and its name, which carries a digest of the operators), so it is
    located and dated by that module's file, under ``<module>.<name>``: the cache directory, the
    entry names and their invalidation (an edit of the module) are those the kernels had when they
    were compiled under the module's own file name. Entries are still keyed by the function's
    bytecode and signature (numba's index), so two sources never share one.
    """

    def __init__(self, py_func):
        # numba's own set-up (its locators, NUMBA_CACHE_LOCATOR_CLASSES, its entry names), shown a
        # stand-in whose code names the module's file; the cache keeps py_func for its index keys.
        code = py_func.__code__.replace(co_filename=sys.modules[py_func.__module__].__file__)
        stand_in = FunctionType(code, py_func.__globals__, py_func.__name__)
        stand_in.__qualname__ = py_func.__qualname__
        super().__init__(stand_in)


class _GeneratedFunctionCache(FunctionCache):
    _impl_class = _GeneratedCacheImpl


def cache_on_disk(dispatcher):
    """Turn on numba's on-disk cache for a dispatcher of :func:`compile_template` (what
    ``njit(cache=True)`` does, with :class:`_GeneratedCacheImpl` to locate it); returns it."""
    dispatcher._cache = _GeneratedFunctionCache(dispatcher.py_func)
    return dispatcher

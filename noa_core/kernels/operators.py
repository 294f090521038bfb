"""The element operators both kernel back-ends share, and :data:`BUILTIN_OPS`, their table by name.

The operators are plain Python functions: each back-end compiles them for its target (``numba.njit`` on
the CPU, ``numba.cuda.jit(device=True)`` on CUDA), so one definition serves both. They are referred to
by name (:data:`BUILTIN_OPS`), which lets the CPU back-end cache the kernels it generates for them on disk.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

from noa_core.array.scalar_ops import maximum, minimum
from noa_core.kernels import runtime  # noqa: F401  (configures numba before any kernel is compiled)


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


def power(a, b):
    """``a ** b`` as NumPy computes it: a complex zero to a power whose real part is positive is 0 (numba's
    power gives NaN), to the power 0 is 1, to any other power NaN; compiled code (the overload below) computes
    complex powers in double precision. This Python body is what numba's CUDA simulator runs: NumPy scalars
    follow the zero rule, in their own precision."""
    return a ** b


def power_typer(a, b):
    """numba's implementation of :func:`power` for the argument types ``a`` and ``b`` (registered as
    :func:`true_divide_typer` is)."""
    if not (isinstance(a, types.Complex) or isinstance(b, types.Complex)):
        return lambda a, b: a ** b
    result = np.result_type(np.dtype(str(a)), np.dtype(str(b))).type

    def complex_power(a, b):
        exponent = np.complex128(b)
        if a == 0 and exponent != 0:
            return result(0) if exponent.real > 0 else result(complex(math.nan, math.nan))
        # in double precision: numba's complex64 power (exp(b log a) in float32) was 5 ulps off NumPy's
        return result(np.complex128(a) ** exponent)

    return complex_power


overload(power)(power_typer)


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


def half_precision(x):
    """``x`` rounded once to float16 (to nearest even; beyond its range, inf), as a float32: a step NumPy
    computes in float16, as noa computes it. This Python body is what plain Python and numba's CUDA simulator
    run; compiled code uses the overloads (below for the CPU, in :mod:`noa_core.kernels.cuda` for CUDA)."""
    with np.errstate(over="ignore"):  # beyond float16's range is inf, as NumPy's float16 steps give it
        return np.float32(np.float16(x))


def half_precision_typer(x):
    """numba's CPU implementation of :func:`half_precision`: ``fptrunc`` to half (F16C's conversion), from
    float32 where that holds ``x`` exactly (the types NumPy computes in float16 come from: float16 held as
    float32, bool, 8-bit integers), else from double."""
    if isinstance(x, types.Boolean) or (isinstance(x, types.Integer) and x.bitwidth <= 16) or \
            (isinstance(x, types.Float) and x.bitwidth <= 32):
        return lambda x: _from_half_bits(_to_half_bits(np.float32(x)))
    if isinstance(x, (types.Float, types.Integer)):
        return lambda x: _from_half_bits(_to_half_bits(np.float64(x)))
    return None


overload(half_precision)(half_precision_typer)


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


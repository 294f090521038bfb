"""The expression language: what it refuses, and that its numba and NumPy forms agree.

Hostile expressions (issue 20, items 7-10): bounded work, one-line refusals, NumPy's types.

The oracle is NumPy evaluating the same expression on the same arrays: each expression is built
twice from one tree, as text for noa and as NumPy calls (Python scalars left weak, as NumPy 2
treats them), so nothing here reuses noa_core.compute.expr's own tables."""

import math
import operator
import re
import time
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, note, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import noa_core as nc
from noa_core.compute import expr
from noa_core.compute.elementwise import ewise
from noa_core.compute.expr import ExpressionError, compile_expression
from noa_core.kernels import cpu, runtime

EXPRESSIONS = [
    ("a * b", lambda a, b: a * b),
    ("a / b - 1", lambda a, b: a / b - 1),
    ("(a + 2) ** 2 % 7", lambda a, b: (a + 2) ** 2 % 7),
    ("-a // 3 + b", lambda a, b: -a // 3 + b),
    ("where(a > b, sqrt(abs(a)), exp(b / 100))", lambda a, b: np.where(a > b, np.sqrt(np.abs(a)), np.exp(b / 100))),
    ("clip(a, -1, 1) * max(a, b) + min(a, b)", lambda a, b: np.clip(a, -1, 1) * np.maximum(a, b) + np.minimum(a, b)),
    ("floor(a) + ceil(b) + sin(a) * cos(b) + tan(a / 1000)",
     lambda a, b: np.floor(a) + np.ceil(b) + np.sin(a) * np.cos(b) + np.tan(a / 1000)),
    ("log(abs(a) + 1) + log10(abs(b) + 1)", lambda a, b: np.log(np.abs(a) + 1) + np.log10(np.abs(b) + 1)),
    ("a if 0 < a < b else pi * e", lambda a, b: np.where((a > 0) & (a < b), a, np.pi * np.e)),
    ("not a or b > 0 and a != b", lambda a, b: np.logical_not(a) | ((b > 0) & (a != b))),
]


@pytest.mark.parametrize("text,reference", EXPRESSIONS, ids=[t for t, _ in EXPRESSIONS])
@settings(max_examples=25, deadline=None)
@given(st.floats(-50, 50, allow_nan=False), st.floats(-50, 50, allow_nan=False))
def test_numba_and_numpy_forms_agree_with_a_reference(text, reference, a, b):
    expression = compile_expression(text, 2)
    x, y = np.array([a]), np.array([b])
    with np.errstate(all="ignore"):
        expected = reference(x, y)
    assert expression.result_dtype([x.dtype, y.dtype]) == expected.dtype
    assert np.allclose(expression.numba_function(x.dtype, y.dtype)(a, b), expected[0], equal_nan=True, rtol=1e-12)


def test_result_dtype_follows_numpy_promotion():
    f32, i16, u8 = np.dtype("float32"), np.dtype("int16"), np.dtype("uint8")
    assert compile_expression("a * b", 2).result_dtype([f32, f32]) == f32
    assert compile_expression("a * 2.5", 1).result_dtype([f32]) == f32  # Python constants are weak
    assert compile_expression("a + b", 2).result_dtype([i16, u8]) == i16
    assert compile_expression("a / b", 2).result_dtype([i16, i16]) == np.float64
    assert compile_expression("a > 3", 1).result_dtype([u8]) == np.bool_
    # Both branches count, whichever one a sample would take.
    assert compile_expression("where(a > 0, sqrt(a), a)", 1).result_dtype([i16]) == f32


def test_division_by_zero_follows_numpy():
    expression = compile_expression("a / b", 2)
    function = expression.numba_function(np.float64, np.float64)
    assert function(1.0, 0.0) == np.inf and np.isnan(function(0.0, 0.0))
    # numba itself raises ZeroDivisionError for complex divisors; NumPy gives inf/nan.
    with np.errstate(all="ignore"):
        for a, b in [(np.complex64(1 - 2j), np.complex64(0)), (np.complex128(0), np.complex128(0)),
                     (np.float32(-3), np.complex64(0)), (np.complex64(2 + 2j), np.float64(0))]:
            got, expected = expression.numba_function(a.dtype, b.dtype)(a, b), a / b
            np.testing.assert_array_equal([got.real, got.imag], [expected.real, expected.imag])


@pytest.mark.parametrize(
    "text,message",
    [
        ('__import__("os").system("true")', "is not allowed"),
        ('__import__("os")', "unknown function '__import__'"),
        ("a.real", "'a.real' is not allowed"),
        ("a[0]", "'a[0]' is not allowed"),
        ("open", "unknown name 'open'"),
        ("b * 2", "uses input 'b', but only 1 input"),
        ("foo(a)", "unknown function 'foo'"),
        ("sqrt(a, a)", "takes 1 argument"),
        ("a +", "is not valid: invalid syntax at the end"),  # issue 40 item 11: it said "at column 0"
        ("  a b", "is not valid: invalid syntax at column 5"),
        ("lambda: a", "is not allowed"),
        ("'text'", "is not allowed"),
        ("[x for x in a]", "is not allowed"),
        ("sqrt(x=a)", "is not allowed"),
        ("(a := 3)", "is not allowed"),
    ],
)
def test_refused_expressions(text, message):
    with pytest.raises(ExpressionError, match=message.replace("(", r"\(").replace("[", r"\[")):
        compile_expression(text, 1)


def test_limits():
    with pytest.raises(ExpressionError, match="1 to 26 inputs"):
        compile_expression("a", 0)
    with pytest.raises(ExpressionError, match="limit is 2000"):
        compile_expression("a + " * 600 + "a", 1)


_CACHED_RUN = """
import sys
import numpy as np
import noa_core as nc
from noa_core.compute.elementwise import ewise
from noa_core.compute.expr import compile_expression
from noa_core.kernels import cpu

from noa_core.kernels import runtime

text = sys.argv[1]
runtime.CACHE_EXPRESSIONS = sys.argv[2] == "cache"  # as the service sets it: off
x = np.arange(600 * 500, dtype=np.float32).reshape(1, 1, 600, 500)  # run on all threads, then on one
out = nc.empty(x.shape, "float32")
ewise([nc.asarray(x)], [out], compile_expression(text, 1).numba_function("float32"))
small = nc.empty((1, 1, 2, 3), "float32")
ewise([nc.asarray(x[:, :, :2, :3])], [small], compile_expression(text, 1).numba_function("float32"))
expected = eval(text, {"a": x})  # the test's own "a * k + 1", evaluated by NumPy
assert np.array_equal(out.numpy(), expected) and np.array_equal(small.numpy(), expected[:, :, :2, :3])
stats = [k.stats for k in cpu._KERNELS.values()]
print(sum(sum(s.cache_hits.values()) for s in stats), sum(sum(s.cache_misses.values()) for s in stats))
"""


def test_expression_kernels_are_cached_on_disk_across_processes(tmp_path):
    """A second process evaluating the same expression loads its kernels from the cache (numba
    counts hits and no misses); another expression gets kernels of its own, not the first's; with
    runtime.CACHE_EXPRESSIONS off the cache directory is left alone."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))

    def run(text: str, cache: str = "cache") -> tuple[int, int]:
        result = subprocess.run([sys.executable, "-c", _CACHED_RUN, text, cache], env=env, capture_output=True,
                                text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
        hits, misses = result.stdout.split()
        return int(hits), int(misses)

    assert run("a * 2 + 1")[1] > 0  # compiled and stored
    hits, misses = run("a * 2 + 1")
    assert hits >= 1 and misses == 0  # one kernel serves both sizes
    assert run("a * 3 + 1")[1] > 0  # a different expression is not served the first one's kernels
    # With expression caching off (the service), nothing is loaded or stored for them.
    files = sorted(p.name for p in tmp_path.rglob("*"))
    assert run("a * 4 + 1", "off")[0] == 0
    assert sorted(p.name for p in tmp_path.rglob("*")) == files


# -- hostile expressions -------------------------------------------------------------------------------------------


def complex64_power(x, y):
    """``x ** y``, complex64 results computed in complex128 and rounded: noa's documented power (NumPy's own
    complex64 power was 12 ulps off at 13.17 ** 13.17)."""
    result = operator.pow(x, y)
    if getattr(result, "dtype", None) == np.complex64:
        return (np.asarray(x).astype(np.complex128) ** np.asarray(y).astype(np.complex128)).astype(np.complex64)
    return result


DTYPES = [np.dtype(name) for name in ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                                      "float16", "float32", "float64", "complex64", "complex128"]]
BINARY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "//": operator.floordiv,
          "%": operator.mod, "**": complex64_power, "<": operator.lt, "<=": operator.le, ">": operator.gt,
          ">=": operator.ge, "==": operator.eq, "!=": operator.ne, "and": np.logical_and, "or": np.logical_or}
UNARY = {"-": operator.neg, "+": operator.pos, "not ": np.logical_not}
FUNCTIONS = {"abs": np.abs, "sqrt": np.sqrt, "exp": np.exp, "log": np.log, "log10": np.log10, "sin": np.sin,
             "cos": np.cos, "tan": np.tan, "floor": np.floor, "ceil": np.ceil, "min": np.minimum, "max": np.maximum,
             "clip": lambda x, low, high: np.minimum(np.maximum(x, low), high), "where": np.where}
ARITY = {"min": 2, "max": 2, "clip": 3, "where": 3}
# Inputs NumPy may compute float16 intermediates from (sqrt of int8 is float16).
HALF_SOURCES = [np.dtype(name) for name in ("float16", "int8", "uint8", "bool")]
SINGLE_SOURCES = [np.dtype(name) for name in ("float32", "complex64", "int16", "uint16")]
# NumPy's errors for an expression it refuses (bad constants, undefined loops, Python's own).
NUMPY_REFUSES = (OverflowError, ValueError, TypeError, ZeroDivisionError)


@pytest.fixture(autouse=True, scope="module")
def no_disk_cache():
    """Compile as the service does: the random expressions here must not fill numba's cache on disk
    (and the timing test must not be served from it)."""
    cached, runtime.CACHE_EXPRESSIONS = runtime.CACHE_EXPRESSIONS, False
    yield
    runtime.CACHE_EXPRESSIONS = cached


def numpy_result(reference, a, b):
    """What NumPy gives (an array), or the exception it raises."""
    try:
        with np.errstate(all="ignore"):
            return np.asarray(reference(a, b))
    except NUMPY_REFUSES as exc:
        return exc


def known_difference(error: Exception, text: str, a: np.ndarray, b: np.ndarray) -> bool:
    """Where noa knowingly differs from NumPy (documented in noa_core.compute.expr): complex values are not
    ordered (NumPy orders them lexicographically); a negative integer exponent coming from an input is
    computed, not refused (NumPy checks every element at run time); and an expression of constants alone
    whose value is an integer beyond 64 bits is refused (NumPy gives an array of Python objects, which
    no image holds)."""
    complex_input = "c" in (a.dtype.kind, b.dtype.kind)
    return ((isinstance(error, ExpressionError) and "no order" in str(error) and complex_input)
            or (isinstance(error, ValueError) and "negative integer powers" in str(error))
            or (isinstance(error, ExpressionError) and "beyond every integer type" in str(error)))


def run_noa(text: str, a: np.ndarray, b: np.ndarray):
    """noa's compiled element function on each pair of elements, stored in its result type (as the
    kernels store it; float16 inputs arrive as float32, as noa_core.compute.dispatch hands them over), or
    its ExpressionError. The kernels themselves are exercised by the tests that run ewise."""
    try:
        expression = compile_expression(text, 2)
        dtype = expression.result_dtype([a.dtype, b.dtype])
        element = expression.numba_function(a.dtype, b.dtype)
    except ExpressionError as exc:
        return exc
    widened = [x.astype(np.float32) if x.dtype == np.float16 else x for x in (a, b)]
    return np.array([element(x, y) for x, y in zip(*widened)], dtype=dtype)


def run_kernels(text: str, *arrays: np.ndarray) -> np.ndarray:
    """noa's result through the kernels, as `noa ewise` computes a tile."""
    expression = compile_expression(text, len(arrays))
    out = nc.empty((1, 1, 1, arrays[0].size), expression.result_dtype([x.dtype for x in arrays]))
    ewise([nc.asarray(x.reshape(1, 1, 1, -1)) for x in arrays], [out],
          expression.numba_function(*(x.dtype for x in arrays)))
    return out.numpy().reshape(-1)


def assert_like_numpy(got: np.ndarray, expected: np.ndarray, *inputs: np.ndarray, text: str = "",
                      neighbours: Sequence[np.ndarray] = ()) -> None:
    """The same type, and the same values: integers exactly, floats within the precision of the
    least precise float NumPy may compute in along the way (from the inputs' types, and a bool
    constant or comparison: sin(True) and exp(a <= a) are float16). ``neighbours``: NumPy's results for the
    inputs an ulp away and in a wider type: where one is not within the tolerance of NumPy's result, the value
    is rounding noise (sin(5.5 ** 5.5): the sine of 11803 in float32; sin(8.5 ** 8.5) in double), and no value
    is right or wrong there; where NumPy's overflowed, an ulp of a huge intermediate decides the infinities'
    signs (sin((13+2j) ** (13+2j))): noa's must overflow too."""
    assert got.dtype == expected.dtype
    if expected.dtype.kind in "biu":
        np.testing.assert_array_equal(got, expected)
        return
    expected = np.broadcast_to(expected, got.shape)  # an expression of constants gives one value
    overflowed = ~np.isfinite(expected) & ~np.isnan(expected)
    assert (~np.isfinite(got[overflowed])).all(), (got, expected)
    if (expected.dtype == np.float16 or any(x.dtype in HALF_SOURCES for x in inputs) or "True" in text
            or any(op in text for op in ("<", ">", "==", "!=", " and ", " or ", "not "))):  # bool intermediates too
        # float16 steps are rounded as NumPy rounds them, but an ulp of numba's float32 exp, sin, ...
        # (see _NUMPY_EXACT in noa_core.compute.expr) may round to the next float16, and grow from there.
        tolerance = 2e-2
        kept = ~overflowed & (np.abs(expected) <= 100)
    else:
        single = expected.dtype in SINGLE_SOURCES or any(x.dtype in SINGLE_SOURCES for x in inputs)
        tolerance = 1e-4 if single else 1e-9  # numba's and NumPy's float32 functions differ by an ulp
        kept = ~overflowed
    for neighbour in neighbours:
        kept &= np.isclose(expected, neighbour, rtol=tolerance, atol=tolerance, equal_nan=True)
    np.testing.assert_allclose(got[kept], expected[kept], rtol=tolerance, atol=tolerance, equal_nan=True)


def both_computed(expected, got, text: str, a: np.ndarray, b: np.ndarray) -> bool:
    """Whether NumPy and noa both gave a result; else both refused (or they differ knowingly)."""
    failures = [x for x in (expected, got) if isinstance(x, Exception)]
    if len(failures) == 1:
        assert known_difference(failures[0], text, a, b), (text, a.dtype, b.dtype, expected, got)
    return not failures


def check_against_numpy(text: str, reference, a: np.ndarray, b: np.ndarray) -> None:
    expected, got = numpy_result(reference, a, b), run_noa(text, a, b)
    if not both_computed(expected, got, text, a, b):
        return
    neighbours = []
    if expected.dtype.kind in "fc":  # NumPy's value for inputs an ulp away, and in a wider type: its rounding noise
        wider = np.longdouble if expected.dtype.itemsize >= 8 * (1 + (expected.dtype.kind == "c")) else np.float64
        for inputs in ([x.astype(np.result_type(x.dtype, wider)) for x in (a, b)], [_nudged(x, 1) for x in (a, b)],
                       [_nudged(x, -1) for x in (a, b)]):
            value = numpy_result(reference, *inputs)
            if not isinstance(value, Exception):
                neighbours.append(value.astype(expected.dtype))
    assert_like_numpy(got, expected, a, b, text=text, neighbours=neighbours)


def _nudged(x: np.ndarray, direction: int) -> np.ndarray:
    """Floats (and both parts of complex values) an ulp up or down; other values as they are."""
    if x.dtype.kind == "f":
        return np.nextafter(x, direction * np.inf).astype(x.dtype)
    if x.dtype.kind == "c":
        return (_nudged(x.real, direction) + 1j * _nudged(x.imag, direction)).astype(x.dtype)
    return x


# -- item 9: NumPy's promotion for every intermediate ------------------------------------------


def test_integer_intermediates_wrap_in_their_own_type():
    a = np.array([-128, -1, 0, 14, 22, 127, 100, 50], dtype=np.int8)
    with np.errstate(all="ignore"):
        expected = (a * 100) // 7
    np.testing.assert_array_equal(run_kernels("(a * 100) // 7", a), expected)
    issue = np.array([1, 2, 0, 1, 3, 4, 5, 6], dtype=np.int8)
    assert run_kernels("(a * 100) // 7", issue).tolist() == [14, -8, 0, 14, 6, -16, -2, 12]
    half = np.array([0.5, 1.5, -2.25, 100, 0.1, 65504], dtype=np.float16)
    with np.errstate(all="ignore"):
        expected = half * 3 + np.sqrt(np.abs(half))
    np.testing.assert_array_equal(run_kernels("a * 3 + sqrt(abs(a))", half), expected)


@pytest.mark.parametrize("text,reference", [
    ("where(exp(b), a, b)", lambda a, b: np.where(np.exp(b), a, b)),  # found by CI: exp(-18) is 0 in float16
    ("exp(b) > 0", lambda a, b: np.exp(b) > 0),
    ("not exp(b) or a", lambda a, b: np.logical_not(np.exp(b)) | a),
    ("(b + 0.1) * 3 == b * 3 + 0.3", lambda a, b: (b + 0.1) * 3 == b * 3 + 0.3),
    ("b * 600.0 - b * 600.0 == 0", lambda a, b: b * 600.0 - b * 600.0 == 0),  # 66000 is inf in float16
])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "float16"])
def test_float16_steps_are_rounded_as_numpy_rounds_each(text, reference, dtype):
    """NumPy computes these steps in float16, rounding each; noa holds them in float32, rounded to
    float16 as each is made: a comparison or a truth test sees float16's value, on both of noa's paths."""
    b = (np.arange(-128, 128) if dtype != "uint8" else np.arange(256)).astype(dtype)
    if dtype == "float16":
        b = np.concatenate([b / 8, np.array([-18, -17.5, 65, 66, 120, 0.1, -0.0], dtype)]).astype(dtype)
    a = (np.arange(b.size) % 3 == 0)
    with np.errstate(all="ignore"):
        expected = np.asarray(reference(a, b))
    np.testing.assert_array_equal(run_kernels(text, a, b), expected)
    function = compile_expression(text, 2).numpy_function(a.dtype, b.dtype)
    if function is not None:  # exp's own last bits may differ from numba's: no NumPy path then
        out = np.empty(expected.shape, expected.dtype)
        with np.errstate(all="ignore"):
            np.copyto(out, function([a, b]), casting="unsafe")
        np.testing.assert_array_equal(out, expected)


CONSTANTS = ["3", "-1", "300", "2.5", "True", "0"]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_operator_and_function_has_numpys_type_on_every_input_type(dtype):
    """Each operator and function, with an input of ``dtype`` and another input of every type or a
    constant: the same result type as NumPy, or refused exactly where NumPy refuses."""
    a = np.ones(2, dtype)
    cases = []
    for other in DTYPES:
        b = np.ones(2, other)
        cases += [(f"a {op} b", lambda x, y, f=f: f(x, y), a, b) for op, f in BINARY.items()]
    for constant in CONSTANTS:
        value = eval(constant)  # noqa: S307 - the literal above, as NumPy's caller would write it
        cases += [(f"a {op} ({constant})", lambda x, y, f=f, v=value: f(x, v), a, a) for op, f in BINARY.items()]
        cases += [(f"({constant}) {op} a", lambda x, y, f=f, v=value: f(v, x), a, a) for op, f in BINARY.items()]
    cases += [(f"{op}a", lambda x, y, f=f: f(x), a, a) for op, f in UNARY.items()]
    for name, f in FUNCTIONS.items():
        arity = ARITY.get(name, 1)
        cases.append((f"{name}({', '.join(['a'] * arity)})", lambda x, y, f=f, n=arity: f(*[x] * n), a, a))
        cases.append((f"{name}({', '.join(['a'] + ['2'] * (arity - 1))})",
                      lambda x, y, f=f, n=arity: f(x, *[2] * (n - 1)), a, a))
    for text, reference, x, y in cases:
        expected = numpy_result(reference, x, y)
        try:
            got = compile_expression(text, 2).result_dtype([x.dtype, y.dtype])
        except ExpressionError as exc:
            got = exc
        if both_computed(expected, got, text, x, y):
            assert got == expected.dtype, (text, x.dtype, y.dtype)


def values(dtype: np.dtype):
    """Arrays of 8 values of ``dtype``: integers over their whole range, floats small or special."""
    if dtype.kind in "biu":
        elements = None
    elif dtype.kind == "f":
        elements = st.floats(-20, 20, width=dtype.itemsize * 8) | st.sampled_from([0.0, -0.0, np.inf, -np.inf, np.nan])
    else:
        part = st.floats(-20, 20, width=dtype.itemsize * 4)
        elements = st.builds(complex, part, part)
    return hnp.arrays(dtype, 8, elements=elements)


LEAVES = st.sampled_from([("a", lambda a, b: a), ("b", lambda a, b: b), ("3", lambda a, b: 3),
                          ("100", lambda a, b: 100), ("2.5", lambda a, b: 2.5), ("True", lambda a, b: True)])


def _extend(children):
    def binary(op, left, right):
        f = BINARY[op]
        return f"({left[0]}) {op} ({right[0]})", lambda a, b: f(left[1](a, b), right[1](a, b))

    def unary(op, operand):
        f = UNARY[op]
        return f"{op}({operand[0]})", lambda a, b: f(operand[1](a, b))

    def call(name, *args):
        f = FUNCTIONS[name]
        return f"{name}({', '.join(arg[0] for arg in args)})", lambda a, b: f(*(arg[1](a, b) for arg in args))

    def if_else(body, test, orelse):
        return (f"({body[0]}) if ({test[0]}) else ({orelse[0]})",
                lambda a, b: np.where(test[1](a, b), body[1](a, b), orelse[1](a, b)))

    return (st.builds(binary, st.sampled_from(list(BINARY)), children, children)
            | st.builds(unary, st.sampled_from(list(UNARY)), children)
            | st.builds(call, st.sampled_from([n for n in FUNCTIONS if n not in ARITY]), children)
            | st.builds(call, st.sampled_from(["min", "max"]), children, children)
            | st.builds(call, st.sampled_from(["clip", "where"]), children, children, children)
            | st.builds(if_else, children, children, children))


EXPRESSION_TREES = st.recursive(LEAVES, _extend, max_leaves=5)


@pytest.mark.slow  # 10-35 s: scripts/test runs it after the rest
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(EXPRESSION_TREES, st.sampled_from(DTYPES).flatmap(values), st.sampled_from(DTYPES).flatmap(values))
@example(("(a) < ((a) + (b))", lambda a, b: a < a + b),  # found by CI: a + b overflows int64
         np.array([6260] + [0] * 7, np.int16), np.full(8, 9223372036854769548, np.int64))
@example(("where(exp(b), a, b)", lambda a, b: np.where(np.exp(b), a, b)),  # found by CI: float16 exp(-18) is 0
         np.ones(8, bool), np.full(8, -18, np.int8))
def test_expressions_compute_what_numpy_computes(expression, a, b):
    """Random trees of every operator and function over random input types: the values and type
    NumPy gives, or refused where NumPy refuses."""
    text, reference = expression
    note(f"{text!r} on {a!r} and {b!r}")
    check_against_numpy(text, reference, a, b)


@pytest.mark.parametrize("text,reference", [
    ("a // b", lambda a, b: a // b), ("a % b", lambda a, b: a % b), ("a / b", lambda a, b: a / b),
    ("a ** b", lambda a, b: a ** b), ("-a", lambda a, b: -a), ("abs(a)", lambda a, b: np.abs(a)),
])
@pytest.mark.parametrize("dtype", [d for d in DTYPES if d.kind in "iu"], ids=str)
def test_integer_overflow_and_division_by_zero_follow_numpy(text, reference, dtype):
    info = np.iinfo(dtype)
    a = np.array([info.min, info.min, info.max, -1 if info.min else 0, 0, 7, info.max, 3], dtype=dtype)
    b = np.array([-1 if info.min else 1, 0, 0, 0, 0, 2, 2, 5], dtype=dtype)
    check_against_numpy(text, reference, a, b)


@pytest.mark.parametrize("text,reference", [
    ("a < a + b", lambda a, b: a < a + b), ("a - b > a", lambda a, b: a - b > a),
    ("(a * b) // b == a", lambda a, b: (a * b) // b == a), ("a ** 2 >= 0", lambda a, b: a ** 2 >= 0),
])
@pytest.mark.parametrize("dtype", [d for d in DTYPES if d.kind == "i"], ids=str)
def test_overflowing_intermediates_are_never_assumed_away(text, reference, dtype):
    """An integer sum, difference or product that overflows wraps as NumPy's does: the compiler may not
    fold `a < a + b` into `b > 0`, as it may where signed arithmetic is promised not to overflow."""
    info = np.iinfo(dtype)
    root = math.isqrt(info.max) + 1  # its square is beyond info.max
    a = np.array([info.max, info.max - 5, info.min, 6260 % info.max, 1, root, -1, info.max], dtype=dtype)
    b = np.array([1, info.max, 1, info.max, info.max, 2, info.min, 3], dtype=dtype)
    with np.errstate(all="ignore"):
        expected = reference(a, b)
    assert not expected.all() and not (~expected).all()  # the case is one the folding would get wrong
    np.testing.assert_array_equal(run_kernels(text, a, b), expected)
    check_against_numpy(text, reference, a, b)


# -- item 8: each hostile expression computed as NumPy does, or refused in one line ------------------


@pytest.mark.parametrize("text,reference", [
    ("a + 1e999", lambda a: a + 1e999),
    ("not not a", lambda a: np.logical_not(np.logical_not(a))),
    ("0 < a < 3 <= 3", lambda a: np.logical_and(np.logical_and(a > 0, a < 3), 3 <= 3)),
    ("a < 1000", lambda a: a < 1000),
    ("-1000 >= a", lambda a: a <= -1000),
    ("a + 2**100 * 0", lambda a: a + 2**100 * 0),
    ("where(a > 0, a, 1000)", lambda a: np.where(a > 0, a, 1000)),  # NumPy wraps the constant here
    ("1 + 2", lambda a: np.asarray(1 + 2)),
])
def test_hostile_expressions_that_numpy_computes(text, reference):
    a = np.array([-128, -1, 0, 1, 2, 5, 100, 127], dtype=np.int8)
    check_against_numpy(text, lambda x, y: reference(x), a, a)


@pytest.mark.parametrize("text,dtype,message", [
    ("a + 9**9**9", "float32", "too large a number"),
    ("a + 2**100000", "float32", "too large a number"),
    ("a * 1000", "int8", "'1000' is out of range for int8"),
    ("a + 2**100", "int64", "'2**100' is out of range for int64"),
    ("1 // 0 + a", "float32", "'1 // 0' divides by zero"),
    ("a + 1 % 0.0", "float32", "divides by zero"),
    ("a ** -1", "int16", "negative power"),
    ("a + (-8) ** 0.5", "float64", "complex number"),
    ("a + 10.0 ** 400", "float64", "too large a number"),
    ("a - (a > 0)", "bool", "'a - (a > 0)' uses '-', which is not defined for bool and bool values"),
    ("max(" * 7 + "a" + ", a)" * 7 + " + a" * 20 + " + " + "min(a, b) + " * 90 + "a", "float32",
     "more than 300 terms"),
    ("-" * 150 + "a", "float32", "nested more than 100 levels"),
    ("(" * 300 + "a" + ")" * 300, "float32", "not valid"),
    ("a < b", "complex64", "no order"),
])
def test_hostile_expressions_refused_in_one_short_line(text, dtype, message):
    with pytest.raises(ExpressionError, match=re.escape(message)) as info:
        compile_expression(text, 2).result_dtype([np.dtype(dtype)] * 2)
    assert "\n" not in str(info.value) and len(str(info.value)) < 300


# -- item 7: bounded work ------------------------------------------------------------------------


WORST = " + ".join(f"sqrt(abs(a * {i} - b)) ** 2.5" for i in range(25))  # 299 nodes: the limit is 300


def test_worst_accepted_expression_compiles_within_seconds():
    """The largest expression the limits accept compiles (typing, numba, kernel) within seconds."""
    assert len(WORST) <= expr.MAX_LENGTH
    start = time.monotonic()
    expression = compile_expression(WORST, 2)
    a = nc.asarray(np.ones((1, 1, 4, 5), np.float32))
    out = nc.empty(a.shape, expression.result_dtype([np.float32, np.float32]))
    ewise([a, a], [out], expression.numba_function(np.float32, np.float32))
    assert time.monotonic() - start < 20
    with pytest.raises(ExpressionError, match="more than 300"):
        compile_expression(WORST + " + a * b", 2)


@pytest.mark.parametrize("text", ["9**9**9", "2**1025", "(2**600) * (2**600)", "-(10**400)", "9**9**9**9",
                                  "2 ** (2 ** 1000) * 0"])
def test_folding_huge_constants_is_refused_at_once(text):
    start = time.monotonic()
    with pytest.raises(ExpressionError, match="too large"):
        compile_expression(f"a + {text}", 1)
    assert time.monotonic() - start < 1


# -- item 10: the compiled-expression cache is bounded ----------------------------------------------


def test_compiled_expressions_are_kept_least_recently_used_first(monkeypatch):
    monkeypatch.setattr(expr, "CACHE_SIZE", 3)
    monkeypatch.setattr(expr, "_NUMBA_CACHE", type(expr._NUMBA_CACHE)())
    x = nc.asarray(np.arange(6, dtype=np.float32).reshape(1, 1, 2, 3))
    out = nc.empty(x.shape, "float32")
    functions, compiled = [], expr.compiled_count()
    for k in range(4):
        functions.append(compile_expression(f"a * {k} + 0.5", 1).numba_function(np.float32))
        ewise([x], [out], functions[-1])
        np.testing.assert_array_equal(out.numpy(), x.numpy() * k + 0.5)
        if k == 1:  # the first one used again: the second becomes the least recently used
            compile_expression("a * 0 + 0.5", 1).numba_function(np.float32)
    assert len(expr._NUMBA_CACHE) == 3 and expr.compiled_count() == compiled + 4
    kept = set(map(id, expr._NUMBA_CACHE.values()))
    assert id(functions[0]) in kept and id(functions[1]) not in kept
    # The kernels built around the dropped function went with it.
    assert not any(f is functions[1] for key in cpu._KERNELS for _, f in key[2])
    assert any(f is functions[0] for key in cpu._KERNELS for _, f in key[2])

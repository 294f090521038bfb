"""The NumPy path of expressions (noa_core.compute.compute_path, issue 27): Expression.numpy_function.

For small files `noa ewise` computes an expression with NumPy instead of numba, and the issue asks
for the same bytes whichever path computed them. So every comparison here is of bytes: the numba
element function applied through the ewise kernels (as `noa ewise` computes a tile) against
numpy_function's result stored with ``np.copyto(out, result, casting="unsafe")`` into an output of
the same type, on every type a file holds, edge values included (0, -0.0, NaN of any sign and
payload, inf, the extremes of each type). numpy_function refuses (None) the operations whose
NumPy results are not guaranteed to equal numba's on every machine (tests below).
"""

import os
import subprocess
import sys
import types

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import noa_core as nc
from noa_core.compute import compute_path, expr
from noa_core.compute.elementwise import ewise
from noa_core.compute.expr import ExpressionError, compile_expression
from noa_core.kernels import runtime

# The element types of files, and bool (comparisons).
FILE_DTYPES = [np.dtype(name) for name in
               ["bool", "int8", "uint8", "int16", "uint16", "int32", "float16", "float32", "float64", "complex64"]]


@pytest.fixture(autouse=True, scope="module")
def no_disk_cache():
    """Compile as the service does: random expressions must not fill numba's cache on disk."""
    cached, runtime.CACHE_EXPRESSIONS = runtime.CACHE_EXPRESSIONS, False
    yield
    runtime.CACHE_EXPRESSIONS = cached


def run_kernels(text: str, *arrays: np.ndarray) -> np.ndarray:
    """What the numba path stores: the element function through the ewise kernels (float16 inputs
    widened to float32 and results rounded on store by noa_core.compute.dispatch)."""
    expression = compile_expression(text, len(arrays))
    out = nc.empty((1, 1, 1, arrays[0].size), expression.result_dtype([x.dtype for x in arrays]))
    ewise([nc.asarray(np.ascontiguousarray(x).reshape(1, 1, 1, -1)) for x in arrays], [out],
          expression.numba_function(*(x.dtype for x in arrays)))
    return out.numpy().reshape(-1)


def run_element(text: str, *arrays: np.ndarray) -> np.ndarray:
    """The element function called on each element and its result stored as the kernels store it
    (float16 inputs widened to float32): for the many operations of one test, compiled in a tenth
    of the time of a kernel (the kernels themselves run in the other tests)."""
    expression = compile_expression(text, len(arrays))
    element = expression.numba_function(*(x.dtype for x in arrays))
    widened = [x.astype(np.float32) if x.dtype == np.float16 else x for x in arrays]
    with np.errstate(all="ignore"):
        return np.array([element(*values) for values in zip(*widened)],
                        expression.result_dtype([x.dtype for x in arrays]))


def run_numpy(text: str, *arrays: np.ndarray, function=None) -> np.ndarray | None:
    """What the NumPy path stores (as operations/plan.py's evaluator does), or None where it refuses."""
    expression = compile_expression(text, len(arrays))
    function = function or expression.numpy_function(*(x.dtype for x in arrays))
    if function is None:
        return None
    out = np.empty(arrays[0].shape, expression.result_dtype([x.dtype for x in arrays]))
    with np.errstate(all="ignore"):  # float32 values beyond float16 become inf, silently as on the numba path
        np.copyto(out, function(list(arrays)), casting="unsafe")
    return out.reshape(-1)


def differing(numba: np.ndarray, numpy: np.ndarray) -> np.ndarray:
    """The indices where the two results' bytes differ, a NaN against a NaN aside: IEEE 754 leaves the sign
    and payload of an arithmetic NaN unspecified, and LLVM uses that freedom (it may compile -(x * x) as
    x * -x, whose NaN keeps x's sign)."""
    assert numba.dtype == numpy.dtype and numba.shape == numpy.shape
    bytes_differ = (numba.view(np.uint8).reshape(numba.size, -1) != numpy.view(np.uint8).reshape(numpy.size, -1))
    both_nan = np.isnan(numba) & np.isnan(numpy) if numba.dtype.kind in "fc" else np.zeros(numba.size, bool)
    return np.flatnonzero(bytes_differ.any(axis=1) & ~both_nan.reshape(-1))


def assert_same_bytes(text: str, arrays: tuple[np.ndarray, ...], numba: np.ndarray, numpy: np.ndarray) -> None:
    where = differing(numba, numpy)
    if where.size:
        i = where[0]
        raise AssertionError(f"{text!r} on {[x.dtype.name for x in arrays]}: {where.size} of {numba.size} differ, "
                             f"first at inputs {[x.reshape(-1)[i] for x in arrays]}: numba {numba[i]!r}, "
                             f"NumPy {numpy[i]!r}")


def edges(dtype: np.dtype) -> np.ndarray:
    """The edge values of ``dtype``: zeros, ones, extremes, NaN of both signs, infinities, subnormals."""
    if dtype.kind == "b":
        return np.array([False, True])
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        values = [info.min, info.min + 1, info.max - 1, info.max, 0, 1, 2, 3, 7]
        return np.array(values + ([-1, -2, -3, -7] if info.min else []), dtype)
    real = np.finfo(dtype).dtype
    info = np.finfo(real)
    values = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -1.5, 2.5, -2.5, 3.0, 7.0, info.max, -info.max, info.tiny,
                       -info.smallest_subnormal, np.inf, -np.inf, np.nan, -np.nan], real)
    if dtype.kind == "c":
        pairs = np.empty((values.size, values[::3].size), dtype)
        pairs.real, pairs.imag = values[:, None], values[None, ::3]
        return pairs.reshape(-1)
    return values


def edge_pairs(dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of edge values of ``dtype``, and random values of every magnitude."""
    rng = np.random.default_rng(27)
    values = edges(dtype)
    a, b = (x.reshape(-1) for x in np.meshgrid(values, values))
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        extra = rng.integers(info.min, info.max, (2, 2000), dtype, endpoint=True)
        small = rng.integers(max(info.min, -20), 20, (2, 2000)).astype(dtype)
        extra = np.concatenate([extra, small], axis=1)
    elif dtype.kind == "b":
        extra = rng.integers(0, 2, (2, 20)).astype(bool)
    else:
        real = np.finfo(dtype).dtype
        with np.errstate(all="ignore"):
            random = [rng.choice([-1, 1], (2, 2000)) * np.exp(rng.uniform(-30, 30, (2, 2000))),
                      rng.uniform(-20, 20, (2, 2000))]
            extra = np.concatenate(random + [np.round(random[1])], axis=1).astype(real)
        if dtype.kind == "c":
            extra, real = np.empty(extra.shape, dtype), extra
            extra.real, extra.imag = real, real[::-1]
    return np.concatenate([a, extra[0]]), np.concatenate([b, extra[1]])


# -- every accepted operation on every file type ---------------------------------------------------

ACCEPTED = ["a + b", "a - b", "a * b", "a / b", "a // b", "a % b", "a ** b", "-a", "+a", "abs(a)", "sqrt(a)",
            "floor(a)", "ceil(a)", "min(a, b)", "max(a, b)", "a < b", "a <= b", "a > b", "a >= b", "a == b",
            "a != b", "a and b", "a or b", "not a", "b if a else a"]
# Accepted on these kinds of the type they are computed in; refused on the others (see REFUSED).
ONLY_ON = {"a * b": "biuf", "a / b": "biuf", "a ** b": "biu", "abs(a)": "biuf", "sqrt(a)": "biuf"}


@pytest.mark.parametrize("dtype", FILE_DTYPES, ids=str)
def test_every_accepted_operation_stores_the_bytes_numba_stores(dtype):
    a, b = edge_pairs(dtype)
    for text in ACCEPTED:
        try:
            expression = compile_expression(text, 2)
            computed = expression.result_dtype([dtype, dtype])
        except ExpressionError:  # not defined for this type (NumPy refuses it too)
            continue
        function = expression.numpy_function(dtype, dtype)
        kinds = ONLY_ON.get(text, "biufc")
        # The kind of the type the operation is computed in: the result's where NumPy converts the
        # inputs (a ** b of bools is in int8, sqrt and / of integers in floats), else the inputs'.
        kind = computed.kind if text in ("a ** b", "sqrt(a)", "a / b") else dtype.kind
        if kind not in kinds:
            assert function is None, (text, dtype)
            continue
        assert function is not None, (text, dtype)
        assert_same_bytes(text, (a, b), run_element(text, a, b), run_numpy(text, a, b, function=function))


# -- random trees over random types ------------------------------------------------------------------


def elements(dtype: np.dtype):
    """Values of ``dtype``: any (integers over their whole range, floats of any magnitude with NaN of
    any payload, infinities and subnormals), often an edge value."""
    if dtype.kind == "b":
        return st.booleans()
    edge = st.sampled_from(edges(dtype).tolist())
    if dtype.kind in "iu":
        return st.integers(int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)) | edge
    if dtype.kind == "f":
        return st.floats(width=dtype.itemsize * 8) | st.floats(-20, 20, width=dtype.itemsize * 8) | edge
    part = st.floats(width=dtype.itemsize * 4) | st.floats(-20, 20, width=dtype.itemsize * 4)
    return st.builds(complex, part, part) | edge


SIZE = 16
ARRAYS = st.sampled_from(FILE_DTYPES).flatmap(lambda dtype: hnp.arrays(dtype, SIZE, elements=elements(dtype)))
BINARY = ["+", "-", "*", "/", "//", "%", "**", "<", "<=", ">", ">=", "==", "!=", "and", "or"]
LEAVES = st.sampled_from(["a", "b", "c", "a", "b", "c", "0", "3", "-1", "100", "2.5", "-0.0", "True", "1e300 * 1e300",
                          "1e300 * 1e300 - 1e300 * 1e300"])


def _extend(children):
    return (st.builds(lambda op, x, y: f"({x}) {op} ({y})", st.sampled_from(BINARY), children, children)
            | st.builds(lambda op, x: f"{op}({x})", st.sampled_from(["-", "+", "not "]), children)
            | st.builds(lambda name, x: f"{name}({x})", st.sampled_from(["abs", "sqrt", "floor", "ceil"]), children)
            | st.builds(lambda name, x, y: f"{name}({x}, {y})", st.sampled_from(["min", "max"]), children, children)
            | st.builds(lambda name, x, y, z: f"{name}({x}, {y}, {z})", st.sampled_from(["clip", "where"]),
                        children, children, children)
            | st.builds(lambda x, y, z: f"({x}) if ({y}) else ({z})", children, children, children))


EXPRESSIONS = st.recursive(LEAVES, _extend, max_leaves=6)


@pytest.mark.slow  # 35-240 s: scripts/test runs it after the rest
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(EXPRESSIONS, ARRAYS, ARRAYS, ARRAYS)
def test_random_expressions_store_the_same_bytes_on_both_paths(text, a, b, c):
    """Random trees of the accepted operations over three inputs of random file types: both paths
    store the same bytes, or the NumPy path refuses (a power of floats, or complex values)."""
    note(f"{text!r} on {a!r}, {b!r}, {c!r}")
    try:
        expression = compile_expression(text, 3)
        expression.result_dtype([a.dtype, b.dtype, c.dtype])
    except ExpressionError:  # refused as NumPy refuses it (tests/compute/test_expr.py)
        event("refused by the language")
        return
    function = expression.numpy_function(a.dtype, b.dtype, c.dtype)
    if function is None:
        event("refused by the NumPy path")
        assert "**" in text or "c" in (a.dtype.kind, b.dtype.kind, c.dtype.kind), text
        return
    event("compared")
    assert_same_bytes(text, (a, b, c), run_kernels(text, a, b, c), run_numpy(text, a, b, c, function=function))


# -- what the NumPy path refuses ----------------------------------------------------------------------

# The rule: the NumPy path takes an operation on a kind of value only where IEEE 754 (or integer
# arithmetic) fixes the result bit for bit, so that NumPy and numba agree on every machine. Exactly
# rounded operations (+ - * / sqrt, comparisons, min/max, floor/ceil, NumPy's // and %, which numba
# copies) qualify on reals; on complex values only those computed part by part (+, -, comparisons,
# where). Transcendental functions and powers of floats are left to each library's math code (SIMD,
# FMA, SVML or the C library, by machine), so they may differ in the last bits on some CPU and
# not on another: refused everywhere, whether or not they differ here.
EXACTLY_ROUNDED = {"add", "subtract", "negative", "positive", "multiply", "true_divide", "floor_divide", "remainder",
                   "absolute", "sqrt", "minimum", "maximum", "floor", "ceil", "less", "less_equal", "greater",
                   "greater_equal", "equal", "not_equal", "logical_and", "logical_or", "logical_not", "where",
                   "constant"}
COMPLEX_PART_BY_PART = {"add", "subtract", "negative", "positive", "less", "less_equal", "greater", "greater_equal",
                        "equal", "not_equal", "logical_and", "logical_or", "logical_not", "where", "constant"}
REFUSED = [("exp(a)", "float32"), ("log(a)", "float32"), ("log10(a)", "float32"), ("sin(a)", "float32"),
           ("cos(a)", "float32"), ("tan(a)", "float32"), ("a ** b", "float32"), ("exp(a)", "float64"),
           ("log10(a)", "float64"), ("tan(a)", "float64"), ("a ** b", "float64"), ("a ** 0.5", "float32"),
           ("sin(a)", "float64"), ("cos(a)", "float64"), ("log(a)", "float64"), ("exp(a)", "float16"),
           ("a * b", "complex64"), ("a / b", "complex64"), ("abs(a)", "complex64"), ("sqrt(a)", "complex64"),
           ("a ** b", "complex64"), ("exp(a)", "complex64"), ("tan(a)", "complex64"), ("a * b", "complex128"),
           ("a / b", "complex128")]


def test_the_numpy_path_takes_only_operations_whose_bits_ieee_fixes():
    """What _NUMPY_EXACT accepts is the rule above: no transcendental function or float power on any
    kind, nothing beyond part-by-part operations on complex values, integer powers on integers only."""
    for op, kinds in expr._NUMPY_EXACT.items():
        if op == "integer_power":
            assert set(kinds) <= set("biu"), (op, kinds)
            continue
        assert op in EXACTLY_ROUNDED, op
        if "c" in kinds:
            assert op in COMPLEX_PART_BY_PART, op


@pytest.mark.parametrize("text,dtype", REFUSED, ids=str)
def test_operations_without_guaranteed_equality_are_refused(text, dtype):
    """Refused whatever this machine's libraries compute (they may agree here and differ elsewhere)."""
    dtype = np.dtype(dtype)
    assert compile_expression(text, 2).numpy_function(dtype, dtype) is None


@pytest.mark.parametrize("text", ["exp(a)", "sin(a) + 1", "a ** 2.5", "where(a > 0, log(a), a)", "abs(a) ** 2.0"])
@pytest.mark.parametrize("dtype", FILE_DTYPES, ids=str)
def test_expressions_with_a_refused_operation_are_refused_whole(text, dtype):
    try:
        expression = compile_expression(text, 1)
        expression.result_dtype([dtype])
    except ExpressionError:
        return
    assert expression.numpy_function(dtype) is None


# -- the contract with operations/plan.py ------------------------------------------------------------


def test_inputs_may_be_views_read_only_strided_or_broadcast_and_are_never_written():
    rng = np.random.default_rng(0)
    base = rng.uniform(-100, 100, (6, 10)).astype(np.float16)
    strided = base[::2, ::3]  # (3, 4), not contiguous
    broadcast = np.broadcast_to(np.arange(4, dtype=np.int16), (3, 4))  # 0 stride, read-only
    readonly = rng.integers(-128, 127, (3, 4)).astype(np.int8)
    readonly.flags.writeable = False
    inputs = [strided, broadcast, readonly]
    before = [x.copy() for x in inputs]
    text = "where(a > b, a * 3 + c, min(b, c) // 2) - (a if c else b)"
    expression = compile_expression(text, 3)
    function = expression.numpy_function(*(x.dtype for x in inputs))
    out = np.empty((3, 4), expression.result_dtype([x.dtype for x in inputs]))
    np.copyto(out, function(inputs), casting="unsafe")
    for x, original in zip(inputs, before):
        np.testing.assert_array_equal(x, original)
    assert_same_bytes(text, tuple(inputs), run_kernels(text, *(np.ascontiguousarray(x) for x in inputs)),
                      out.reshape(-1))


@pytest.mark.parametrize("text", ["a", "1 + 2", "2.5", "a < 1000", "True", "3 if a else -1",
                                  "1e300 * 1e300 - 1e300 * 1e300", "a + (1e300 * 1e300 - 1e300 * 1e300)"])
def test_results_broadcast_onto_the_output(text):
    """An input itself, a constant or a comparison decided by the types: what comes back need not
    have the output's shape, only broadcast onto it. (A folded NaN is the element function's nan,
    positive, whatever the sign of the NaN Python computed.)"""
    a = np.array([[-128, -1, 0], [1, 5, 127]], np.int8)
    expression = compile_expression(text, 1)
    out = np.empty(a.shape, expression.result_dtype([a.dtype]))
    result = expression.numpy_function(a.dtype)([a])
    np.copyto(out, result, casting="unsafe")
    assert_same_bytes(text, (a,), run_kernels(text, a.reshape(-1)), out.reshape(-1))
    if text == "a":
        assert not np.shares_memory(out, a)


def test_float16_steps_are_rounded_each_as_numpy_rounds_them():
    """(a * 3) / 7 + 0.1 in float16: NumPy rounds the product (65504 * 3 is inf), the quotient and
    the sum to float16; both of noa's paths give NumPy's bytes."""
    a = np.array([1000.5, -3.25, 0.1, 65504, 1e-7, np.nan], np.float16)
    text = "(a * 3) / 7 + 0.1"
    numpy = run_numpy(text, a)
    assert numpy.dtype == np.float16
    assert_same_bytes(text, (a,), run_kernels(text, a), numpy)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(numpy, (a * 3) / 7 + 0.1)
        assert np.isinf(numpy[3])


_NUMBA_FREE = """
import sys
import numpy as np
from noa_core.compute.expr import compile_expression

expression = compile_expression("where(a > b, a * 2.5, b // 3) + (a if a else -b) * 2", 2)
assert expression.result_dtype(["float32", "int16"]) == np.float32
result = expression.numpy_function("float32", "int16")([np.ones(4, np.float32), np.arange(4, dtype=np.int16)])
assert result.dtype == np.float32 and result.shape == (4,)
assert compile_expression("exp(a)", 1).numpy_function("float32") is None
print(sorted(name for name in sys.modules if name.split(".")[0] in ("numba", "llvmlite")))
"""


def test_the_numpy_path_never_imports_numba():
    """Compiling, typing and computing an expression with NumPy loads neither numba nor llvmlite
    (importing them is what the NumPy path saves, about half a second)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("NUMBA_")}
    result = subprocess.run([sys.executable, "-c", _NUMBA_FREE], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"


def test_the_work_loads_the_kernels_first_only_on_numbas_path_before_numba_is_imported(monkeypatch):
    monkeypatch.delitem(sys.modules, "numba", raising=False)
    with compute_path.using("numba"):
        assert compute_path.kernels_to_load()
    with compute_path.using("numpy"):
        assert not compute_path.kernels_to_load()
    monkeypatch.setitem(sys.modules, "numba", types.ModuleType("numba"))
    with compute_path.using("numba"):
        assert not compute_path.kernels_to_load()

"""The expression language: what it refuses, and that its numba and NumPy forms agree."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noa_core.compute.expr import ExpressionError, compile_expression

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

"""Element-wise kernels (ewise, copy, permute_copy, astype, fill, arithmetic) against NumPy."""

from __future__ import annotations

import operator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import noa_core as nc
from helpers import LAYOUTS, layout_values, make_array
from noa_core.array import layout
from noa_core.compute.conversion import convert_into
from noa_core.errors import BroadcastError, DeviceError, DTypeError, OverlapError, ReadOnlyError, StrideError
from noa_core.kernels.runtime import SERIAL_THRESHOLD

SETTINGS = settings(max_examples=40, deadline=None)
shapes = st.tuples(*(st.integers(1, 5) for _ in range(3)), st.integers(0, 9)).map(
    lambda s: (s[0], s[1], s[2], s[3]))



# -- layout helpers appended for the kernels -------------------------------------------------------


def test_memory_span_and_overlap():
    assert layout.memory_span(3, (1, 1, 2, 3), (6, 6, 3, 1)) == (3, 9)
    assert layout.memory_span(3, (1, 1, 0, 3), (6, 6, 3, 1)) == (3, 3)
    assert layout.memory_span(0, (1, 1, 1, 2), (2, 2, 2, 1), itemsize=4) == (0, 5)
    assert layout.may_overlap(0, (1, 1, 1, 4), (4, 4, 4, 1), 3, (1, 1, 1, 4), (4, 4, 4, 1))
    assert not layout.may_overlap(0, (1, 1, 1, 4), (4, 4, 4, 1), 4, (1, 1, 1, 4), (4, 4, 4, 1))
    # each span ends with its own element: 16-byte items right after four 4-byte ones do not overlap them
    assert not layout.may_overlap(16, (1, 1, 1, 4), (64, 64, 64, 16), 0, (1, 1, 1, 4), (16, 16, 16, 4), 16, 4)
    assert layout.may_overlap(12, (1, 1, 1, 4), (64, 64, 64, 16), 0, (1, 1, 1, 4), (16, 16, 16, 4), 16, 4)


def test_a_wider_output_right_after_its_input_is_written():
    """int32 -> complex128 into the array allocated just after the input (the allocator's usual place)."""
    buffer = np.zeros(4 * 4 + 16 * 4, np.uint8)
    source = buffer[:16].view(np.int32).reshape(1, 1, 1, 4)
    source[:] = [1, -2, 3, 4]
    target = buffer[16:].view(np.complex128).reshape(1, 1, 1, 4)
    convert_into(nc.asarray(source), nc.asarray(target))
    np.testing.assert_array_equal(target, source.astype(np.complex128))
    assert layout.same_elements(2, (8, 8, 4, 1), 2, (9, 8, 4, 1), (1, 2, 2, 4))
    assert not layout.same_elements(2, (8, 8, 4, 1), 2, (8, 8, 1, 4), (1, 2, 2, 4))


# -- copy, permute_copy ----------------------------------------------------------------------------


@SETTINGS
@given(shape=shapes, kind=st.sampled_from(LAYOUTS), order=st.sampled_from("CFK"),
       dtype=st.sampled_from(["float32", "float64", "int16", "uint8", "bool", "complex128", "float16"]),
       seed=st.integers(0, 2**16))
def test_copy_matches_numpy(shape, kind, order, dtype, seed):
    a = make_array(np.random.default_rng(seed), shape, dtype, kind)
    out = a.copy(order)
    np.testing.assert_array_equal(out.numpy(), a.numpy())
    assert out.dtype == a.dtype
    expected = "F" if order == "F" or (order == "K" and a.order == "F") else "C"
    assert out.are_contiguous(expected)


@SETTINGS
@given(shape=shapes, kind=st.sampled_from(LAYOUTS), perm=st.permutations(range(4)),
       dtype=st.sampled_from(["float32", "int64", "uint16", "complex64"]), seed=st.integers(0, 2**16))
def test_permute_copy_matches_numpy(shape, kind, perm, dtype, seed):
    a = make_array(np.random.default_rng(seed), shape, dtype, kind)
    out = a.permute_copy(perm)
    np.testing.assert_array_equal(out.numpy(), np.transpose(a.numpy(), perm))
    assert out.are_contiguous("C")


@pytest.mark.parametrize("shape", [(1, 1, 70, 130), (3, 1, 64, 64), (1, 9, 33, 100), (2, 3, 129, 65), (1, 2, 256, 192)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "uint16", "int8", "complex128"])
def test_permute_copy_tiled_transpose(shape, dtype):
    # Shapes large enough for the cache-blocked path: full tiles (written in vector-transposed
    # micro-blocks) and partial edge tiles, for each tile size (it depends on the element size).
    # A copy moves machine words (complex128 as two uint64 words, so not through the tiles).
    x = layout_values(np.random.default_rng(1), shape, dtype)
    for perm in [(0, 1, 3, 2), (0, 2, 3, 1), (3, 1, 2, 0)]:
        np.testing.assert_array_equal(nc.asarray(x).permute_copy(perm).numpy(), np.transpose(x, perm))


@pytest.mark.parametrize("op, dtype, target", [("negate", "complex128", "complex128"),
                                              ("negate", "complex64", "complex64"),
                                              ("nonzero", "float32", "bool"), ("negate", "int8", "int8")])
@pytest.mark.parametrize("misaligned", [False, True])
def test_tiled_transpose_of_every_element_width(op, dtype, target, misaligned):
    # An operator (not a raw copy) keeps the element type, so 16-byte and bool elements reach the
    # vector-transposed micro-blocks too. A misaligned output is one NumPy still calls aligned:
    # a complex128 at an address of 8 modulo 16.
    x = layout_values(np.random.default_rng(5), (1, 2, 136, 72), dtype)
    itemsize = np.dtype(target).itemsize
    raw = np.zeros(x.size * itemsize + 8, np.uint8)[8 if misaligned else 0:][:x.size * itemsize]
    out = raw.view(target).reshape(1, 2, 72, 136)
    nc.ewise([nc.asarray(x)], [nc.asarray(out).permute((0, 1, 3, 2))], op)
    expected = -x if op == "negate" else x != 0
    np.testing.assert_array_equal(out.transpose(0, 1, 3, 2), expected)


@pytest.mark.parametrize("source, target", [("float32", "float64"), ("float64", "int16"), ("uint8", "float32")])
def test_transposed_cast(source, target):
    # A cast into a transposed layout takes the tiled path too: the cast fills the tile, the
    # micro-blocks move the target type.
    x = layout_values(np.random.default_rng(4), (2, 1, 130, 200), source)
    out = nc.empty((2, 1, 200, 130), target).permute((0, 1, 3, 2))
    nc.ewise([nc.asarray(x)], [out], "identity")
    np.testing.assert_array_equal(out.numpy(), x.astype(target))


def test_copy_large_parallel_and_transposed():
    x = np.random.default_rng(2).random((2, 3, 300, 310), dtype=np.float32)  # past SERIAL_THRESHOLD
    assert x.size >= SERIAL_THRESHOLD
    np.testing.assert_array_equal(nc.asarray(x).copy("F").numpy(), x)
    np.testing.assert_array_equal(nc.asarray(x).permute_copy((1, 0, 3, 2)).numpy(), x.transpose(1, 0, 3, 2))


@pytest.mark.parametrize("element", [nc.vector("float32", 3), nc.matrix("float64", 2, 2), nc.vector("int8", 5)])
@pytest.mark.parametrize("kind", ["C", "permuted", "sliced"])
def test_copy_vector_elements(element, kind):
    base = np.dtype(element).subdtype[0]
    el_shape = np.dtype(element).subdtype[1]
    rng = np.random.default_rng(3)
    values = layout_values(rng, (2, 3, 4, 5) + el_shape, base)
    a = nc.asarray(values, dtype=element)
    if kind == "permuted":
        a = a.permute((1, 0, 3, 2))
    elif kind == "sliced":
        a = a[:, ::2, 1:, ::2]
    for order in "CF":
        out = a.copy(order)
        np.testing.assert_array_equal(out.numpy(), a.numpy())
    np.testing.assert_array_equal(a.permute_copy((0, 1, 3, 2)).numpy(), np.swapaxes(a.numpy(), 2, 3))


def test_copy_and_fill_empty():
    a = nc.zeros((2, 0, 3, 4))
    assert a.copy("F").shape == (2, 0, 3, 4)
    assert a.fill(3).shape == (2, 0, 3, 4)
    assert (a + 1).shape == (2, 0, 3, 4)


# -- fill ------------------------------------------------------------------------------------------


@SETTINGS
@given(shape=shapes, kind=st.sampled_from(LAYOUTS), dtype=st.sampled_from(["float32", "int8", "complex64", "bool"]),
       value=st.integers(-5, 5))
def test_fill_matches_numpy(shape, kind, dtype, value):
    a = make_array(np.random.default_rng(0), shape, dtype, kind)
    a.fill(value)
    np.testing.assert_array_equal(a.numpy(), np.full(shape, value, dtype=dtype))


def test_fill_vector_and_matrix():
    v = nc.empty((2, 1, 3, 4), nc.vector("float32", 3), order="F")
    v.fill([1, 2, 3])
    assert (v.numpy() == np.array([1, 2, 3], np.float32)).all()
    m = nc.empty((5, 1, 1, 1), nc.matrix("float64", 4, 4))
    m.fill(np.eye(4))
    assert (m.numpy() == np.eye(4)).all()


# -- astype ----------------------------------------------------------------------------------------

CAST_TYPES = ["bool", "int8", "uint8", "int32", "int64", "uint32", "float16", "float32", "float64", "complex64"]


@SETTINGS
@given(shape=shapes, kind=st.sampled_from(LAYOUTS), src=st.sampled_from(CAST_TYPES), dst=st.sampled_from(CAST_TYPES),
       seed=st.integers(0, 2**16))
def test_astype_matches_numpy(shape, kind, src, dst, seed):
    a = make_array(np.random.default_rng(seed), shape, src, kind)
    x = a.numpy()
    if np.dtype(dst).kind in "iub" and np.dtype(src).kind in "fc":
        # Out-of-range float to integer is undefined in C and NumPy: compare in-range values only.
        a.fill(0) if np.dtype(dst).kind == "u" else None
        x = a.numpy()
    out = a.astype(dst)
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = x.astype(dst)
    assert out.dtype == np.dtype(dst)
    np.testing.assert_array_equal(out.numpy(), expected)
    assert out.order in ("C", "F") or out.size == 0


def test_astype_clamp():
    x = nc.asarray(np.array([np.nan, 1e10, -1e10, 3.7, -3.7, np.inf, -np.inf]))
    np.testing.assert_array_equal(x.astype("int32", clamp=True).numpy().ravel(),
                                  [0, 2**31 - 1, -(2**31), 3, -3, 2**31 - 1, -(2**31)])
    np.testing.assert_array_equal(x.astype("uint8", clamp=True).numpy().ravel(), [0, 255, 0, 3, 0, 255, 0])
    f = x.astype("float32", clamp=True).numpy().ravel()
    assert np.isnan(f[0]) and f[1] == 1e10 and f[5] == np.finfo(np.float32).max
    big = nc.asarray(np.array([1e300, -1e300]))
    np.testing.assert_array_equal(big.astype("float32", clamp=True).numpy().ravel(),
                                  [np.finfo(np.float32).max, np.finfo(np.float32).min])
    ints = nc.asarray(np.array([-300, -5, 70000], np.int64))
    np.testing.assert_array_equal(ints.astype("uint16", clamp=True).numpy().ravel(), [0, 0, 65535])
    np.testing.assert_array_equal(ints.astype("int8", clamp=True).numpy().ravel(), [-128, -5, 127])
    np.testing.assert_array_equal(nc.asarray(np.array([2**40], np.float32)).astype("int32", clamp=True).numpy().ravel(),
                                  [2147483520])


# -- ewise and arithmetic --------------------------------------------------------------------------

ARITH_TYPES = ["float32", "float64", "int32", "uint8", "int8", "complex64", "float16"]
OPS = [operator.add, operator.sub, operator.mul, operator.truediv]


@pytest.mark.slow  # 10-35 s: scripts/test runs it after the rest
@SETTINGS
@given(shape=shapes, ka=st.sampled_from(LAYOUTS + ("broadcast",)), kb=st.sampled_from(LAYOUTS + ("broadcast",)),
       ta=st.sampled_from(ARITH_TYPES), tb=st.sampled_from(ARITH_TYPES), op=st.sampled_from(OPS),
       seed=st.integers(0, 2**16))
def test_arithmetic_matches_numpy(shape, ka, kb, ta, tb, op, seed):
    rng = np.random.default_rng(seed)

    def operand(kind, dtype):
        if kind == "broadcast":  # a size-1 dimension, broadcast by the operator
            small = tuple(1 if i in (1, 3) else n for i, n in enumerate(shape))
            return make_array(rng, small, dtype, "C")
        return make_array(rng, shape, dtype, kind)

    a, b = operand(ka, ta), operand(kb, tb)
    if b.size and b.writable:
        b.numpy()[..., ::3] = 0  # divisions by zero give NumPy's inf/nan, complex ones too
    with np.errstate(all="ignore"):
        expected = op(a.numpy(), b.numpy())
    out = op(a, b)
    assert out.dtype == expected.dtype
    assert out.shape == expected.shape
    tol = 1e-3 if np.float16 in (a.dtype, b.dtype) else 1e-6
    result = out.numpy()
    for part in (np.real, np.imag):  # separately: inf+nanj must match as such
        np.testing.assert_allclose(part(result), part(expected), rtol=tol, atol=tol, equal_nan=True)


@pytest.mark.parametrize("dtype", ["float32", "int16", "float16", "complex128"])
def test_arithmetic_with_scalars(dtype):
    x = layout_values(np.random.default_rng(4), (2, 1, 3, 4), dtype)
    a = nc.asarray(x)
    for got, want in [(a + 2, x + 2), (3 - a, 3 - x), (a * 0.5, x * 0.5), (2 / (a * 0 + 4), 2 / (x * 0 + 4)),
                      (-a, -x), (a - np.float32(1.5), x - np.float32(1.5))]:
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-3)


def test_arithmetic_bool_subtract_refused():
    b = nc.asarray(np.array([True, False]))
    with pytest.raises(DTypeError, match="subtract"):
        b - b


def test_ewise_user_function_several_outputs_and_scalars():
    rng = np.random.default_rng(5)
    x, y = rng.random((2, 3, 4, 5)), rng.random((1, 1, 4, 5))
    s, d = nc.empty(x.shape, "float64"), nc.empty(x.shape, "float32", order="F")

    def sum_diff(a, b, k):
        return a + b * k, a - b

    nc.ewise([nc.asarray(x), nc.asarray(y), 2.0], [s, d], sum_diff)
    np.testing.assert_allclose(s.numpy(), x + 2 * y)
    np.testing.assert_allclose(d.numpy(), (x - y).astype(np.float32), rtol=1e-6)


def test_ewise_in_place_and_builtin_names():
    x = nc.asarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    nc.ewise([x, x], x, "multiply")
    np.testing.assert_array_equal(x.numpy().ravel(), np.arange(12) ** 2)
    nc.ewise([x, 1], x, operator.add)
    np.testing.assert_array_equal(x.numpy().ravel(), np.arange(12) ** 2 + 1)


def test_ewise_large_parallel_strided():
    rng = np.random.default_rng(6)
    x = rng.random((4, 8, 260, 130)).astype(np.float32)  # the view is past SERIAL_THRESHOLD
    a = nc.asarray(x)[:, :, ::2, 1:]
    out = nc.empty(a.shape, "float64", order="F")
    nc.ewise([a, a.permute((0, 1, 2, 3))], out, lambda u, v: u * v + 1)
    np.testing.assert_allclose(out.numpy(), x[:, :, ::2, 1:].astype(np.float64) ** 2 + 1, rtol=1e-6)


# -- errors ----------------------------------------------------------------------------------------


def test_broadcast_output_refused():
    out = nc.zeros((1, 1, 1, 4)).broadcast((1, 1, 3, 4))
    with pytest.raises(StrideError, match=r"broadcast \(stride-0\)"):
        nc.ewise([1.0], out, "identity")


def test_overlapping_output_refused():
    x = nc.zeros((1, 1, 4, 4))
    with pytest.raises(OverlapError, match="overlaps an input"):
        nc.ewise([x[:, :, :3, :]], x[:, :, 1:, :], "identity")
    with pytest.raises(OverlapError, match="overlaps an input"):
        nc.ewise([x], x.permute((0, 1, 3, 2)), "identity")
    with pytest.raises(OverlapError, match="two outputs"):
        nc.ewise([1.0], [x, x], lambda v: (v, v))
    nc.ewise([x[:, :, :2, :]], x[:, :, 2:, :], "identity")  # disjoint halves are fine


def test_non_broadcastable_shapes_named():
    a, b = nc.zeros((1, 1, 3, 4)), nc.zeros((1, 1, 2, 4))
    with pytest.raises(BroadcastError, match=r"\(1, 1, 3, 4\).*\(1, 1, 2, 4\)"):
        a + b
    with pytest.raises(BroadcastError, match=r"\(1, 1, 2, 4\).*\(1, 1, 3, 4\)"):
        nc.ewise([b], nc.zeros((1, 1, 3, 4)), "identity")


def test_unwritable_output_refused():
    x = np.zeros((3, 4), np.float32)
    x.flags.writeable = False
    with pytest.raises(ReadOnlyError, match="read-only"):
        nc.ewise([1.0], nc.asarray(x), "identity")


def test_mixed_devices_refused():
    if not nc.cuda_available():
        with pytest.raises(DeviceError, match="not available"):
            nc.zeros((1, 1, 2, 2), device="cuda")
        return
    with pytest.raises(DeviceError, match=r"cpu and cuda|cuda and cpu"):
        nc.zeros((2, 2)) + nc.zeros((2, 2), device="cuda")


def test_vector_elements_refused_by_ewise():
    v = nc.zeros((1, 1, 2, 2), nc.vector("float32", 2))
    with pytest.raises(DTypeError, match="scalar element types"):
        nc.ewise([v], nc.zeros((1, 1, 2, 2)), "identity")
    with pytest.raises(DTypeError):
        v + 1


# -- runtime: compilation cache directory ----------------------------------------------------------


def test_choose_cache_dir(tmp_path):
    from noa_core.kernels.runtime import choose_cache_dir

    package = tmp_path / "pkg"
    (package / "kernels").mkdir(parents=True)
    assert choose_cache_dir({"HOME": str(tmp_path)}, package) is None  # writable package: numba's default
    explicit = tmp_path / "explicit"
    assert choose_cache_dir({"NUMBA_CACHE_DIR": str(explicit)}, package) == str(explicit)
    # A file where __pycache__ should be: unwritable even for root (chmod does not stop root).
    package = tmp_path / "readonly_pkg"
    package.mkdir()
    (package / "__pycache__").write_text("")
    xdg, home = tmp_path / "xdg", tmp_path / "home"
    assert choose_cache_dir({"XDG_CACHE_HOME": str(xdg)}, package) == str(xdg / "noa" / "numba")
    assert choose_cache_dir({"HOME": str(home)}, package) == str(home / ".cache" / "noa" / "numba")
    blocked = tmp_path / "blocked"
    blocked.write_text("")
    fallback = choose_cache_dir({"NUMBA_CACHE_DIR": str(blocked / "x"), "XDG_CACHE_HOME": str(blocked / "y")}, package)
    assert fallback is not None and not fallback.startswith(str(blocked))


def test_no_writable_folder_at_all_disables_the_cache(tmp_path, monkeypatch):
    import tempfile

    from noa_core.kernels import runtime

    blocked = tmp_path / "blocked"
    blocked.write_text("")
    package = tmp_path / "readonly_pkg"
    package.mkdir()
    (package / "__pycache__").write_text("")

    def no_temp() -> str:  # what tempfile.gettempdir raises on a read-only root without /tmp
        raise FileNotFoundError("No usable temporary directory found")

    monkeypatch.setattr(tempfile, "gettempdir", no_temp)
    env = {"NUMBA_CACHE_DIR": str(blocked / "x"), "XDG_CACHE_HOME": str(blocked / "y"), "HOME": str(blocked)}
    assert runtime.choose_cache_dir(env, package) == runtime.NO_CACHE
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(blocked))  # a temp dir that cannot be written
    assert runtime.choose_cache_dir(env, package) == runtime.NO_CACHE


def test_unwritable_cache_dir_falls_back_in_a_subprocess(tmp_path):
    import os
    import subprocess
    import sys

    blocked = tmp_path / "blocked"
    blocked.write_text("a file, so no directory can be created here")
    code = ("import noa_core as nc, numba, numpy as np;"
            "x = nc.asarray(np.arange(6.0)); assert ((x + 1).numpy() == np.arange(6.0) + 1).all();"
            "print(numba.config.CACHE_DIR)")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(blocked / "cache"), XDG_CACHE_HOME=str(tmp_path / "xdg"))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    chosen = result.stdout.strip()
    assert not chosen.startswith(str(blocked))

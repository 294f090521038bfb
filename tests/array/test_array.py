"""Array: factories, views, copies and NumPy interop, checked against NumPy."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import noa_core as noa
from noa_core.array.dtypes import SCALAR_NAMES
from noa_core.errors import (
    BroadcastError,
    DTypeError,
    LayoutError,
    PermutationError,
    ReshapeError,
    ShapeError,
    StrideError,
)


def test_issue_examples():
    a = noa.zeros((1, 3, 4, 5))
    assert a.strides == (60, 20, 5, 1)
    p = a.permute((0, 1, 3, 2))
    assert p.shape == (1, 3, 5, 4) and p.strides == (60, 20, 1, 5)
    assert p.are_contiguous("F") and not p.are_contiguous("C")
    assert p.copy().are_contiguous("C")
    pc = a.permute_copy((0, 1, 3, 2))
    assert pc.are_contiguous("C") and not pc.are_contiguous("F")
    b = a.broadcast((10, 3, 4, 5))
    assert b.strides == (0, 20, 5, 1)
    assert not b.are_contiguous("C") and not b.are_contiguous("F")
    assert b.is_contiguous("C") == (False, True, True, True)
    v = noa.empty((1, 30, 64, 128))
    assert v.strides == (245760, 8192, 128, 1)
    assert noa.empty((1, 30, 64, 128), order="F").strides == (245760, 8192, 1, 64)
    assert noa.empty((2, 3, 4, 5)).strides == (60, 20, 5, 1)
    assert noa.empty((64, 1, 32, 32)).ndim == 2 and noa.empty((64, 1, 32, 32)).kind == "image stack"
    assert noa.empty((1, 64, 32, 32)).ndim == 3 and noa.empty((1, 64, 32, 32)).kind == "volume"


def test_factories_match_numpy():
    assert np.array_equal(np.asarray(noa.zeros((2, 3))), np.zeros((1, 1, 2, 3), np.float32))
    assert np.array_equal(np.asarray(noa.ones(4, dtype="int16")), np.ones((1, 1, 1, 4), np.int16))
    assert np.array_equal(np.asarray(noa.full((1, 2, 2, 2), 7.5, dtype="float64")), np.full((1, 2, 2, 2), 7.5))
    assert np.array_equal(np.asarray(noa.arange((2, 3, 4))), np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4))
    assert np.array_equal(np.asarray(noa.arange(5, start=10, step=2, dtype="int32")), [[[[10, 12, 14, 16, 18]]]])
    f = noa.arange((1, 2, 3, 4)).copy("F")
    assert f.strides == (24, 12, 1, 3)
    assert np.array_equal(np.asarray(f), np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4))
    assert noa.zeros((1, 2, 3, 4), dtype="uint8").nbytes == 24
    assert noa.zeros((1, 2, 3, 4)).nbytes == 96


@pytest.mark.parametrize("name", SCALAR_NAMES)
def test_every_scalar_type(name):
    x = (np.arange(12) % 2).astype(name).reshape(3, 4)
    a = noa.asarray(x)
    assert a.dtype == np.dtype(name) and a.shape == (1, 1, 3, 4)
    assert np.shares_memory(np.asarray(a), x)
    assert np.array_equal(np.asarray(a.copy("F")), x[None, None])


def test_unsupported_dtypes():
    with pytest.raises(DTypeError, match="not supported"):
        noa.zeros(3, dtype="U4")
    with pytest.raises(DTypeError, match="unknown element type"):
        noa.zeros(3, dtype="nonsense")
    with pytest.raises(DTypeError, match="not supported"):
        noa.asarray(np.array(["a", "b"]))


def test_matrix_and_vector_elements():
    mats = noa.zeros((5, 1, 1, 1), dtype=noa.matrix("float64", 4, 4))
    assert mats.shape == (5, 1, 1, 1) and mats.element_shape == (4, 4)
    assert mats.itemsize == 128 and mats.nbytes == 5 * 128
    view = np.asarray(mats)
    assert view.shape == (5, 1, 1, 1, 4, 4)
    view[2, 0, 0, 0] = np.eye(4)
    assert np.array_equal(mats.buffer[2], np.eye(4))
    vecs = np.arange(30, dtype=np.float32).reshape(10, 3)
    a = noa.asarray(vecs, dtype=noa.vector("float32", 3))
    assert a.shape == (1, 1, 1, 10) and a.element_shape == (3,)
    assert np.shares_memory(np.asarray(a), vecs)
    assert np.array_equal(np.asarray(a)[0, 0, 0], vecs)
    assert np.array_equal(np.asarray(a.permute((0, 1, 3, 2)).copy())[0, 0, :, 0], vecs)
    assert "element_shape=(3,)" in repr(a)
    with pytest.raises(ShapeError, match="element shape"):
        noa.asarray(np.zeros((10, 2), np.float32), dtype=noa.vector("float32", 3))


def test_numpy_interop_shares_memory_both_ways():
    x = np.arange(2 * 3 * 8 * 10, dtype=np.float32).reshape(2, 3, 8, 10)[:, 1:, ::2, 1:7]
    a = noa.asarray(x)
    assert a.shape == x.shape
    assert a.strides == tuple(s // 4 for s in x.strides)
    back = np.asarray(a)
    assert back.strides == x.strides and np.shares_memory(back, x)
    back[0, 0, 0, 0] = -1
    assert x[0, 0, 0, 0] == -1
    assert np.array_equal(np.asarray(a.copy()), x)
    # A read-only input stays read-only.
    x.flags.writeable = False
    ro = noa.asarray(x)
    assert not ro.writable and not np.asarray(ro).flags.writeable


def test_interop_errors():
    record = np.zeros(10, dtype=[("a", "<f4"), ("b", "u1")])["a"]  # 5-byte stride
    with pytest.raises(StrideError, match=r"not multiples of the 4-byte element size"):
        noa.asarray(record)
    with pytest.raises(StrideError, match="negative"):
        noa.asarray(np.arange(10.0)[::-1])
    with pytest.raises(ShapeError, match="5 dimensions"):
        noa.asarray(np.zeros((1, 1, 1, 1, 2)))


def test_big_endian_input_is_converted():
    x = np.arange(6, dtype=">f4").reshape(2, 3)
    a = noa.asarray(x)
    assert a.dtype == np.dtype("float32") and np.array_equal(np.asarray(a), x[None, None])


def test_view_errors_name_shapes():
    a = noa.zeros((1, 3, 4, 5))
    with pytest.raises(PermutationError, match=r"\(0, 1, 1, 2\)"):
        a.permute((0, 1, 1, 2))
    with pytest.raises(BroadcastError, match=r"\(1, 3, 4, 5\).*\(2, 3, 4, 6\)"):
        a.broadcast((2, 3, 4, 6))
    with pytest.raises(ReshapeError, match="without a copy"):
        a.permute((0, 1, 3, 2)).reshape(-1)
    with pytest.raises(ReshapeError, match="60 elements"):
        a.reshape((7, -1))


def test_shape_and_strides_are_typed_and_refused_when_swapped():
    a = noa.arange((1, 3, 4, 5))
    assert type(a.shape) is noa.layout.Shape4 and type(a.strides) is noa.layout.Strides4
    assert a.shape == (1, 3, 4, 5) and a.strides == (60, 20, 5, 1)
    for view in (a.permute((0, 2, 1, 3)), a[:, 1:], a.reshape((3, 20)), a[:, :1].broadcast((2, 3, 4, 5))):
        assert type(view.shape) is noa.layout.Shape4 and type(view.strides) is noa.layout.Strides4
    with pytest.raises(LayoutError, match=r"strides \(60, 20, 5, 1\) were given where a shape is expected"):
        noa.Array(a.buffer, 0, a.strides, a.shape, a.dtype)
    with pytest.raises(LayoutError, match="where a shape is expected"):
        a.broadcast(a.strides)
    with pytest.raises(LayoutError, match="where a shape is expected"):
        a.reshape(a.strides)
    with pytest.raises(LayoutError, match="where a shape is expected"):
        noa.zeros(a.strides)
    # Plain tuples and lists keep working everywhere.
    b = noa.Array(a.buffer, 0, [1, 3, 4, 5], [60, 20, 5, 1], a.dtype)
    assert np.array_equal(np.asarray(b * 2), np.asarray(a) * 2)


def test_reshape_copy_fallback():
    a = noa.arange((1, 3, 4, 5))
    f = a.permute((0, 1, 3, 2))
    flat = f.reshape(-1, allow_copy=True)
    assert flat.shape == (1, 1, 1, 60)
    assert np.array_equal(np.asarray(flat).ravel(), np.asarray(f).ravel())


def test_empty_arrays():
    e = noa.zeros((0, 3, 4, 5))
    assert e.size == 0 and e.nbytes == 0
    assert np.asarray(e).shape == (0, 3, 4, 5)
    assert e.permute((3, 2, 1, 0)).shape == (5, 4, 3, 0)
    assert e.copy("F").shape == (0, 3, 4, 5)
    assert e.reshape((0, 60)).shape == (1, 1, 0, 60)
    assert e[:, 1:, :2].shape == (0, 2, 2, 5)
    x = noa.asarray(np.zeros((3, 0)))
    assert x.shape == (1, 1, 3, 0)


def test_repr_is_readable():
    text = repr(noa.zeros((1, 2, 3, 4), dtype="int16").permute((0, 1, 3, 2)))
    assert text == ("Array(shape=(1, 2, 4, 3), strides=(24, 12, 1, 4), dtype=int16, device=cpu, order=F, "
                    "kind='volume')")


def test_broadcast_view_is_read_only():
    b = noa.zeros((1, 1, 2, 2)).broadcast((3, 1, 2, 2))
    assert not b.writable
    with pytest.raises(ValueError, match="read-only"):
        np.asarray(b)[0, 0, 0, 0] = 1


# --- property tests against NumPy ------------------------------------------------------------


shapes = st.tuples(*[st.integers(0, 4)] * 4)


@settings(max_examples=100, deadline=None)
@given(shapes, st.permutations(range(4)), st.sampled_from("CF"))
def test_permute_and_copies_match_numpy(shape, perm, order):
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    a = noa.asarray(x)
    view = a.permute(perm)
    expected = x.transpose(perm)
    assert view.shape == expected.shape
    assert np.array_equal(np.asarray(view), expected)
    assert np.shares_memory(np.asarray(view), x) or x.size == 0
    copied = view.copy(order)
    assert copied.are_contiguous(order)
    assert np.array_equal(np.asarray(copied), expected)
    pc = a.permute_copy(perm)
    assert pc.are_contiguous("C") and np.array_equal(np.asarray(pc), expected)


@settings(max_examples=100, deadline=None)
@given(st.tuples(*[st.integers(1, 3)] * 4), st.tuples(*[st.integers(1, 3)] * 4), st.data())
def test_slicing_and_broadcast_match_numpy(shape, grow, data):
    x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    a = noa.asarray(x)
    target = tuple(n if n > 1 else g for n, g in zip(shape, grow))
    assert np.array_equal(np.asarray(a.broadcast(target)), np.broadcast_to(x, target))
    starts = [data.draw(st.integers(0, n - 1)) for n in shape]
    steps = [data.draw(st.integers(1, 2)) for _ in shape]
    key = tuple(slice(s, None, k) for s, k in zip(starts, steps))
    assert np.array_equal(np.asarray(a[key]), x[key])
    assert np.array_equal(np.asarray(a[key].copy()), x[key])


@settings(max_examples=100, deadline=None)
@given(st.tuples(*[st.integers(1, 4)] * 4), st.permutations(range(4)), st.data())
def test_reshape_matches_numpy(shape, perm, data):
    x = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape).transpose(perm)
    a = noa.asarray(x)
    n = x.size
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    h = data.draw(st.sampled_from(divisors))
    new_shape = (h, -1)
    try:
        expected = x.reshape((h, n // h), copy=False)
    except ValueError:
        expected = None
    if expected is None:
        with pytest.raises(ReshapeError):
            a.reshape(new_shape)
        expected = x.reshape((h, n // h))
        got = a.reshape(new_shape, allow_copy=True)
    else:
        got = a.reshape(new_shape)
        assert np.shares_memory(np.asarray(got), x)
    assert np.array_equal(np.asarray(got), expected[None, None])


def test_single_element_arrays_are_python_scalars_as_numpy_gives_them():
    """Issue 28 item 6: float(noa.mean(x)) raised TypeError (a reduction is a (1, 1, 1, 1) Array)."""
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = noa.asarray(data)
    mean = noa.mean(x)
    assert float(mean) == float(np.mean(data)) and mean.item() == np.float32(np.mean(data)).item()
    assert int(noa.sum(x)) == int(np.sum(data)) and isinstance(noa.sum(x).item(), float)
    assert bool(noa.asarray(np.zeros(1, np.float32))) is False and bool(noa.sum(x)) is True
    z = noa.asarray(np.array([1 + 2j], np.complex64))
    assert complex(z) == complex(np.array([1 + 2j], np.complex64)[0]) and isinstance(z.item(), complex)
    item = noa.asarray(np.array([7], np.int16)).item()
    assert item == 7 and isinstance(item, int)
    m = noa.zeros((1, 1, 1, 1), dtype=noa.matrix("float64", 2, 2))
    assert m.item() == [[0.0, 0.0], [0.0, 0.0]]
    for call, error in ((float, TypeError), (int, TypeError), (complex, TypeError), (lambda a: a.item(), ValueError)):
        with pytest.raises(error, match="single-element"):
            call(x)
        with pytest.raises(error):
            call(np.asarray(data))  # NumPy refuses the same, with the same error
    with pytest.raises(ValueError, match="ambiguous"):
        bool(x)
    with pytest.raises(ValueError, match="ambiguous"):
        bool(np.asarray(data))

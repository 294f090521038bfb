"""Reductions (sum, mean, min, max, var, std, reduce_ewise) against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import noa_core as nc
from helpers import LAYOUTS, make_array
from noa_core.compute import moments
from noa_core.errors import DTypeError, ShapeError

SETTINGS = settings(max_examples=40, deadline=None)
shapes = st.tuples(*(st.integers(1, 5) for _ in range(3)), st.integers(1, 40)).map(tuple)
axes_strategy = st.one_of(st.none(), st.sets(st.integers(0, 3), min_size=1).map(tuple))


def np_axes(axes):
    return (0, 1, 2, 3) if axes is None else axes


@SETTINGS
@given(shape=shapes, kind=st.sampled_from(LAYOUTS), axes=axes_strategy,
       dtype=st.sampled_from(["float32", "float64", "int8", "uint16", "int64", "bool", "float16", "complex64"]),
       seed=st.integers(0, 2**16))
def test_sum_mean_match_numpy(shape, kind, axes, dtype, seed):
    a = make_array(np.random.default_rng(seed), shape, dtype, kind)
    x = a.numpy()
    for ours, theirs in [(nc.sum, np.sum), (nc.mean, np.mean)]:
        got = ours(a, axes)
        want = theirs(x, axis=np_axes(axes), keepdims=True)
        assert got.dtype == want.dtype, (ours, got.dtype, want.dtype)
        if dtype == "float16":
            # NumPy accumulates float16 partly in float16; noa in float64: compare with the exact sum.
            want = theirs(x.astype(np.float64), axis=np_axes(axes), keepdims=True).astype(np.float16)
        assert got.shape == want.shape
        tol = 2e-3 if dtype == "float16" else 1e-5
        np.testing.assert_allclose(got.numpy(), want, rtol=tol, atol=tol)


@SETTINGS
@given(shape=shapes, kind=st.sampled_from(LAYOUTS), axes=axes_strategy,
       dtype=st.sampled_from(["float32", "float64", "int16", "uint8", "bool"]), seed=st.integers(0, 2**16))
def test_min_max_match_numpy(shape, kind, axes, dtype, seed):
    a = make_array(np.random.default_rng(seed), shape, dtype, kind)
    for ours, theirs in [(nc.min, np.min), (nc.max, np.max)]:
        got = ours(a, axes)
        want = theirs(a.numpy(), axis=np_axes(axes), keepdims=True)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.numpy(), want)


@SETTINGS
@given(shape=shapes, kind=st.sampled_from(LAYOUTS), axes=axes_strategy, ddof=st.integers(0, 2),
       dtype=st.sampled_from(["float32", "float64", "int32", "complex128"]), seed=st.integers(0, 2**16))
def test_var_std_match_numpy(shape, kind, axes, ddof, dtype, seed):
    a = make_array(np.random.default_rng(seed), shape, dtype, kind)
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for ours, theirs in [(nc.var, np.var), (nc.std, np.std)]:
                got = ours(a, axes, ddof=ddof)
                want = theirs(a.numpy(), axis=np_axes(axes), keepdims=True, ddof=ddof)
                assert got.dtype == want.dtype
                np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6, equal_nan=True)


def test_large_float32_sum_is_accurate():
    # 2**22 values: float32 pairwise in NumPy vs float64 accumulation here; both near exact.
    x = np.random.default_rng(0).random((4, 1, 1024, 1024), dtype=np.float32)
    exact = x.astype(np.float64).sum()
    got = float(nc.sum(nc.asarray(x)).numpy().ravel()[0])
    assert abs(got - exact) / exact < 1e-7
    np.testing.assert_allclose(nc.sum(nc.asarray(x), (2, 3)).numpy(), x.sum(axis=(2, 3), keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(nc.mean(nc.asarray(x), (0,)).numpy(), x.mean(axis=0, keepdims=True), rtol=1e-6)


def test_nan_propagates_in_min_max():
    x = np.arange(10, dtype=np.float64)
    x[3] = np.nan
    assert np.isnan(nc.min(nc.asarray(x)).numpy()).all()
    assert np.isnan(nc.max(nc.asarray(x)).numpy()).all()


def test_empty_reductions():
    e = nc.zeros((2, 0, 3, 4))
    assert nc.sum(e).numpy().ravel()[0] == 0
    assert nc.sum(e, (1,)).shape == (2, 1, 3, 4)
    assert nc.min(e, (0, 2, 3)).shape == (1, 0, 1, 1)
    with pytest.raises(ShapeError, match="empty"):
        nc.min(e)
    with np.errstate(all="ignore"):
        assert np.isnan(nc.mean(e).numpy()).all()


def test_reduce_ewise_user_functions():
    rng = np.random.default_rng(1)
    x, w = rng.random((2, 3, 40, 50)), rng.random((1, 1, 40, 50))

    def weighted(v, k):
        return v * k

    def add(a, b):
        return a + b

    def halve(a):
        return a / 2

    got = nc.reduce_ewise([nc.asarray(x), nc.asarray(w)], 0.0, add, preprocess=weighted, final=halve, axes=(2, 3))
    np.testing.assert_allclose(got.numpy(), (x * w).sum(axis=(2, 3), keepdims=True) / 2)

    def count_positive(v):
        return 1 if v > 0.5 else 0

    n = nc.reduce_ewise(nc.asarray(x), np.int64(0), add, preprocess=count_positive)
    assert n.numpy().ravel()[0] == (x > 0.5).sum() and n.dtype == np.int64


def test_reduction_errors():
    with pytest.raises(DTypeError):
        nc.min(nc.zeros((2, 2), "complex64"))
    with pytest.raises(DTypeError):
        nc.sum(nc.zeros((2, 2), nc.vector("float32", 3)))
    with pytest.raises(ShapeError, match="axis"):
        nc.sum(nc.zeros((2, 2)), (4,))
    with pytest.raises(ValueError, match="preprocess"):
        nc.reduce_ewise([nc.zeros((2, 2)), nc.zeros((2, 2))], 0.0, lambda a, b: a + b)


# -- moments (file header statistics) -----------------------------------------------------------


@SETTINGS
@given(shape=st.tuples(*(st.integers(0, 4) for _ in range(3)), st.integers(0, 70000)).filter(
           lambda s: np.prod(s) <= 300_000).map(tuple),
       kind=st.sampled_from(LAYOUTS), dtype=st.sampled_from(["float32", "int16", "uint8", "complex64", "float16"]),
       seed=st.integers(0, 2**16))
def test_moments_match_numpy(shape, kind, dtype, seed):
    # Widths past one chunk (32768) give several runs per row, merged with Chan's formula.
    a = make_array(np.random.default_rng(seed), shape, dtype, kind)
    x = a.numpy().astype(np.complex128 if dtype == "complex64" else np.float64)
    m = moments.block_moments(a)
    assert m.count == x.size
    if x.size == 0:
        assert m == moments.EMPTY_MOMENTS
        return
    np.testing.assert_allclose(m.mean, x.mean(), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(m.m2, np.sum(np.abs(x - x.mean()) ** 2), rtol=1e-9, atol=1e-9)
    if dtype == "complex64":
        assert m.min is None and m.max is None
    else:
        assert (m.min, m.max) == (x.min(), x.max())


@pytest.mark.parametrize("dtype", ["float32", "float64", "int16"])
def test_moments_lanes_and_tail(dtype):
    """Contiguous runs go through per-lane accumulators plus a scalar tail: a special value at any
    position, lane or tail, counts; NaN wins over everything, and +-inf give inf extrema and a NaN mean."""
    from noa_core.kernels.cpu import LANES

    n = 5 * LANES + 7  # five full rows of lanes, then a tail
    base = (np.arange(n) - n // 2 if dtype == "int16" else np.random.default_rng(0).normal(size=n)).astype(dtype)
    for position in [0, 1, LANES - 1, LANES, 3 * LANES + 5, n - 7, n - 1]:
        x = base.copy().reshape(1, 1, 1, n)
        if dtype == "int16":
            x[0, 0, 0, position] = np.iinfo(np.int16).min
            m = moments.block_moments(nc.asarray(x))
            assert (m.min, m.max) == (x.min(), x.max())
            np.testing.assert_allclose(m.mean, x.astype(np.float64).mean(), rtol=1e-12)
            continue
        x[0, 0, 0, position] = np.nan
        m = moments.block_moments(nc.asarray(x))
        assert np.isnan(m.min) and np.isnan(m.max) and np.isnan(m.mean), position
        x[0, 0, 0, position] = -np.inf
        x[0, 0, 0, (position + LANES + 1) % n] = np.inf
        m = moments.block_moments(nc.asarray(x))
        assert (m.min, m.max) == (-np.inf, np.inf) and np.isnan(m.mean), position
        x[0, 0, 0, (position + LANES + 1) % n] = 0
        m = moments.block_moments(nc.asarray(x))
        assert (m.min, m.max) == (-np.inf, x.max()) and m.mean == -np.inf, position


def test_moments_propagate_nan_and_merge_exactly():
    x = np.arange(100_000, dtype=np.float32).reshape(1, 1, 4, 25_000)
    halves = [moments.block_moments(nc.asarray(x[:, :, :2])), moments.block_moments(nc.asarray(x[:, :, 2:]))]
    merged = halves[0].merge(halves[1])
    whole = moments.block_moments(nc.asarray(x))
    assert merged.count == whole.count and (merged.min, merged.max) == (whole.min, whole.max)
    np.testing.assert_allclose([merged.mean, merged.m2], [whole.mean, whole.m2], rtol=1e-12)
    x[0, 0, 3, 7] = np.nan
    m = moments.block_moments(nc.asarray(x))
    assert np.isnan(m.min) and np.isnan(m.max) and np.isnan(m.mean)
    assert np.isnan(halves[0].merge(moments.block_moments(nc.asarray(x[:, :, 2:]))).min)
    with pytest.raises(DTypeError, match="scalar element types"):
        moments.block_moments(nc.empty((1, 1, 2, 2), nc.vector("float32", 3)))

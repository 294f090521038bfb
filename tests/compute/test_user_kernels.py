"""User functions compiled once: kernels cached by what defines a function (noa_core.compute.user_kernels).

Compilations are counted (user_kernels.compiled_count: representatives admitted; kernels.cpu.built_count:
kernels built) and every result is checked against NumPy computing the same function.
"""

from __future__ import annotations

import math
import types
import warnings

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import noa_core as nc
from noa_core.compute import user_kernels
from noa_core.compute.user_kernels import UncacheableFunctionWarning
from noa_core.kernels import cpu


@pytest.fixture
def image() -> nc.Array:
    return nc.asarray(np.arange(5 * 7, dtype=np.float64).reshape(5, 7) - 11)


def run(image: nc.Array, op) -> np.ndarray:
    out = nc.empty(image.shape, "float64")
    nc.ewise(image, out, op)
    return out.numpy().copy()


def counts() -> tuple[int, int]:
    return user_kernels.compiled_count(), cpu.built_count()


def defined(source: str, **names):
    """A function defined by ``source`` in a fresh global namespace holding ``names`` (a notebook cell)."""
    namespace = dict(names)
    exec(source, namespace)  # noqa: S102 - test code
    return namespace["f"], namespace


def test_an_equal_lambda_in_a_loop_compiles_once(image):
    expected = image.numpy() * 2.5
    before = counts()
    for _ in range(6):
        np.testing.assert_array_equal(run(image, lambda v: v * 2.5), expected)
    assert counts() == (before[0] + 1, before[1] + 1)


def test_a_cell_evaluated_again_reuses_the_kernel(image):
    first, _ = defined("f = lambda v: v * 3.0 - 1.0")
    np.testing.assert_array_equal(run(image, first), image.numpy() * 3.0 - 1.0)
    before = counts()
    again, _ = defined("f = lambda v: v * 3.0 - 1.0")
    assert again.__code__ is not first.__code__  # a new code object, equal to the first
    np.testing.assert_array_equal(run(image, again), image.numpy() * 3.0 - 1.0)
    assert counts() == before


def test_different_closure_values_never_share_a_kernel(image):
    def scaled(k):
        return lambda v: v * k + 0.25

    before = user_kernels.compiled_count()
    for k in (1.0, 2.0, -3.0):
        np.testing.assert_array_equal(run(image, scaled(k)), image.numpy() * k + 0.25)
    assert user_kernels.compiled_count() == before + 3
    for k in (-3.0, 1.0, 2.0):  # each value's kernel was kept
        np.testing.assert_array_equal(run(image, scaled(k)), image.numpy() * k + 0.25)
    assert user_kernels.compiled_count() == before + 3


def test_zero_signs_nan_and_number_types_are_told_apart(image):
    def key(k):
        return user_kernels._function_key(lambda v: v * k)

    assert key(0.0) != key(-0.0)
    assert len({key(1), key(1.0), key(True), key(np.float32(1)), key(np.float64(1))}) == 5
    assert key(math.nan) == key(float("nan"))  # NaN is NaN: one kernel, not one per call
    for z, expected in ((0.0, np.inf), (-0.0, -np.inf)):  # one kernel would give one sign
        np.testing.assert_array_equal(run(image, lambda v: v * 0.0 + 1.0 / z), np.full(image.shape, expected))


def test_a_global_that_changes_value_is_not_stale(image):
    f, _ = defined("f = lambda v: v + scale", scale=2.0)
    np.testing.assert_array_equal(run(image, f), image.numpy() + 2.0)
    f, namespace = defined("f = lambda v: v + scale", scale=7.0)
    np.testing.assert_array_equal(run(image, f), image.numpy() + 7.0)
    namespace["scale"] = 9.0  # the same function object, its global rebound
    np.testing.assert_array_equal(run(image, f), image.numpy() + 9.0)
    before = user_kernels.compiled_count()
    f, _ = defined("f = lambda v: v + scale", scale=2.0)  # back to a value seen: its kernel again
    np.testing.assert_array_equal(run(image, f), image.numpy() + 2.0)
    assert user_kernels.compiled_count() == before


def test_module_attributes_read_by_the_code_are_keyed(image):
    config = types.ModuleType("noa_test_config")
    config.gain = 4.0
    f, _ = defined("f = lambda v: v * config.gain", config=config)
    np.testing.assert_array_equal(run(image, f), image.numpy() * 4.0)
    config.gain = -0.5
    np.testing.assert_array_equal(run(image, f), image.numpy() * -0.5)


def test_the_representative_is_frozen_against_later_changes(image):
    """numba reads closures and globals again for each new argument type: the cached function must
    hold the values its key was taken with, not the live cells of the first function seen."""
    def make(k):
        def set_k(value):
            nonlocal k
            k = value
        return (lambda v: v * k), set_k

    first, set_first = make(2.0)
    np.testing.assert_array_equal(run(image, first), image.numpy() * 2.0)  # float64 compiled with k=2
    set_first(5.0)  # the first function's cell now holds 5
    second, _ = make(2.0)
    small = nc.asarray(np.arange(6, dtype=np.int32).reshape(2, 3))  # a new argument type: compiled now
    out = nc.empty(small.shape, "float64")
    nc.ewise(small, out, second)
    np.testing.assert_array_equal(out.numpy(), np.arange(6).reshape(1, 1, 2, 3) * 2.0)
    np.testing.assert_array_equal(run(image, first), image.numpy() * 5.0)  # and the first sees its 5


def test_default_arguments_are_keyed(image):
    np.testing.assert_array_equal(run(image, lambda v, s=2.0: v * s), image.numpy() * 2.0)
    np.testing.assert_array_equal(run(image, lambda v, s=2.0: v * s + 0.0), image.numpy() * 2.0)
    for s in (3.0, -1.0):
        f, _ = defined(f"f = lambda v, s={s}: v * s")
        np.testing.assert_array_equal(run(image, f), image.numpy() * s)


def test_nested_code_and_the_globals_it_reads(image):
    source = "def f(v):\n    g = lambda t: t * G + C\n    return g(v)\n"
    f, _ = defined(source, G=3.0, C=1.0)
    np.testing.assert_array_equal(run(image, f), image.numpy() * 3.0 + 1.0)
    f, _ = defined(source, G=3.0, C=-4.0)  # a global read only by the nested lambda
    np.testing.assert_array_equal(run(image, f), image.numpy() * 3.0 - 4.0)
    other, _ = defined(source.replace("t * G", "t / G"), G=3.0, C=-4.0)  # nested code differs
    np.testing.assert_array_equal(run(image, other), image.numpy() / 3.0 - 4.0)


def test_arrays_compare_by_content_and_jitted_helpers_by_identity(image):
    table = np.array([1.0, 10.0, 100.0])
    f, _ = defined("f = lambda v: v * table[1]", table=table)
    np.testing.assert_array_equal(run(image, f), image.numpy() * 10.0)
    table[1] = 20.0  # mutated in place: a new content, a new kernel
    np.testing.assert_array_equal(run(image, f), image.numpy() * 20.0)
    twice = numba.njit(lambda t: 2.0 * t)
    f, _ = defined("f = lambda v: helper(v) + 1.0", helper=twice)
    np.testing.assert_array_equal(run(image, f), image.numpy() * 2.0 + 1.0)
    before = user_kernels.compiled_count()
    f, _ = defined("f = lambda v: helper(v) + 1.0", helper=twice)
    run(image, f)
    assert user_kernels.compiled_count() == before


def test_registered_helpers_keep_their_identity_and_builtins_pass_through(image):
    """numba knows register_jitable and overload functions by identity: they must not be copied."""
    from numba.extending import register_jitable

    from noa_core.kernels import BUILTIN_OPS, true_divide

    @register_jitable
    def twice(t):
        return 2.0 * t

    f, _ = defined("f = lambda v: twice(v) + 1.0", twice=twice)
    np.testing.assert_array_equal(run(image, f), image.numpy() * 2.0 + 1.0)
    z = nc.asarray(np.array([1 + 2j, -1j, 0j], dtype=np.complex128))
    out = nc.empty(z.shape, "complex128")
    nc.ewise([z, 0j], out, lambda u, v: true_divide(u, v))  # the overload: IEEE parts, no ZeroDivisionError
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(out.numpy(), z.numpy() / 0j)
    for op in BUILTIN_OPS.values():
        assert user_kernels.canonical(op) is op  # kernels cached on disk by name, as before


def test_uncacheable_definitions_still_work_and_warn_once(image, monkeypatch):
    monkeypatch.setattr(user_kernels, "ARRAY_KEY_LIMIT", 16)
    table = np.array([1.0, 10.0, 100.0])  # 24 bytes: over the limit
    before = user_kernels.compiled_count()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            f, _ = defined("f = lambda v: v * table[2]", table=table)
            np.testing.assert_array_equal(run(image, f), image.numpy() * 100.0)
    assert user_kernels.compiled_count() == before + 3  # compiled per function object, as before
    messages = [str(w.message) for w in caught if issubclass(w.category, UncacheableFunctionWarning)]
    assert len(messages) <= 1  # once per code object (the three exec'd codes are equal)
    f, _ = defined("f = lambda v: v * table[0] + 0.5", table=table)
    with pytest.warns(UncacheableFunctionWarning, match="global 'table' .* array of 24 bytes") as record:
        np.testing.assert_array_equal(run(image, f), image.numpy() + 0.5)
    assert record[0].filename == __file__  # attributed to the caller of ewise, not to noa's modules
    before = user_kernels.compiled_count()
    run(image, f)  # the same object again: its kernel, as before
    assert user_kernels.compiled_count() == before


def test_unhashable_values_make_a_function_uncacheable():
    values = [1.0]
    with pytest.raises(user_kernels.UncacheableError, match=r"closure variable 'values' .* list"):
        user_kernels._function_key(lambda v: v * values[0])


def test_the_cache_is_bounded_and_evicted_kernels_are_dropped(image, monkeypatch):
    monkeypatch.setattr(user_kernels, "CACHE_SIZE", 2)
    user_kernels.clear()
    representatives = []
    def shifted(k):
        return lambda v: v - k

    for k in (11.0, 12.0, 13.0):
        run(image, shifted(k))
        representatives.append(user_kernels.canonical(shifted(k)))
    assert user_kernels.cached_count() == 2
    kept = [f for key in list(cpu._KERNELS) for _, f in key[2]]
    assert not any(f is representatives[0] for f in kept)  # the oldest went with its kernels
    assert any(f is representatives[2] for f in kept)
    np.testing.assert_array_equal(run(image, shifted(11.0)), image.numpy() - 11.0)


def test_iwise_and_reduce_ewise_compile_once(image):
    out = nc.zeros((2, 3, 4, 5), "float64")
    before = user_kernels.compiled_count()
    for _ in range(4):
        def write(b, d, h, w, o):
            o[b, d, h, w] = b * 1000 + d * 100 + h * 10 + w
        nc.iwise(out.shape, write, out)
    b, d, h, w = np.indices(out.shape)
    np.testing.assert_array_equal(out.numpy(), b * 1000 + d * 100 + h * 10 + w)
    for _ in range(4):
        total = nc.reduce_ewise(image, 0.0, lambda x, y: x + y, preprocess=lambda v: v * v, final=lambda s: s / 2)
        np.testing.assert_allclose(total.numpy().reshape(()), (image.numpy() ** 2).sum() / 2)
    assert user_kernels.compiled_count() == before + 4  # write, combine, preprocess, final


@settings(max_examples=20, deadline=None)
@given(shape=st.tuples(*(st.integers(1, 3),) * 2, st.integers(1, 6), st.integers(1, 7)),
       order=st.sampled_from("CF"), k=st.sampled_from([0.5, -2.0, 3.0, 0.0]))
def test_cached_lambdas_match_numpy(shape, order, k):
    x = np.random.default_rng(sum(shape)).normal(size=shape)
    a = nc.asarray(x).copy(order)
    out = nc.empty(shape, "float64", order)
    nc.ewise([a, a], out, lambda u, v: u * k - v * v)
    np.testing.assert_allclose(out.numpy(), x * k - x * x, rtol=1e-15)


def test_threads_admitting_equal_lambdas_share_one_representative(image):
    from concurrent.futures import ThreadPoolExecutor

    def scaled(k):
        return lambda v: v * k - 0.125

    before = user_kernels.compiled_count()
    with ThreadPoolExecutor(4) as pool:
        representatives = list(pool.map(lambda _: user_kernels.canonical(scaled(6.5)), range(16)))
        results = list(pool.map(lambda _: run(image, scaled(6.5)), range(8)))
    assert all(r is representatives[0] for r in representatives)
    assert user_kernels.compiled_count() == before + 1
    for result in results:
        np.testing.assert_array_equal(result, image.numpy() * 6.5 - 0.125)

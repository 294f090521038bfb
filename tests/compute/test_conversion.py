"""float16 conversions on the CPU (LLVM's fptrunc/fpext, F16C where the CPU has it) against NumPy's."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import noa_core as noa
from noa_core.compute.conversion import convert_into


def test_every_float16_widens_to_numpys_float32():
    bits = np.arange(1 << 16, dtype=np.uint16)  # exhaustive: every half value, NaNs and infinities included
    halves = bits.view(np.float16).reshape(1, 1, 256, 256)
    widened = convert_into(noa.asarray(halves), noa.empty(halves.shape, np.float32), mode="cast").numpy()
    expected = halves.astype(np.float32)
    numbers = ~np.isnan(expected)  # NaN stays NaN; the hardware quiets signalling ones, NumPy keeps their bits
    np.testing.assert_array_equal(widened[numbers].view(np.uint32), expected[numbers].view(np.uint32))
    assert np.isnan(widened[~numbers]).all() and (~numbers).sum() == 2 * 1023


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, (1 << 32) - 1), min_size=1, max_size=4096))
def test_float32_rounds_to_float16_like_numpy(patterns):
    """Random bit patterns: subnormals, ties, values beyond 65504 (inf), NaN payloads."""
    values = np.array(patterns, np.uint32).view(np.float32).reshape(1, 1, 1, -1)
    out = noa.empty(values.shape, np.float16)
    convert_into(noa.asarray(values), out, mode="cast")
    with np.errstate(over="ignore", invalid="ignore"):
        expected = values.astype(np.float16)
    finite = ~np.isnan(expected)
    np.testing.assert_array_equal(out.numpy()[finite].view(np.uint16), expected[finite].view(np.uint16))
    assert np.isnan(out.numpy()[~finite]).all()


@pytest.mark.parametrize("source", [np.float32, np.float64])
def test_rounding_ties_and_boundaries(source):
    ties = np.array([1 + 2**-11, 1 + 3 * 2**-11, 65504, 65519.99, 65520, 2**-24, 2**-25, 1.5 * 2**-25, -0.0],
                    source).reshape(1, 1, 1, -1)
    out = convert_into(noa.asarray(ties), noa.empty(ties.shape, np.float16), mode="cast").numpy()
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out.view(np.uint16), ties.astype(np.float16).view(np.uint16))


def test_float16_arithmetic_and_strided_views_round_once():
    rng = np.random.default_rng(4)
    a = rng.normal(0, 100, (2, 3, 17, 9)).astype(np.float16)
    b = rng.normal(0, 100, (2, 3, 9, 17)).astype(np.float16).transpose(0, 1, 3, 2)  # F-like view
    result = (noa.asarray(a) + noa.asarray(b)).numpy()
    np.testing.assert_array_equal(result, (a.astype(np.float32) + b.astype(np.float32)).astype(np.float16))
    checked = noa.empty((2, 3, 17, 9), np.float16)
    with pytest.raises(noa.DTypeError, match="do not fit float16"):
        convert_into(noa.asarray(np.full((2, 3, 17, 9), 1e6, np.float32)), checked, mode="checked")

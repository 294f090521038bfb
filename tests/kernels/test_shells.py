"""The FSC's shell-sum kernels (noa_core/kernels/shells.py) against NumPy written out here: np.add.at of each
product at its shell, the shells computed from np.meshgrid of the logical indices or frequencies, whatever
the chunking, the wave of parallel chunks, or the serial twin."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noa_core.fourier import resolution
from noa_core.kernels import shells as kernels


def halves(shape, seed):
    rng = np.random.default_rng(seed)
    one, two = rng.normal(size=shape), rng.normal(size=shape)
    f1, f2 = np.fft.rfftn(one).astype(np.complex64), np.fft.rfftn(two).astype(np.complex64)
    return f1, f2


def products(f1, f2):
    a, b = f1.astype(np.complex128), f2.astype(np.complex128)
    return (a * np.conj(b)).real, np.abs(a) ** 2, np.abs(b) ** 2


def oracle_relion(f1, f2, sizes):
    """round(|k|) with k the logical index (k if k < W // 2 + 1 else k - n on the leading axes)."""
    half = sizes[-1] // 2 + 1
    axes = [np.array([k if k < half else k - n for k in range(n)]) for n in sizes[:-1]] + [np.arange(half)]
    grids = np.meshgrid(*axes, indexing="ij")
    shell = np.floor(np.sqrt(sum(g.astype(np.float64) ** 2 for g in grids)) + 0.5).astype(int)
    out = np.zeros((3, half + 1))
    keep = shell < half
    for row, product in zip(out, products(f1, f2)):
        np.add.at(row, shell[keep], product[keep])
    return out[:, :half]


def oracle_linear(f1, f2, sizes):
    """r = |f| min(sizes), within Nyquist: 1 - frac(r) to floor(r), frac(r) to floor(r) + 1 (clamped)."""
    axes = [np.fft.fftfreq(n) for n in sizes[:-1]] + [np.fft.rfftfreq(sizes[-1])]
    grids = np.meshgrid(*axes, indexing="ij")
    f2sum = sum(g ** 2 for g in grids)
    m = min(sizes)
    keep = f2sum <= 0.25 + 1e-12
    radius = np.sqrt(f2sum[keep]) * m
    low = np.floor(radius).astype(int)
    fraction = radius - low
    out = np.zeros((3, m // 2 + 1))
    for row, product in zip(out, products(f1, f2)):
        np.add.at(row, low, product[keep] * (1 - fraction))
        np.add.at(row, np.minimum(low + 1, m // 2), product[keep] * fraction)
    return out


def run(rule, f1, f2, sizes, rows_per_chunk, wave):
    """The kernel on the rows of the half transforms (``wave`` None: on this thread alone, a chunk a wave)."""
    rows = [f.reshape(-1, f.shape[-1]) for f in (f1, f2)]
    count = resolution.shell_count(sizes, rule)
    sums = np.zeros((3, count))
    shells = resolution._relion_shells(sizes) if rule == "relion" else resolution._linear_shells(sizes)
    kernel = kernels.relion_sums if rule == "relion" else kernels.linear_sums
    kernel(*rows, *shells, rows_per_chunk, wave or 1, sums, wave is not None)
    return sums


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(2, 13), min_size=2, max_size=3), st.sampled_from(resolution.RULES),
       st.integers(1, 40), st.sampled_from([None, 1, 2, 7]), st.integers(0, 2 ** 16))
def test_kernels_sum_each_sample_into_its_shells(shape, rule, rows_per_chunk, wave, seed):
    sizes = tuple(shape)
    f1, f2 = halves(sizes, seed)
    expected = (oracle_relion if rule == "relion" else oracle_linear)(f1, f2, sizes)
    got = run(rule, f1, f2, sizes, rows_per_chunk, wave)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-9 * np.abs(expected).max())


@pytest.mark.parametrize("rule", resolution.RULES)
def test_parallel_waves_and_one_thread_give_the_same_bits(rule):
    """Chunks are summed from zero and merged in chunk order, whichever wave ran them."""
    sizes = (24, 20, 30)
    f1, f2 = halves(sizes, 4)
    serial = run(rule, f1, f2, sizes, 5, None)
    for wave in (1, 3, 64):
        assert np.array_equal(run(rule, f1, f2, sizes, 5, wave), serial)


def test_shells_beyond_the_last_are_left_out_and_nothing_is_written_beyond():
    """RELION's corner samples (|k| > W // 2) reach no shell; a cube's sums hold half a sphere's samples."""
    sizes = (16, 16, 16)
    ones = np.ones((16, 16, 9), np.complex64)
    sums = run("relion", ones, ones, sizes, 3, 2)
    indices = [np.array([k if k < 9 else k - 16 for k in range(16)]), np.array([k if k < 9 else k - 16
                                                                                 for k in range(16)]), np.arange(9)]
    grids = np.meshgrid(*indices, indexing="ij")
    shell = np.floor(np.sqrt(sum(g ** 2.0 for g in grids)) + 0.5)
    assert np.array_equal(sums[1], np.bincount(shell[shell < 9].astype(int), minlength=9).astype(float))
    assert sums[1].sum() < ones.size

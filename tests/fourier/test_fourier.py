"""noa_core.fourier.fft and noa_core.fourier.spectral against numpy.fft, scipy.fft, scipy.signal and RELION's
formulas."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import scipy.fft
import scipy.signal
from hypothesis import given, settings
from hypothesis import strategies as st

import noa_core as noa
from noa_core.errors import DTypeError, ParameterError, ShapeError
from noa_core.fourier import fft, resampling, spectral

SETTINGS = settings(max_examples=25, deadline=None)
LAYOUTS = ("C", "F", "view")

# 2-d stacks (depth 1) and 3-d volumes (depth > 1), odd and even and size-1 sizes
shapes = st.tuples(st.integers(1, 3), st.sampled_from([1, 1, 2, 5]), st.integers(1, 9), st.integers(1, 10))


def laid_out(values: np.ndarray, kind: str) -> noa.Array:
    """``values`` as an Array in C order, F order, or as a strided view of a larger array."""
    if kind == "C":
        return noa.asarray(values)
    if kind == "F":
        array = noa.asarray(values).copy("F")
        assert array.order == "F" or min(values.shape[2:]) == 1
        return array
    big = np.zeros((values.shape[0], values.shape[1], 2 * values.shape[2], values.shape[3] + 3), values.dtype)
    big[:, :, ::2, 1:values.shape[3] + 1] = values
    view = noa.asarray(big)[:, :, ::2, 1:values.shape[3] + 1]
    assert view.shape == values.shape
    return view


def axes_of(shape) -> tuple[int, ...]:
    return (1, 2, 3) if shape[1] > 1 else (2, 3)


@SETTINGS
@given(shape=shapes, kind=st.sampled_from(LAYOUTS), dtype=st.sampled_from(["float32", "float64"]),
       norm=st.sampled_from(fft.NORMS), seed=st.integers(0, 2**16))
def test_real_and_complex_transforms_match_numpy(shape, kind, dtype, norm, seed):
    values = np.random.default_rng(seed).normal(size=shape).astype(dtype)
    x = laid_out(values, kind)
    axes = axes_of(shape)
    tolerance = {"rtol": 1e-4, "atol": 1e-4} if dtype == "float32" else {"rtol": 1e-10, "atol": 1e-10}
    spectrum = fft.rfft(x, norm=norm)
    expected = np.fft.rfftn(values.astype(np.float64), axes=axes, norm=norm)
    assert spectrum.shape == (*shape[:3], shape[3] // 2 + 1)
    assert spectrum.dtype == (np.complex64 if dtype == "float32" else np.complex128)
    np.testing.assert_allclose(spectrum.numpy(), expected, **tolerance)
    back = fft.irfft(spectrum, width=shape[3], norm=norm)
    assert back.shape == shape and back.dtype == np.dtype(dtype)
    np.testing.assert_allclose(back.numpy(), values, **tolerance)

    full = fft.fft(x, norm=norm)
    np.testing.assert_allclose(full.numpy(), np.fft.fftn(values.astype(np.float64), axes=axes, norm=norm), **tolerance)
    np.testing.assert_allclose(fft.ifft(full, norm=norm).numpy().real, values, **tolerance)


@SETTINGS
@given(shape=shapes, kind=st.sampled_from(LAYOUTS), dtype=st.sampled_from(["float32", "float64", ">f4"]),
       norm=st.sampled_from(fft.NORMS), seed=st.integers(0, 2**16))
def test_transforms_are_scipy_fft_bit_for_bit(shape, kind, dtype, norm, seed):
    """noa calls scipy's pocketfft module itself (no ``import scipy.fft`` for a small file): the values are
    scipy.fft's exactly, byte-swapped and strided inputs included."""
    values = np.random.default_rng(seed).normal(size=shape).astype(dtype)
    axes = axes_of(shape)
    x = laid_out(values.astype(values.dtype.newbyteorder("=")), kind)
    spectrum = fft.rfft(x, norm=norm).numpy()
    assert np.array_equal(spectrum, scipy.fft.rfftn(values, axes=axes, norm=norm))
    assert np.array_equal(fft.r2c(values, axes, norm), spectrum)
    back = scipy.fft.irfftn(spectrum, s=[shape[a] for a in axes], axes=axes, norm=norm)
    assert np.array_equal(fft.irfft(spectrum, width=shape[3], norm=norm).numpy(), back)
    complex_values = values.astype(np.complex64 if values.dtype.itemsize == 4 else np.complex128)
    full = scipy.fft.fftn(complex_values, axes=axes, norm=norm)  # noa makes real inputs complex first
    assert np.array_equal(fft.fft(x, norm=norm).numpy(), full)
    assert np.array_equal(fft.c2c(full.copy(), axes, False, norm, overwrite=True),
                          scipy.fft.ifftn(full, axes=axes, norm=norm))


def test_without_scipys_pocketfft_module_the_transforms_are_scipy_fft_s(monkeypatch):
    """Where a scipy keeps pocketfft elsewhere (1.18 does), noa calls scipy.fft's functions: the same values."""
    monkeypatch.setattr(fft, "pocketfft", lambda: None)
    values = np.random.default_rng(4).normal(size=(2, 3, 6, 9)).astype(np.float32)
    for axes in ((2, 3), (1, 2, 3)):
        spectrum = fft.r2c(values, axes, "ortho")
        assert np.array_equal(spectrum, scipy.fft.rfftn(values, axes=axes, norm="ortho"))
        assert np.array_equal(fft.irfft(spectrum, width=9, ndim=len(axes), norm="ortho").numpy(),
                              scipy.fft.irfftn(spectrum, s=[values.shape[a] for a in axes], axes=axes, norm="ortho"))
        full = scipy.fft.fftn(values.astype(np.complex64), axes=axes)
        assert np.array_equal(fft.fft(values, ndim=len(axes)).numpy(), full)
        assert np.array_equal(fft.c2c(full.copy(), axes, False, overwrite=True), scipy.fft.ifftn(full, axes=axes))


def test_the_pocketfft_module_loads_alone_and_scipy_fft_shares_it():
    if fft.pocketfft() is None:
        pytest.skip(f"this scipy ({scipy.__version__}) keeps pocketfft elsewhere: noa calls scipy.fft's functions")
    probe = ("import sys\nfrom noa_core.fourier import fft\nmodule = fft.pocketfft()\n"
             "assert 'scipy.fft' not in sys.modules\n"
             "import scipy.fft._pocketfft.basic as basic\nassert basic.pfft is module\nprint('ok')")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "ok", result.stderr


def test_the_width_is_the_non_redundant_dimension_and_2d_is_per_depth_slice():
    values = np.random.default_rng(1).normal(size=(2, 3, 6, 8)).astype(np.float32)
    per_slice = fft.rfft(values, ndim=2)
    assert per_slice.shape == (2, 3, 6, 5)
    np.testing.assert_allclose(per_slice.numpy(), scipy.fft.rfft2(values), rtol=1e-4, atol=1e-4)
    assert fft.rfft(values).shape == (2, 3, 6, 5)  # a volume: 3-d by default
    np.testing.assert_allclose(fft.rfft(values).numpy(), np.fft.rfftn(values, axes=(1, 2, 3)), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(fft.irfft(fft.rfft(values[:, :, :, :7]), width=7).numpy(), values[:, :, :, :7],
                               atol=1e-5)  # an odd width needs its width


def test_fft_refusals_name_the_problem():
    with pytest.raises(DTypeError, match="complex"):
        fft.rfft(np.ones((4, 4), np.complex64))
    with pytest.raises(ShapeError, match=r"width of 9 needs 5.*\(1, 1, 4, 3\)"):
        fft.irfft(np.ones((4, 3), np.complex64), width=9)
    with pytest.raises(ParameterError, match="norm"):
        fft.rfft(np.ones((4, 4)), norm="both")
    with pytest.raises(ParameterError, match="ndim"):
        fft.rfft(np.ones((4, 4)), ndim=1)


def test_empty_arrays_give_empty_transforms():
    assert fft.rfft(np.zeros((0, 1, 4, 6), np.float32)).shape == (0, 1, 4, 4)
    assert fft.fft(np.zeros((2, 1, 0, 6), np.float32)).shape == (2, 1, 0, 6)


# -- Fourier resizing -------------------------------------------------------------------------------


def cropped_rfftn(values: np.ndarray, axes: tuple[int, ...], sizes: tuple[int, ...]) -> np.ndarray:
    """The brief's oracle: numpy.fft.rfftn, keep the integer frequencies of the new sizes, irfftn (for odd new
    sizes smaller than the old ones, where no Nyquist bin is involved), values rescaled by new / old."""
    spectrum = np.fft.rfftn(values, axes=axes)
    for axis, n in zip(axes[:-1], sizes[:-1]):
        frequencies = np.rint(np.fft.fftfreq(n) * n).astype(int)
        spectrum = np.take(spectrum, frequencies % values.shape[axis], axis=axis)
    spectrum = np.take(spectrum, np.arange(sizes[-1] // 2 + 1), axis=axes[-1])
    old = math.prod(values.shape[a] for a in axes)
    return np.fft.irfftn(spectrum, s=sizes, axes=axes) * (math.prod(sizes) / old)


@SETTINGS
@given(shape=shapes, data=st.data(), kind=st.sampled_from(LAYOUTS))
def test_resize_is_band_limited_resampling(shape, data, kind):
    axes = axes_of(shape)
    sizes = tuple(data.draw(st.integers(1, 12)) for _ in axes)
    values = np.random.default_rng(sum(shape)).normal(size=shape)
    out = resampling.fourier_resize(laid_out(values, kind), sizes)
    assert out.shape == tuple(sizes[axes.index(i)] if i in axes else n for i, n in enumerate(shape))
    expected = values
    for axis, n in zip(axes, sizes):  # scipy resamples one axis at a time; the operator is separable
        expected = scipy.signal.resample(expected, n, axis=axis)
    np.testing.assert_allclose(out.numpy(), expected, atol=1e-10)


@pytest.mark.parametrize("shape, sizes", [((2, 1, 16, 12), (9, 7)), ((1, 1, 15, 15), (5, 11)),
                                          ((1, 8, 10, 9), (5, 7, 3))])
def test_resize_equals_a_cropped_rfftn(shape, sizes):
    values = np.random.default_rng(3).normal(size=shape).astype(np.float32)
    out = resampling.fourier_resize(values, sizes)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out.numpy(), cropped_rfftn(values.astype(np.float64), axes_of(shape), sizes),
                               atol=2e-5)


def test_resize_keeps_a_constant_and_a_round_trip_of_a_band_limited_image():
    assert np.allclose(resampling.fourier_resize(np.full((1, 1, 10, 10), 3.0), (6, 4)).numpy(), 3.0)
    noise = np.random.default_rng(0).normal(size=(1, 1, 9, 9))
    values = resampling.fourier_resize(noise, (9, 9)).numpy()  # already band-limited
    up = resampling.fourier_resize(values, (17, 19))
    np.testing.assert_allclose(resampling.fourier_resize(up, (9, 9)).numpy(), values, atol=1e-10)


@pytest.mark.parametrize("size, old, new, expected", [(128, 1.0, 1.5, 84), (100, 1.0, 1.0, 100), (101, 1.0, 1.0, 100),
                                                      (240, 1.06, 2.12, 120), (64, 2.0, 1.0, 128), (3, 1.0, 0.999, 2)])
def test_rescaled_sizes_follow_relion(size, old, new, expected):
    # RELION: newsize = ROUND(size * angpix / rescale_angpix); newsize -= newsize % 2
    assert resampling.rescaled_sizes([size], old / new) == (expected,)


def test_rescale_by_pixel_size_or_factor():
    values = np.random.default_rng(2).normal(size=(3, 1, 40, 30)).astype(np.float32)
    out = resampling.rescale(values, pixel_size=2.5, from_pixel_size=1.0)
    assert out.shape == (3, 1, 16, 12)
    np.testing.assert_allclose(out.numpy(), resampling.fourier_resize(values, (16, 12)).numpy())
    assert resampling.rescale(values, 0.5).shape == (3, 1, 20, 14)  # 15 made even
    assert noa.rescale(values, 2.0).shape == (3, 1, 80, 60)
    volume = np.ones((1, 9, 9, 9), np.float32)
    assert resampling.rescale(volume, 0.5).shape == (1, 4, 4, 4)
    with pytest.raises(ParameterError, match="either"):
        resampling.rescale(values, 0.5, pixel_size=2.0)
    with pytest.raises(ParameterError, match="unknown"):
        resampling.rescale(values, pixel_size=2.0)
    with pytest.raises(ShapeError, match="fewer than 2"):
        resampling.rescale(values, 0.01)


# -- band-pass ----------------------------------------------------------------------------------------


def relion_filter(image: np.ndarray, angpix: float, lowpass: float | None, highpass: float | None,
                  edge_width: int, bfactor: float) -> np.ndarray:
    """RELION's lowPassFilterMap, highPassFilterMap and applyBFactorToMap (src/fftw.cpp, 3.1.3), transcribed loop
    by loop for a square image: FT over the half transform, ori_size the image size."""
    ori_size = image.shape[-1]
    ft = np.fft.rfft2(image)
    half = edge_width // 2  # int filter_edge_halfwidth = filter_edge_width / 2, both int
    for ip in range(ft.shape[0]):
        i = ip if ip < ori_size / 2 else ip - ori_size  # FFTW_ELEM logical index
        for jp in range(ft.shape[1]):
            r = math.sqrt(i * i + jp * jp) / ori_size
            if lowpass is not None:
                ires = math.floor(ori_size * angpix / lowpass + 0.5)
                low, high = max(0.0, (ires - half) / ori_size), (ires + half) / ori_size
                if r > high:
                    ft[ip, jp] = 0
                elif r >= low and high > low:  # RELION divides 0 by 0 here with no edge (NaN); noa keeps the shell
                    ft[ip, jp] *= 0.5 + 0.5 * math.cos(math.pi * (r - low) / (high - low))
            if highpass is not None:
                ires = math.floor(ori_size * angpix / highpass + 0.5)
                low, high = max(0.0, (ires - half) / ori_size), (ires + half) / ori_size
                if r < low:
                    ft[ip, jp] = 0
                elif r <= high and high > low:
                    ft[ip, jp] *= 0.5 - 0.5 * math.cos(math.pi * (r - low) / (high - low))
            if bfactor:  # applied up to Nyquist, zero beyond it
                s = math.sqrt(i * i + jp * jp) / (ori_size * angpix)
                ft[ip, jp] *= math.exp(-(bfactor / 4.0) * s * s) if s <= 1.0 / (angpix * 2.0) else 0.0
    return np.fft.irfft2(ft, s=image.shape)


@pytest.mark.parametrize("size, angpix, lowpass, highpass, edge, bfactor", [
    (32, 1.0, 4.0, None, 2.0, 0.0), (33, 1.3, 5.0, 20.0, 3.0, 0.0), (24, 2.0, None, 16.0, 2.0, 0.0),
    (30, 1.0, 8.0, None, 0.0, 0.0), (28, 1.1, 3.0, 12.0, 2.0, -50.0), (32, 1.0, None, None, 2.0, 100.0),
    # half shells (24 x 1.5 / 8 = 4.5, 20 x 1 / 8 = 2.5): RELION's ROUND takes the upper shell, Python's round the even
    (24, 1.5, 8.0, None, 2, 0.0), (20, 1.0, None, 8.0, 3, 0.0), (24, 1.5, 8.0, 48.0, 5, 0.0)])
def test_bandpass_is_relions_filter(size, angpix, lowpass, highpass, edge, bfactor):
    images = np.random.default_rng(size).normal(size=(2, 1, size, size))
    out = spectral.bandpass(images, lowpass, highpass, pixel_size=angpix, edge_width=edge, bfactor=bfactor)
    for b in range(2):
        expected = relion_filter(images[b, 0], angpix, lowpass, highpass, edge, bfactor)
        np.testing.assert_allclose(out.numpy()[b, 0], expected, atol=1e-10)


def test_bandpass_of_a_volume_is_3d_and_keeps_float32():
    volume = np.random.default_rng(0).normal(size=(1, 12, 12, 12)).astype(np.float32)
    out = spectral.bandpass(volume, 4.0, pixel_size=1.0, edge_width=0.0)
    assert out.dtype == np.float32
    f = np.sqrt(sum(np.meshgrid(np.fft.fftfreq(12) ** 2, np.fft.fftfreq(12) ** 2, indexing="ij")[k][..., None]
                    for k in range(2)) + np.fft.rfftfreq(12)[None, None, :] ** 2)
    expected = np.fft.irfftn(np.fft.rfftn(volume[0].astype(np.float64)) * (f <= 3 / 12), s=(12, 12, 12), axes=(0, 1, 2))
    np.testing.assert_allclose(out.numpy()[0], expected, atol=1e-5)


@pytest.mark.parametrize("kwargs, param, words", [
    ({"lowpass": 1.9, "pixel_size": 1.0}, "lowpass", "finer than Nyquist"),
    ({"lowpass": 8.0, "highpass": 6.0, "pixel_size": 1.0}, "highpass", "coarser"),
    ({"lowpass": 8.0}, "pixel_size", "unknown"),
    ({"pixel_size": 1.0}, "lowpass", "give a lowpass"),
    ({"lowpass": 8.0, "pixel_size": 1.0, "edge_width": -1.0}, "edge_width", "0 or more"),
    ({"lowpass": 8.0, "pixel_size": 1.0, "edge_width": 2.5}, "edge_width", "whole number")])
def test_bandpass_refusals(kwargs, param, words):
    with pytest.raises(ParameterError, match=words) as refused:
        spectral.bandpass(np.ones((1, 1, 8, 8)), **kwargs)
    assert refused.value.param == param


# -- power spectra --------------------------------------------------------------------------------------


@SETTINGS
@given(shape=shapes, kind=st.sampled_from(LAYOUTS), log=st.booleans())
def test_power_spectrum_is_centred_and_normalised(shape, kind, log):
    values = np.random.default_rng(sum(shape)).normal(size=shape).astype(np.float32)
    axes = axes_of(shape)
    n = math.prod(shape[a] for a in axes)
    expected = np.fft.fftshift(np.abs(np.fft.fftn(values.astype(np.float64), axes=axes)) ** 2 / n, axes=axes)
    if log:
        expected = np.log(np.maximum(expected, np.finfo(np.float32).tiny))
    out = spectral.power_spectrum(laid_out(values, kind), log=log)
    assert out.shape == shape and out.dtype == np.float32
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_power_spectrum_mean_is_the_mean_square():
    values = np.random.default_rng(0).normal(size=(2, 1, 16, 10)).astype(np.float64)
    spectrum = spectral.power_spectrum(values).numpy()
    np.testing.assert_allclose(spectrum.mean(axis=(1, 2, 3)), (values ** 2).mean(axis=(1, 2, 3)))


@pytest.mark.parametrize("shape", [(2, 1, 16, 16), (1, 1, 15, 15), (1, 9, 9, 9)])
def test_rotational_average_is_the_mean_over_rounded_radii(shape):
    values = np.random.default_rng(1).normal(size=shape)
    axes = axes_of(shape)
    n = shape[-1]  # square (cubic) here: the shell is the rounded radius in frequency samples
    power = np.fft.fftshift(np.abs(np.fft.fftn(values, axes=axes)) ** 2 / n ** len(axes), axes=axes)
    grids = np.meshgrid(*[np.fft.fftshift(np.fft.fftfreq(n) * n)] * len(axes), indexing="ij")
    radius = np.rint(np.sqrt(sum(g ** 2 for g in grids))).astype(int)
    out = spectral.power_spectrum(values, rotational_average=True)
    assert out.shape == (shape[0], 1, 1, n // 2 + 1)
    for b in range(shape[0]):
        image = power[b, 0] if len(axes) == 2 else power[b]
        expected = [image[radius == r].mean() for r in range(n // 2 + 1)]
        np.testing.assert_allclose(out.numpy()[b, 0, 0], expected, rtol=1e-10)
    logged = spectral.power_spectrum(values, rotational_average=True, log=True).numpy()
    np.testing.assert_allclose(logged, np.log(out.numpy()), rtol=1e-12)

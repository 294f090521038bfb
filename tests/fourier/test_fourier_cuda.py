"""The Fourier operations on a real GPU (CuPy's cuFFT) against the same calls on the CPU (scipy.fft).

numba's simulator has no cuFFT, so these run only where a CUDA GPU and CuPy are present (``pip install -e
'.[cuda,cupy]'``); the GPU check in docs/gpu.md runs them there."""

from __future__ import annotations

import importlib.util

import numba
import numpy as np
import pytest

import noa_core as nc
from noa_core.fourier import fft, spectral

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    bool(numba.config.ENABLE_CUDASIM) or importlib.util.find_spec("cupy") is None or not nc.cuda_available(),
    reason="needs a CUDA GPU and CuPy (cuFFT): pip install -e '.[cuda,cupy]'")]


def on_gpu(result: nc.Array) -> np.ndarray:
    assert result.device == "cuda"
    return result.to("cpu").numpy()


@pytest.fixture(params=[(1, 1, 64, 96), (3, 1, 48, 50), (1, 40, 36, 32)], ids=["2d", "stack", "3d"])
def values(request) -> np.ndarray:
    return np.random.default_rng(7).standard_normal(request.param).astype(np.float32)


def test_transforms_match_the_cpu(values):
    ndim = 3 if values.shape[1] > 1 else 2
    x = nc.asarray(values)
    forward_cpu, forward_gpu = fft.rfft(x, ndim=ndim).numpy(), on_gpu(fft.rfft(x.to("cuda"), ndim=ndim))
    scale = np.abs(forward_cpu).max()
    np.testing.assert_allclose(forward_gpu, forward_cpu, rtol=0, atol=scale * 1e-5)
    back = on_gpu(fft.irfft(fft.rfft(x.to("cuda"), ndim=ndim), width=values.shape[3], ndim=ndim))
    np.testing.assert_allclose(back, values, rtol=0, atol=1e-5)
    full = on_gpu(fft.fft(x.to("cuda"), ndim=ndim))
    np.testing.assert_allclose(full, fft.fft(x, ndim=ndim).numpy(), rtol=0, atol=scale * 1e-5)
    np.testing.assert_allclose(on_gpu(fft.ifft(fft.fft(x.to("cuda"), ndim=ndim), ndim=ndim)).real, values,
                               rtol=0, atol=1e-5)


def test_bandpass_and_bfactor_match_the_cpu(values):
    ndim = 3 if values.shape[1] > 1 else 2
    x = nc.asarray(values)
    kwargs = dict(lowpass=8.0, highpass=40.0, pixel_size=1.5, bfactor=-50.0, ndim=ndim)
    np.testing.assert_allclose(on_gpu(spectral.bandpass(x.to("cuda"), **kwargs)),
                               spectral.bandpass(x, **kwargs).numpy(), rtol=0, atol=2e-5)


@pytest.mark.parametrize(("sizes", "lowpass", "highpass", "edge", "bfactor"), [
    ((64, 96), 8.0, 40.0, 2, 0.0), ((40, 36, 32), 6.0, None, 0, -80.0), ((33, 30), None, 20.0, 5, 25.0)])
def test_weights_computed_on_the_gpu_are_the_hosts(sizes, lowpass, highpass, edge, bfactor):
    import cupy

    on_device = spectral.bandpass_weights(sizes, 1.5, lowpass, highpass, edge, bfactor, xp=cupy)
    assert isinstance(on_device, cupy.ndarray)
    np.testing.assert_allclose(on_device.get(), spectral.bandpass_weights(sizes, 1.5, lowpass, highpass, edge, bfactor),
                               rtol=1e-12, atol=1e-15)


def test_resizing_matches_the_cpu_and_scipy(values):
    import scipy.signal

    ndim = 3 if values.shape[1] > 1 else 2
    x = nc.asarray(values)
    target = tuple(n + 6 for n in values.shape[4 - ndim:])  # padded (a crop is the next line)
    smaller = tuple(n - 10 for n in values.shape[4 - ndim:])
    for shape in (target, smaller):
        gpu, cpu = on_gpu(nc.fourier_resize(x.to("cuda"), shape, ndim=ndim)), nc.fourier_resize(x, shape, ndim=ndim)
        np.testing.assert_allclose(gpu, cpu.numpy(), rtol=0, atol=1e-4)
    expected = values
    for axis, n in zip(range(4 - ndim, 4), target):
        expected = scipy.signal.resample(expected, n, axis=axis)
    np.testing.assert_allclose(on_gpu(nc.fourier_resize(x.to("cuda"), target, ndim=ndim)), expected,
                               rtol=0, atol=1e-4)


def test_spectra_and_fsc_take_gpu_arrays(values):
    ndim = 3 if values.shape[1] > 1 else 2
    x = nc.asarray(values)
    np.testing.assert_allclose(spectral.power_spectrum(x.to("cuda"), rotational_average=True, ndim=ndim).numpy(),
                               spectral.power_spectrum(x, rotational_average=True, ndim=ndim).numpy(), rtol=1e-5)
    np.testing.assert_allclose(spectral.relion_power(x.to("cuda"), ndim=ndim), spectral.relion_power(x, ndim=ndim),
                               rtol=1e-9)
    if values.shape[0] == 1:
        other = values + np.random.default_rng(8).standard_normal(values.shape).astype(np.float32)
        gpu = nc.fsc(x.to("cuda"), nc.asarray(other).to("cuda"))
        cpu = nc.fsc(x, nc.asarray(other))
        np.testing.assert_allclose(gpu.values, cpu.values, rtol=0, atol=1e-6)

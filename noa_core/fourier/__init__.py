"""Fourier space: transforms (:mod:`.fft`), resizing and rescaling (:mod:`.resampling`), band-pass filters,
B-factors and power spectra (:mod:`.spectral`), and Fourier shell correlation (:mod:`.resolution`). Loaded
on first use."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, ["fft", "resampling", "resolution", "spectral"])

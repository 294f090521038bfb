"""noa filter against RELION's own relion_image_handler (issue 25 item 1): a B-factor zeroes everything beyond
Nyquist, alone or with a band-pass, for stacks and maps; a B-factor float32 cannot hold is refused."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import assert_user_error, load, noa, relion, write_mrc
from noa_core.fourier import spectral


def relion_bfactor(volume: np.ndarray, angpix: float, bfactor: float) -> np.ndarray:
    """RELION 3.1.3's applyBFactorToMap (src/fftw.cpp) over a square box, vectorised: exp(-B/4 res^2) where
    res = sqrt(kp^2 + ip^2 + jp^2) / (ori_size x angpix) <= 1 / (2 x angpix), zero beyond."""
    n = volume.shape[-1]
    ft = np.fft.rfftn(volume.astype(np.float64))
    index = np.meshgrid(*[np.fft.fftfreq(s, 1 / s) for s in volume.shape[:-1]], np.arange(ft.shape[-1]),
                        indexing="ij")
    res = np.sqrt(sum(k.astype(np.float64) ** 2 for k in index)) / (n * angpix)
    ft *= np.where(res <= 1.0 / (angpix * 2.0), np.exp(-(bfactor / 4.0) * res * res), 0.0)
    return np.fft.irfftn(ft, s=volume.shape, axes=tuple(range(volume.ndim)))


@pytest.mark.parametrize("shape, bfactor", [((32, 32, 32), -80.0), ((24, 24, 24), 50.0), ((33, 33, 33), -80.0)])
def test_a_bfactor_alone_on_a_map_is_relions(tmp_path, shape, bfactor):
    volume = np.random.default_rng(shape[0]).normal(size=shape).astype(np.float32)
    write_mrc(tmp_path / "map.mrc", volume, voxel_size=2.0)
    result = noa("filter", tmp_path / "map.mrc", tmp_path / "noa.mrc", "--bfactor", bfactor)
    assert result.returncode == 0, result.stderr
    got = load(tmp_path / "noa.mrc")
    np.testing.assert_allclose(got, relion_bfactor(volume, 2.0, bfactor), atol=1e-4 * np.abs(got).max())
    # The corners beyond Nyquist hold nothing: the power there is zero (before, B -80 amplified them).
    f = spectral.frequencies(shape)
    assert np.abs(np.fft.rfftn(got.astype(np.float64))[f > 0.5 + 1e-9]).max() < 1e-3 * np.abs(got).sum() / got.size
    relion("relion_image_handler", "--i", tmp_path / "map.mrc", "--o", tmp_path / "relion.mrc", "--bfactor", bfactor,
           "--angpix", "2")
    expected = load(tmp_path / "relion.mrc")
    np.testing.assert_allclose(got, expected, atol=1e-5 * np.abs(expected).max())


def test_a_bfactor_on_a_stack_with_a_lowpass_is_relions_image_by_image(tmp_path):
    images = np.random.default_rng(7).normal(size=(3, 40, 40)).astype(np.float32)
    write_mrc(tmp_path / "in.mrcs", images, stack=True, voxel_size=1.0)
    for options, name in ((("--bfactor", "-50"), "b"), (("--bfactor", "-50", "--lowpass", "4"), "bl")):
        assert noa("filter", tmp_path / "in.mrcs", tmp_path / f"{name}.mrcs", *options).returncode == 0
        relion("relion_image_handler", "--i", tmp_path / "in.mrcs", "--o", tmp_path / f"{name}_relion.mrcs",
               *options, "--angpix", "1")
        got, expected = load(tmp_path / f"{name}.mrcs"), load(tmp_path / f"{name}_relion.mrcs")
        assert got.shape == expected.shape == images.shape
        np.testing.assert_allclose(got, expected, atol=1e-5 * np.abs(expected).max())
    np.testing.assert_allclose(load(tmp_path / "b.mrcs")[1], relion_bfactor(images[1], 1.0, -50.0), atol=1e-4)


def test_strong_sharpening_stays_finite_or_is_refused(tmp_path):
    image = np.random.default_rng(3).normal(size=(1, 32, 32)).astype(np.float32)
    write_mrc(tmp_path / "img.mrc", image)
    # e^50 at Nyquist: large but finite in float32 (it was NaN everywhere: inf x 0 in the corners)
    result = noa("filter", tmp_path / "img.mrc", tmp_path / "f.mrc", "--bfactor", "-200", "--angpix", "0.5")
    assert result.returncode == 0, result.stderr
    assert np.isfinite(load(tmp_path / "f.mrc")).all()
    refused = noa("filter", tmp_path / "img.mrc", tmp_path / "g.mrc", "--bfactor", "-10000", "--angpix", "0.5")
    assert_user_error(refused, "--bfactor", "e^2500", "-240")
    assert not (tmp_path / "g.mrc").exists()


@pytest.mark.parametrize("size, angpix, options", [
    (24, 1.5, ("--lowpass", "8")),                                  # shell 4.5: RELION rounds half shells up
    (20, 1.0, ("--highpass", "8", "--filter_edge_width", "3")),    # shell 2.5, an odd edge halved in integers
    (24, 1.5, ("--lowpass", "8", "--highpass", "48", "--filter_edge_width", "5"))])
def test_half_shells_and_odd_edges_are_relions(tmp_path, size, angpix, options):
    images = np.random.default_rng(size).normal(size=(2, size, size)).astype(np.float32)
    write_mrc(tmp_path / "in.mrcs", images, stack=True, voxel_size=angpix)
    noa_options = [("--edge-width" if o == "--filter_edge_width" else o) for o in options]
    result = noa("filter", tmp_path / "in.mrcs", tmp_path / "noa.mrcs", *noa_options)
    assert result.returncode == 0, result.stderr
    relion("relion_image_handler", "--i", tmp_path / "in.mrcs", "--o", tmp_path / "relion.mrcs", *options,
           "--angpix", angpix)
    got, expected = load(tmp_path / "noa.mrcs"), load(tmp_path / "relion.mrcs")
    np.testing.assert_allclose(got, expected, atol=1e-5 * np.abs(expected).max())



@pytest.mark.parametrize("shape, header, given, zeroed", [((20, 20, 20), 1.3, None, True), ((20, 20), 1.3, None, True),
                                                           ((20, 20, 20), 2.0, None, False),
                                                           ((20, 20, 20), 2.0, 1.3, False)])
def test_samples_exactly_at_nyquist_fall_as_relions_double_test_puts_them(tmp_path, shape, header, given, zeroed):
    """|k| = N/2 exactly (19 samples of a 20^3 half transform, 6 of a 20 x 20 one): RELION's res = sqrt(r2) /
    (N x angpix) <= 1 / (angpix x 2), in double, is false for the header's 1.3 Å (10 / 26 rounds above 1 / 2.6),
    true at 2 Å and for --angpix 1.3, which RELION reads as float32 (1.29999995); noa kept them at every pixel
    size (x 19 at B -80: 0.15 of the peak at 20^3)."""
    data = np.random.default_rng(20).normal(size=shape).astype(np.float32)
    write_mrc(tmp_path / "map.mrc", data, voxel_size=header)
    option = () if given is None else ("--angpix", given)
    result = noa("filter", tmp_path / "map.mrc", tmp_path / "noa.mrc", "--bfactor", "-80", *option)
    assert result.returncode == 0, result.stderr
    relion("relion_image_handler", "--i", tmp_path / "map.mrc", "--o", tmp_path / "relion.mrc", "--bfactor", "-80",
           *option)
    got, expected = load(tmp_path / "noa.mrc").reshape(shape), load(tmp_path / "relion.mrc").reshape(shape)
    np.testing.assert_allclose(got, expected, atol=1e-5 * np.abs(expected).max())
    angpix = header if given is None else float(np.float32(given))
    np.testing.assert_allclose(got, relion_bfactor(data, angpix, -80.0), atol=1e-5 * np.abs(expected).max())
    at_nyquist = spectral.frequencies(shape) == 0.5
    assert at_nyquist.sum() == (19 if len(shape) == 3 else 6)
    kept = np.abs(np.fft.rfftn(got.astype(np.float64))[at_nyquist]) > 1e-3
    assert (not kept.any()) if zeroed else kept.all()

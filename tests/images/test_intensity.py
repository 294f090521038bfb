"""noa normalize --bg-radius against RELION's particle normalisation (issue 25 item 5): relion_preprocess --norm
--bg_radius R [--no_ramp] [--white_dust S --black_dust S], and RELION 3.1.3's normalise transcribed from
src/image.cpp (runs whether RELION is installed or not)."""

from __future__ import annotations

import numpy as np
import pytest

import noa_core as noa_api
from helpers import assert_user_error, load, noa, relion, write_mrc
from noa_core.errors import ParameterError
from noa_core.images import intensity


def relion_normalise(image: np.ndarray, bg_radius: int, ramp: bool = True) -> np.ndarray:
    """RELION 3.1.3's normalise (src/image.cpp) without dust, transcribed: logical indices run from -N//2 on
    every axis (setXmippOrigin); the background is k² + i² + j² > bg_radius²; the ramp is fitLeastSquaresPlane
    (src/funcs.cpp, Cramer's rule on the normal equations, x = j, y = i) subtracted from every pixel; then
    (v - avg) / stddev with stddev = sqrt(sum2 / n - avg²), skipped below 1e-10."""
    img = image.astype(np.float64).copy()
    grids = np.meshgrid(*[np.arange(n) - n // 2 for n in img.shape], indexing="ij")
    bg = sum(g * g for g in grids) > bg_radius * bg_radius
    if ramp:
        i, j = grids
        x, y, z = j[bg].astype(np.float64), i[bg].astype(np.float64), img[bg]
        D, E, F, G, H = (x * x).sum(), (x * y).sum(), x.sum(), (y * y).sum(), y.sum()
        I, J, K, L = float(bg.sum()), (x * z).sum(), (y * z).sum(), z.sum()  # noqa: E741
        denom = F * F * G - 2 * E * F * H + D * H * H + E * E * I - D * G * I
        a = (H * H * J - G * I * J + E * I * K + F * G * L - H * (F * K + E * L)) / denom
        b = (E * I * J + F * F * K - D * I * K + D * H * L - F * (H * J + E * L)) / denom
        c = (F * G * J - E * H * J - E * F * K + D * H * K + E * E * L - D * G * L) / denom
        img -= a * j + b * i + c
    values = img[bg]
    avg = values.sum() / values.size
    stddev = np.sqrt((values * values).sum() / values.size - avg * avg)
    return img if stddev < 1e-10 else (img - avg) / stddev


def particles(n: int, box: int, seed: int, ramp: bool = True) -> np.ndarray:
    """``n`` noisy images of a bright blob at the centre, on a background of 10 plus (with ``ramp``) a tilted
    plane different in every image: what RELION's ramp subtraction is for."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[:box, :box] - box // 2
    blob = 4.0 * np.exp(-(x * x + y * y) / (2 * (box / 8) ** 2))
    out = []
    for _ in range(n):
        tilt = rng.uniform(-0.2, 0.2, 2) if ramp else (0.0, 0.0)
        out.append(10.0 + tilt[0] * x + tilt[1] * y + blob + rng.normal(0, 1.5, (box, box)))
    return np.array(out, dtype=np.float32)


def relion_preprocess(tmp_path, stack: np.ndarray, *options) -> np.ndarray:
    write_mrc(tmp_path / "relion_in.mrcs", stack, stack=True)
    relion("relion_preprocess", "--operate_on", tmp_path / "relion_in.mrcs", "--operate_out",
           tmp_path / "relion_out.mrcs", "--norm", *options, cwd=tmp_path)
    return load(tmp_path / "relion_out.mrcs")


def assert_close(got: np.ndarray, expected: np.ndarray) -> None:
    """Within 1e-5 of the output's scale."""
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * np.abs(expected).max())


# -- the transcription of RELION's formula (always runs) --------------------------------------------------


@pytest.mark.parametrize("box, radius", [(32, 12), (33, 12), (31, 15), (40, 20)])
@pytest.mark.parametrize("ramp", [True, False])
def test_the_python_function_is_relions_formula(box, radius, ramp):
    stack = particles(3, box, box, ramp=True)
    got = noa_api.normalize(stack[:, None], bg_radius=radius, ramp=ramp).numpy()  # a stack: BDHW
    assert got.dtype == np.float32 and got.shape == (3, 1, box, box)
    for image, out in zip(stack, got[:, 0]):
        assert_close(out, relion_normalise(image, radius, ramp))
    # the background is what it says: mean 0 and standard deviation 1 over x² + y² > R² from the centre N//2
    y, x = np.mgrid[:box, :box] - box // 2
    outside = got[:, 0][:, x * x + y * y > radius * radius]
    np.testing.assert_allclose(outside.mean(axis=1), 0, atol=1e-6)
    np.testing.assert_allclose(outside.std(axis=1), 1, atol=1e-6)


def test_the_ramp_is_removed_exactly_and_mean_std_apply_after():
    # a pure plane plus a little noise: with the ramp, the plane is gone; without it, the plane stays
    y, x = np.mgrid[:32, :32] - 16
    noise = np.random.default_rng(1).normal(0, 0.1, (32, 32))
    image = (0.5 * x - 0.25 * y + 7 + noise).astype(np.float32)
    flat = noa_api.normalize(image, bg_radius=10).numpy()[0, 0]
    assert abs(np.corrcoef(flat.ravel(), x.ravel())[0, 1]) < 0.05
    tilted = noa_api.normalize(image, bg_radius=10, ramp=False).numpy()[0, 0]
    assert np.corrcoef(tilted.ravel(), x.ravel())[0, 1] > 0.8
    moved = noa_api.normalize(image, bg_radius=10, mean=5, std=2).numpy()[0, 0]
    np.testing.assert_allclose(moved, flat * 2 + 5, atol=1e-5)


def test_volumes_use_a_sphere_and_their_sections_can_be_images():
    volume = np.random.default_rng(5).normal(3, 2, (1, 21, 24, 24)).astype(np.float32)
    got = noa_api.normalize(volume, bg_radius=9, ramp=False).numpy()
    assert_close(got[0], relion_normalise(volume[0], 9, ramp=False))  # k² + i² + j² > R², centre N//2
    sections = noa_api.normalize(volume, bg_radius=9, per_section=True).numpy()
    for z in (0, 10, 20):
        assert_close(sections[0, z], relion_normalise(volume[0, z], 9, ramp=True))
    with pytest.raises(ParameterError, match="2-d images only"):
        noa_api.normalize(volume, bg_radius=9)


def test_the_background_is_outside_the_circle_from_the_centre():
    for shape, radius in (((6, 6), 2), ((7, 5), 2.5), ((4, 4, 4), 1)):
        grids = np.meshgrid(*[np.arange(n) - n // 2 for n in shape], indexing="ij")
        expected = sum(g * g for g in grids) > radius**2
        np.testing.assert_array_equal(intensity.background(shape, radius, ramp=False).mask, expected)


def test_a_constant_background_is_left_unscaled_as_relion_leaves_it():
    y, x = np.mgrid[:16, :16] - 8
    image = np.where(x * x + y * y <= 16, 5.0, 2.0).astype(np.float32)  # background sd 0
    np.testing.assert_array_equal(noa_api.normalize(image, bg_radius=6, ramp=False).numpy()[0, 0], image)
    assert_close(noa_api.normalize(image, bg_radius=6).numpy()[0, 0], relion_normalise(image, 6))


def test_dust_is_replaced_by_background_noise_and_only_dust():
    # dust planted inside the circle leaves the background (so the ramp and the statistics) unchanged:
    # every other pixel is exactly RELION's normalisation without dust, the dust pixels are N(0, 1) draws
    stack = particles(40, 32, 2, ramp=False)
    rng = np.random.default_rng(3)
    spots = rng.integers(-6, 6, (40, 2, 2)) + 16  # two white and two black spots per image, |r| < 10
    dusty = stack.copy()
    for k, ((wy, wx), (by, bx)) in enumerate(spots):
        dusty[k, wy, wx], dusty[k, by, bx] = 500.0, -500.0
    got = noa_api.normalize(dusty[:, None], bg_radius=10, ramp=False, white_dust=5, black_dust=5).numpy()[:, 0]
    clean = np.array([relion_normalise(image, 10, ramp=False) for image in dusty])
    replaced = np.abs(clean) > 5  # the spots, and the few brightest pixels of the blobs
    assert replaced.sum() < 2 * spots.size and all(replaced[k, spot[:, 0], spot[:, 1]].all() for k, spot in
                                                    enumerate(spots))
    np.testing.assert_allclose(got[~replaced], clean[~replaced], atol=1e-5 * np.abs(clean[~replaced]).max())
    draws = got[replaced]
    assert np.abs(draws).max() < 6  # not ±500 any more
    assert abs(draws.mean()) < 4 / np.sqrt(draws.size) and abs(draws.std() - 1) < 0.2
    # white dust alone leaves the black spots as they were; the same input gives the same noise
    white = noa_api.normalize(dusty[:, None], bg_radius=10, ramp=False, white_dust=5).numpy()[:, 0]
    k, (by, bx) = 0, spots[0, 1]
    assert white[k, by, bx] == pytest.approx(clean[k, by, bx], rel=1e-6) and clean[k, by, bx] < -100
    again = noa_api.normalize(dusty[:, None], bg_radius=10, ramp=False, white_dust=5, black_dust=5).numpy()[:, 0]
    np.testing.assert_array_equal(again, got)


def test_bad_values_are_refused_in_python():
    image = np.ones((1, 16, 16), np.float32)
    with pytest.raises(ParameterError, match="must fit in the 16x16 box"):
        noa_api.normalize(image, bg_radius=8.5)
    with pytest.raises(ParameterError, match="white_dust works on the background"):
        noa_api.normalize(image, white_dust=3)
    with pytest.raises(ParameterError, match="positive"):
        noa_api.normalize(image, bg_radius=4, black_dust=0)
    with pytest.raises(ParameterError, match="too few background pixels"):
        noa_api.normalize(np.ones((1, 2, 2)), bg_radius=1)


# -- RELION's own relion_preprocess, through noa's CLI ----------------------------------------------------


@pytest.mark.parametrize("box, radius", [(32, 12), (33, 13)])
@pytest.mark.parametrize("ramp", [True, False])
def test_the_cli_matches_relion_preprocess(tmp_path, box, radius, ramp):
    stack = particles(4, box, 10 + box)
    write_mrc(tmp_path / "in.mrcs", stack, stack=True)
    ramp_options = () if ramp else ("--no-ramp",)
    result = noa("normalize", tmp_path / "in.mrcs", tmp_path / "out.mrcs", "--bg-radius", radius, *ramp_options)
    assert result.returncode == 0, result.stderr
    got = load(tmp_path / "out.mrcs")
    assert got.dtype == np.float32
    assert_close(got, np.array([relion_normalise(image, radius, ramp) for image in stack]))
    expected = relion_preprocess(tmp_path, stack, "--bg_radius", radius, *(() if ramp else ("--no_ramp",)))
    assert_close(got, expected)


def test_the_cli_matches_relion_with_dust(tmp_path):
    # 1. no pixel beyond the limits: RELION's output is deterministic and noa's is the same
    stack = particles(3, 32, 4)
    write_mrc(tmp_path / "in.mrcs", stack, stack=True)
    dust = ("--white-dust", "20", "--black-dust", "20")
    assert noa("normalize", tmp_path / "in.mrcs", tmp_path / "out.mrcs", "--bg-radius", 12, *dust).returncode == 0
    assert_close(load(tmp_path / "out.mrcs"), relion_preprocess(tmp_path, stack, "--bg_radius", 12,
                                                                "--white_dust", 20, "--black_dust", 20))
    # 2. dust inside the circle: every other pixel is RELION's; the dust pixels of both are background noise
    dusty = stack.copy()
    dusty[:, 14, 17], dusty[:, 18, 13] = 300.0, -300.0
    write_mrc(tmp_path / "dusty.mrcs", dusty, stack=True)
    assert noa("normalize", tmp_path / "dusty.mrcs", tmp_path / "clean.mrcs", "--bg-radius", 12, "--white-dust", 5,
               "--black-dust", 5).returncode == 0
    got = load(tmp_path / "clean.mrcs")
    expected = relion_preprocess(tmp_path, dusty, "--bg_radius", 12, "--white_dust", 5, "--black_dust", 5)
    spots = np.abs(np.array([relion_normalise(image, 12, ramp=False) for image in dusty])) > 5  # raw: as RELION
    assert spots[:, 14, 17].all() and spots[:, 18, 13].all()
    assert_close(got[~spots], expected[~spots])
    assert np.abs(got[spots]).max() < 6 and np.abs(expected[spots]).max() < 6
    # the file is normalised image by image with the same noise as in memory (each image seeded by its index)
    np.testing.assert_allclose(
        got, noa_api.normalize(dusty[:, None], bg_radius=12, white_dust=5, black_dust=5).numpy()[:, 0], atol=1e-6)


def test_the_cli_matches_relion_on_a_constant_background(tmp_path):
    y, x = np.mgrid[:24, :24] - 12
    stack = np.array([np.where(x * x + y * y <= 25, 3.0, 1.0)] * 2, np.float32)
    write_mrc(tmp_path / "in.mrcs", stack, stack=True)
    assert noa("normalize", tmp_path / "in.mrcs", tmp_path / "out.mrcs", "--bg-radius", 8, "--no-ramp").returncode == 0
    np.testing.assert_array_equal(load(tmp_path / "out.mrcs"), stack)
    np.testing.assert_array_equal(relion_preprocess(tmp_path, stack, "--bg_radius", 8, "--no_ramp"), stack)


def test_the_cli_refuses_in_one_line(tmp_path):
    write_mrc(tmp_path / "in.mrcs", particles(2, 32, 1), stack=True)
    write_mrc(tmp_path / "vol.mrc", np.zeros((8, 32, 32), np.float32))
    source, out = tmp_path / "in.mrcs", tmp_path / "out.mrcs"
    assert_user_error(noa("normalize", source, out, "--no-ramp"), "--bg-radius", "--no-ramp")
    assert_user_error(noa("normalize", source, out, "--bg-radius", 17), "--bg-radius", "32x32")
    assert_user_error(noa("normalize", tmp_path / "vol.mrc", out, "--bg-radius", 4), "--ramp", "--no-ramp",
                      "2-d images only")
    assert not out.exists()


# -- HTTP --------------------------------------------------------------------------------------------------


def test_http_upload_normalises_as_relion(tmp_path):
    import warnings

    warnings.filterwarnings("ignore", message=".*httpx.*")
    from fastapi.testclient import TestClient

    from noa_server.app import create_app
    from noa_server.settings import Settings

    stack = particles(2, 32, 9)
    write_mrc(tmp_path / "in.mrcs", stack, stack=True)
    (tmp_path / "root").mkdir()
    with TestClient(create_app(Settings(warmup=False, data_root=tmp_path / "root"))) as client:
        response = client.post("/v1/upload/normalize", data={"bg_radius": "12", "ramp": "false"},
                               files={"file": ("in.mrcs", (tmp_path / "in.mrcs").read_bytes())})
        assert response.status_code == 200, response.text
        (tmp_path / "out.mrcs").write_bytes(response.content)
        assert_close(load(tmp_path / "out.mrcs"), np.array([relion_normalise(i, 12, ramp=False) for i in stack]))
        refused = client.post("/v1/upload/normalize", data={"white_dust": "3"},
                              files={"file": ("in.mrcs", (tmp_path / "in.mrcs").read_bytes())})
        assert 400 <= refused.status_code < 500 and "bg_radius" in refused.text

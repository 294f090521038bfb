"""noa mask: RELION's soft masks (relion_mask_create), spheres and cylinders; the CLI, HTTP and Python.

Oracles: RELION 3.1.3's autoMask, lowPassFilterMap and raisedCrownMask transcribed from src/mask.cpp and
src/fftw.cpp (a brute-force search of the cube around every voxel, as RELION runs it: always run), the
sphere and cylinder formulas written out with NumPy, mrcfile for the files, and relion_mask_create itself
(skipped where RELION is absent).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import ndimage

from helpers import EXAMPLE_MAP, assert_problem, assert_user_error, load, mrc_data, noa, relion, write_mrc
from noa_core import operations
from noa_core.errors import ParameterError, ShapeError
from noa_core.geometry import masks
from noa_core.run import local

RELION_TOLERANCE = 1e-5


def relion_ceil(x: float) -> int:
    """RELION's CEIL macro (src/macros.h): x when integral, else (int)(x + 1) above 0 and (int)x below."""
    if x == int(x):
        return int(x)
    return int(x + 1) if x > 0 else int(x)


def neighbours(values: np.ndarray, offset: tuple[int, ...], size: int) -> np.ndarray:
    """``values`` at p + offset for every voxel p (NaN outside the box: RELION skips those neighbours)."""
    padded = np.pad(values.astype(np.float64), size, constant_values=np.nan)
    window = tuple(slice(size + o, size + o + n) for o, n in zip(offset, values.shape))
    return padded[window]


def relion_automask(values: np.ndarray, threshold: float, extend: float, width: float) -> np.ndarray:
    """src/mask.cpp autoMask transcribed: msk = value >= T; for E > 0 a zero voxel becomes 1 when a voxel
    of the cube of half-size |CEIL(E)| around it is > 0.999 at squared distance < E²; for E < 0 a one voxel
    becomes 0 when one is < 0.001 there; then each zero voxel takes min_r2 (starting at 9999) over the
    cube of half-size CEIL(W) of the ones and, where min_r2 < W², 0.5 + 0.5 cos(pi sqrt(min_r2) / W)."""
    msk = (values.astype(np.float64) >= threshold).astype(np.float64)
    if extend != 0:
        size = abs(relion_ceil(extend))
        copy = msk.copy()
        hit = np.zeros(msk.shape, bool)
        for offset in itertools.product(range(-size, size + 1), repeat=msk.ndim):
            if sum(o * o for o in offset) < extend * extend:
                near = neighbours(copy, offset, size)
                hit |= (near > 0.999) if extend > 0 else (near < 0.001)
        if extend > 0:
            msk[(copy < 0.001) & hit] = 1.0
        else:
            msk[(copy > 0.999) & hit] = 0.0
    if width > 0:
        size = relion_ceil(width)
        copy = msk.copy()
        min_r2 = np.full(msk.shape, 9999.0)
        for offset in itertools.product(range(-size, size + 1), repeat=msk.ndim):
            r2 = float(sum(o * o for o in offset))
            near = neighbours(copy, offset, size)
            min_r2 = np.where((near > 0.999) & (r2 < min_r2), r2, min_r2)
        edge = (copy < 0.001) & (min_r2 < width * width)
        msk[edge] = 0.5 + 0.5 * np.cos(np.pi * np.sqrt(min_r2[edge]) / width)
    return msk


def relion_lowpass(volume: np.ndarray, lowpass: float, angpix: float) -> np.ndarray:
    """src/fftw.cpp lowPassFilterMap for a cube (filter_edge_width 2, so a half-width of 1 shell): ires =
    ROUND(N angpix / lowpass) (half away from zero), a raised cosine from (ires - 1) / N to (ires + 1) / N
    over res = |k| / N, in double precision."""
    n = volume.shape[-1]
    ft = np.fft.rfftn(volume.astype(np.float64))
    grids = np.meshgrid(*[np.fft.fftfreq(s, 1 / s) for s in volume.shape[:-1]], np.arange(ft.shape[-1]),
                        indexing="ij")
    res = np.sqrt(sum(g.astype(np.float64) ** 2 for g in grids)) / n
    ires = math.floor(n * angpix / lowpass + 0.5)
    low, high = max(0.0, (ires - 1) / n), (ires + 1) / n
    ft *= np.where(res < low, 1.0, np.where(res > high, 0.0, 0.5 + 0.5 * np.cos(np.pi * (res - low) / (high - low))))
    return np.fft.irfftn(ft, s=volume.shape, axes=tuple(range(volume.ndim)))


def crown(distance: np.ndarray, radius: float, width: float) -> np.ndarray:
    """src/mask.cpp raisedCrownMask's outer edge (inner radius 0), written out per voxel."""
    out = np.zeros(distance.shape)
    for index, d in np.ndenumerate(distance):
        if d < radius:
            out[index] = 1.0
        elif d < radius + width:
            out[index] = 0.5 - 0.5 * math.cos(math.pi * (radius + width - d) / width)
    return out


def blob(shape, seed: int, sigma: float = 1.5) -> np.ndarray:
    """Smooth random density: a few connected blobs and holes, as a map has."""
    return ndimage.gaussian_filter(np.random.default_rng(seed).normal(size=shape), sigma).astype(np.float32)


# -- the numbers: RELION's rule transcribed, on tiny boxes ---------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(shape=st.lists(st.integers(3, 11), min_size=2, max_size=3), seed=st.integers(0, 2**16),
       quantile=st.floats(0.3, 0.95), extend=st.sampled_from([0.0, 1.0, 1.5, 2.0, 2.7, -1.0, -1.5, -2.2]),
       width=st.sampled_from([0.0, 1.0, 2.0, 2.5, 3.7]))
def test_threshold_masks_are_relions_automask(shape, seed, quantile, extend, width):
    values = blob(shape, seed, sigma=1.0)
    threshold = float(np.quantile(values, quantile))
    try:
        got = masks.threshold_mask(values, threshold, extend=extend, width=width)
    except ParameterError as exc:  # a shrink that leaves nothing is refused: RELION's mask is empty there
        assert exc.param == "extend"
        assert not relion_automask(values, threshold, extend, 0.0).any()
        return
    np.testing.assert_allclose(got, relion_automask(values, threshold, extend, width), rtol=0, atol=1e-12)
    assert got.dtype == np.float64 and got.shape == tuple(shape)


def test_distances_are_euclidean_within_the_box_and_strict():
    mask = np.zeros((1, 9), bool)
    mask[0, 0] = True
    np.testing.assert_array_equal(masks.extended(mask, 3.0)[0], [1, 1, 1, 0, 0, 0, 0, 0, 0])  # d < 3, not <=
    square = np.zeros((7, 7), bool)
    square[3, 3] = True
    corner = 0.5 + 0.5 * math.cos(math.pi * math.sqrt(2) / 2)  # d = sqrt(2) on the diagonal
    np.testing.assert_allclose(masks.soft_edge(square, 2.0)[2:5, 2:5],
                               [[corner, 0.5, corner], [0.5, 1.0, 0.5], [corner, 0.5, corner]])
    # The edge never wraps around the box: the far column stays 0.
    assert masks.soft_edge(mask, 4.0)[0, -1] == 0.0
    full = np.ones((4, 4), bool)
    np.testing.assert_array_equal(masks.extended(full, -2.0), full)  # no outside to shrink from, as RELION


@pytest.mark.parametrize("shape", [(16, 16, 16), (15, 15, 15), (12, 14, 17), (20, 21)])
@pytest.mark.parametrize("radius, width", [(5.0, 3.0), (4.5, 0.0), (6.0, 2.5)])
def test_spheres_are_relions_raised_crown(shape, radius, width):
    centre = [n // 2 for n in shape]
    distance = np.sqrt(sum((np.indices(shape)[a] - c) ** 2.0 for a, c in enumerate(centre)))
    np.testing.assert_allclose(masks.sphere(shape, radius, width), crown(distance, radius, width), atol=1e-15)


@pytest.mark.parametrize("shape", [(16, 16, 16), (17, 15, 14)])
@pytest.mark.parametrize("height", [None, 7.0, 10.0])
def test_cylinders_about_z(shape, height):
    z, y, x = np.indices(shape)
    across = np.sqrt((y - shape[1] // 2) ** 2.0 + (x - shape[2] // 2) ** 2.0)
    expected = crown(across, 4.0, 3.0)
    if height is not None:
        expected = np.minimum(expected, crown(np.abs(z - shape[0] // 2).astype(float), height / 2, 3.0))
    got = masks.cylinder(shape, 4.0, height, 3.0)
    np.testing.assert_allclose(got, expected, atol=1e-15)
    if height is None:  # every section the same
        assert (got == got[:1]).all()
    with pytest.raises(ShapeError):
        masks.cylinder(shape[1:], 4.0)


# -- files against relion_mask_create ------------------------------------------------------------------------


@pytest.mark.parametrize("n", [24, 25])
@pytest.mark.parametrize("extend, width", [(0.0, 0.0), (3.0, 0.0), (2.5, 4.5), (0.0, 3.0), (-1.5, 2.0), (-2.0, 0.0)])
def test_masks_of_blobs_are_relion_mask_creates(tmp_path, n, extend, width):
    volume = write_mrc(tmp_path / "map.mrc", blob((n, n, n), n), voxel_size=1.3)
    threshold = float(np.quantile(volume, 0.8))
    result = noa("mask", tmp_path / "map.mrc", tmp_path / "noa.mrc", "--threshold", repr(threshold), "--extend", extend,
                 "--soft-edge", width)
    assert result.returncode == 0, result.stderr
    got, header, voxel = mrc_data(tmp_path / "noa.mrc")
    assert got.dtype == np.float32 and got.shape == (n, n, n) and header.mode == 2
    assert (float(voxel.x), float(voxel.y), float(voxel.z)) == pytest.approx((1.3, 1.3, 1.3))
    np.testing.assert_allclose(got, relion_automask(volume, threshold, extend, width), atol=1e-7)
    assert header.dmin == got.min() and header.dmax == got.max()
    relion("relion_mask_create", "--i", tmp_path / "map.mrc", "--o", tmp_path / "relion.mrc", "--ini_threshold",
           repr(threshold), "--extend_inimask", extend, "--width_soft_edge", width)
    expected = load(tmp_path / "relion.mrc")
    assert np.abs(got - expected).max() <= RELION_TOLERANCE


def test_the_example_map_low_passed_and_inverted_as_relion(tmp_path):
    volume = load(EXAMPLE_MAP)  # 20^3 at 11.4 Å: the lowpass 40 Å is shell round(5.7) = 6, off any half shell
    assert volume.shape == (20, 20, 20)
    write_mrc(tmp_path / "emd.mrc", volume, voxel_size=11.4)
    filtered = relion_lowpass(volume, 40.0, 11.4)
    threshold = float(np.quantile(filtered, 0.85))
    args = ("--extend", "2", "--soft-edge", "3")
    result = noa("mask", tmp_path / "emd.mrc", tmp_path / "noa.mrc", "--threshold", repr(threshold), "--lowpass", "40",
                 "--invert", *args)
    assert result.returncode == 0, result.stderr
    got = load(tmp_path / "noa.mrc")
    expected = 1.0 - relion_automask(filtered, threshold, 2.0, 3.0)
    np.testing.assert_allclose(got, expected, atol=1e-7)
    assert 0 < (got == 0).sum() < got.size  # inverted: zero inside the particle
    relion("relion_mask_create", "--i", tmp_path / "emd.mrc", "--o", tmp_path / "relion.mrc", "--ini_threshold",
           repr(threshold), "--lowpass", "40", "--invert", "--extend_inimask", "2", "--width_soft_edge", "3")
    assert np.abs(got - load(tmp_path / "relion.mrc")).max() <= RELION_TOLERANCE
    # Cropped to an odd box, unfiltered: the same rule at the box edges.
    write_mrc(tmp_path / "crop.mrc", np.ascontiguousarray(volume[2:19, 1:18, 3:20]), voxel_size=11.4)
    crop = load(tmp_path / "crop.mrc")
    assert noa("mask", tmp_path / "crop.mrc", tmp_path / "c.mrc", "--threshold", "2.5", *args).returncode == 0
    np.testing.assert_allclose(load(tmp_path / "c.mrc"), relion_automask(crop, 2.5, 2.0, 3.0), atol=1e-7)
    relion("relion_mask_create", "--i", tmp_path / "crop.mrc", "--o", tmp_path / "rc.mrc", "--ini_threshold", "2.5",
           "--extend_inimask", "2", "--width_soft_edge", "3")
    assert np.abs(load(tmp_path / "c.mrc") - load(tmp_path / "rc.mrc")).max() <= RELION_TOLERANCE


def test_an_image_is_masked_in_2d_as_relion(tmp_path):
    image = write_mrc(tmp_path / "img.mrc", blob((1, 40, 36), 5), voxel_size=2.0)[0]
    threshold = float(np.quantile(image, 0.7))
    result = noa("mask", tmp_path / "img.mrc", tmp_path / "noa.mrc", "--threshold", repr(threshold), "--extend", "1.5",
                 "--soft-edge", "4")
    assert result.returncode == 0, result.stderr
    got = load(tmp_path / "noa.mrc").reshape(40, 36)
    np.testing.assert_allclose(got, relion_automask(image, threshold, 1.5, 4.0), atol=1e-7)
    relion("relion_mask_create", "--i", tmp_path / "img.mrc", "--o", tmp_path / "relion.mrc", "--ini_threshold",
           repr(threshold), "--extend_inimask", "1.5", "--width_soft_edge", "4")
    assert np.abs(got - load(tmp_path / "relion.mrc").reshape(40, 36)).max() <= RELION_TOLERANCE


@pytest.mark.parametrize("n", [24, 25])
def test_a_sphere_is_relions_denovo_mask(tmp_path, n):
    write_mrc(tmp_path / "box.mrc", np.zeros((n, n, n), np.float32), voxel_size=1.7)
    result = noa("mask", tmp_path / "box.mrc", tmp_path / "ball.mrc", "--sphere", "7.5", "--soft-edge", "3")
    assert result.returncode == 0, result.stderr
    got, _, voxel = mrc_data(tmp_path / "ball.mrc")
    distance = np.sqrt(sum((g - n // 2) ** 2.0 for g in np.indices((n, n, n))))
    np.testing.assert_allclose(got, crown(distance, 7.5, 3.0), atol=1e-7)
    assert float(voxel.x) == pytest.approx(1.7)
    relion("relion_mask_create", "--denovo", "--box_size", n, "--outer_radius", "7.5", "--width_soft_edge", "3",
           "--o", tmp_path / "relion.mrc")
    assert np.abs(got - load(tmp_path / "relion.mrc")).max() <= RELION_TOLERANCE
    inverted = noa("mask", tmp_path / "box.mrc", tmp_path / "hole.mrc", "--sphere", "7.5", "--soft-edge", "3",
                   "--invert")
    assert inverted.returncode == 0, inverted.stderr
    np.testing.assert_allclose(load(tmp_path / "hole.mrc"), 1.0 - crown(distance, 7.5, 3.0), atol=1e-7)


# -- Python, HTTP -----------------------------------------------------------------------------------------------


def test_python_task_and_the_label(tmp_path):
    volume = write_mrc(tmp_path / "map.mrc", blob((16, 16, 16), 3), voxel_size=1.0)
    task = operations.get("mask").task(threshold=0.05, extend=1.0, soft_edge=2.0)
    plan = task.plan(tmp_path / "map.mrc")
    assert plan.shape == (1, 16, 16, 16) and plan.dtype == np.float32
    assert plan.label == "noa mask --threshold 0.05 --extend 1 --soft-edge 2"
    local.write(task, tmp_path / "map.mrc", tmp_path / "mask.mrc")
    np.testing.assert_allclose(load(tmp_path / "mask.mrc"), relion_automask(volume, 0.05, 1.0, 2.0), atol=1e-7)
    cylinder = operations.get("mask").task(cylinder=5.0, height=8.0, soft_edge=2.0)
    local.write(cylinder, tmp_path / "map.mrc", tmp_path / "cyl.mrc")
    np.testing.assert_allclose(load(tmp_path / "cyl.mrc"), masks.cylinder((16, 16, 16), 5.0, 8.0, 2.0), atol=1e-7)


def test_upload_a_mask_and_a_refusal(tmp_path, make_client):
    client = make_client()
    volume = write_mrc(tmp_path / "map.mrc", blob((16, 16, 16), 4), voxel_size=1.0)
    sent = (tmp_path / "map.mrc").read_bytes()
    response = client.post("/v1/upload/mask", data={"threshold": "0.05", "soft_edge": "3"},
                           files={"file": ("map.mrc", sent)})
    assert response.status_code == 200, response.text
    (tmp_path / "out.mrc").write_bytes(response.content)
    np.testing.assert_allclose(load(tmp_path / "out.mrc"), relion_automask(volume, 0.05, 0.0, 3.0), atol=1e-7)
    body = assert_problem(client.post("/v1/upload/mask", data={"threshold": "100"}, files={"file": ("map.mrc", sent)}),
                          400, "invalid-parameter")
    assert "map.mrc" in body["detail"] and "empty" in body["detail"]
    body = assert_problem(client.post("/v1/upload/mask", data={"threshold": "0.1", "soft_edge": "-2"},
                                      files={"file": ("map.mrc", sent)}), 400, "invalid-parameters")
    assert "soft_edge" in body["detail"]


# -- refusals ------------------------------------------------------------------------------------------------------


def test_refusals_are_one_line_and_leave_no_output(tmp_path):
    write_mrc(tmp_path / "map.mrc", blob((12, 12, 12), 1), voxel_size=1.0)
    write_mrc(tmp_path / "stack.mrcs", blob((3, 12, 12), 2), stack=True, voxel_size=1.0)
    write_mrc(tmp_path / "img.mrc", blob((1, 12, 12), 2), voxel_size=1.0)
    write_mrc(tmp_path / "unknown.mrc", blob((12, 12, 12), 1))
    out = tmp_path / "out.mrc"
    map_ = tmp_path / "map.mrc"
    cases = [
        ((map_, "--threshold", "50"), ("--threshold", "no value of", "map.mrc", "empty")),
        ((map_, "--threshold", "0", "--extend", "-20"), ("--extend", "leaves nothing")),
        ((map_, "--threshold", "0", "--soft-edge", "-3"), ("--soft-edge", "-3")),
        ((tmp_path / "stack.mrcs", "--threshold", "0"), ("stack.mrcs", "stack of 3 images", "one volume")),
        ((map_,), ("--threshold", "give one of threshold")),
        ((map_, "--threshold", "0", "--sphere", "4"), ("threshold and sphere",)),
        ((map_, "--sphere", "4", "--height", "3"), ("--height", "cylinder")),
        ((map_, "--sphere", "4", "--lowpass", "8"), ("--lowpass", "not to a sphere")),
        ((tmp_path / "img.mrc", "--cylinder", "4"), ("img.mrc", "is an image", "sphere")),
        ((tmp_path / "unknown.mrc", "--threshold", "0", "--lowpass", "8"), ("unknown.mrc", "pixel size is unknown",
                                                                            "--angpix")),
        ((map_, "--threshold", "0", "--lowpass", "1.5"), ("--lowpass", "finer than Nyquist")),
    ]
    for args, fragments in cases:
        assert_user_error(noa("mask", args[0], out, *args[1:]), *fragments)
        assert not out.exists()
    given_pixel = noa("mask", tmp_path / "unknown.mrc", out, "--threshold", "0", "--lowpass", "8", "--angpix", "2")
    assert given_pixel.returncode == 0, given_pixel.stderr

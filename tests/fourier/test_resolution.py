"""noa fsc: the Fourier shell (ring) correlation of two half maps, its thresholds, tables and plot.

Oracles: RELION's getFSC and image_handler --fsc loop transcribed from its source (src/fftw.cpp,
src/apps/image_handler.cpp; always run), relion_image_handler --fsc itself (skipped where RELION is absent),
NumPy written out here (the linear rule, the crossing), the analytic SNR / (1 + SNR) of two noisy copies,
starfile, the csv and xml readers, Pillow.
"""

from __future__ import annotations

import csv
import io as text_io
import json
import math
import xml.etree.ElementTree as ElementTree

import mrcfile
import numpy as np
import pytest
import starfile
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import EXAMPLE_MAP, assert_problem, assert_user_error, noa, relion, relion_transform_elements, write_mrc
from noa_core import operations
from noa_core.errors import NoaError, ParameterError, ShapeError, ValueRangeError
from noa_core.fourier import resolution

# RELION prints 6 decimals (%12.6f): half a unit of the last.
PRINTED = 5e-7


def relion_get_fsc(one: np.ndarray, two: np.ndarray) -> np.ndarray:
    """src/fftw.cpp getFSC transcribed: FOR_ALL_ELEMENTS_IN_FFTW_TRANSFORM's logical indices (kp = k if
    k < XSIZE(FT) else k - ZSIZE, likewise ip), idx = ROUND(sqrt(kp^2 + ip^2 + jp^2)), samples with
    idx >= XSIZE(FT) skipped, num += Re(conj(z1) z2), den += |z|^2; fsc = num / sqrt(den1 den2)."""
    a, b = (x if x.ndim == 3 else x[None] for x in (one, two))
    f1, f2 = np.fft.rfftn(a.astype(np.float64)), np.fft.rfftn(b.astype(np.float64))
    zdim, ydim, half = f1.shape
    num, den1, den2 = np.zeros(half), np.zeros(half), np.zeros(half)
    for k, i, j, idx in relion_transform_elements(zdim, ydim, half):
        if idx >= half:
            continue
        z1, z2 = f1[k, i, j], f2[k, i, j]
        num[idx] += (np.conj(z1) * z2).real
        den1[idx] += abs(z1) ** 2
        den2[idx] += abs(z2) ** 2
    return num / np.sqrt(den1 * den2)


def linear_fsc(one: np.ndarray, two: np.ndarray) -> np.ndarray:
    """noa C++'s isotropic FSC written out with the full (not half) transform: each frequency's share of a
    shell is the tent max(0, 1 - |r - s|), r = |f| x min(shape) within Nyquist; over the full transform
    every non-redundant sample appears with its Hermitian twin, so the half transform's sums are these
    over the samples of the x >= 0 half: kept by the mask below."""
    f1, f2 = np.fft.fftn(one.astype(np.float64)), np.fft.fftn(two.astype(np.float64))
    grids = np.meshgrid(*[np.fft.fftfreq(n) for n in one.shape], indexing="ij")
    frequency = np.sqrt(sum(g ** 2 for g in grids))
    half = np.fft.fftfreq(one.shape[-1]) >= 0
    if one.shape[-1] % 2 == 0:  # the Nyquist column of an even width is stored once, as +1/2
        half = half | np.isclose(grids[-1], -0.5)
    keep = np.broadcast_to(half, one.shape) & (frequency <= 0.5 + 1e-9)  # on Nyquist despite rounding
    m = min(one.shape)
    radius = frequency[keep] * m
    shells = np.arange(m // 2 + 1)
    weight = np.maximum(0.0, 1.0 - np.abs(radius[None] - shells[:, None]))
    weight[-1] += np.where(radius > m // 2, 1.0 - weight[-1], 0.0) * (radius <= m / 2 + 1e-9)  # clamped
    num = weight @ (f1[keep] * np.conj(f2[keep])).real
    return num / np.sqrt((weight @ np.abs(f1[keep]) ** 2) * (weight @ np.abs(f2[keep]) ** 2))


def noisy_pair(shape, seed: int, snr: float = 1.0):
    """A smooth-free signal (white noise of variance snr) plus independent unit noise in each copy."""
    rng = np.random.default_rng(seed)
    signal = rng.normal(0.0, math.sqrt(snr), size=shape)
    return signal + rng.normal(size=shape), signal + rng.normal(size=shape)


def relion_table(stdout: str, tmp_path):
    path = tmp_path / "relion.star"
    path.write_text(stdout)
    return starfile.read(path)


# -- the library -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(16, 16, 16), (15, 15, 15), (12, 12), (13, 13), (8, 12, 10), (12, 8, 10), (9, 14)])
def test_relion_rule_is_relions_get_fsc(shape):
    one, two = noisy_pair(shape, sum(shape))
    np.testing.assert_allclose(resolution.fsc(one, two).values, relion_get_fsc(one, two), rtol=0, atol=1e-12)


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(4, 14), min_size=2, max_size=3), st.integers(0, 2 ** 16))
def test_relion_rule_any_box(shape, seed):
    one, two = noisy_pair(tuple(shape), seed)
    got = resolution.fsc(one.astype(np.float32), two.astype(np.float32)).values
    assert got.shape == (shape[-1] // 2 + 1,)
    np.testing.assert_allclose(got, relion_get_fsc(one.astype(np.float32), two.astype(np.float32)), atol=2e-6)


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(4, 13), min_size=2, max_size=3), st.integers(0, 2 ** 16))
def test_linear_rule_against_the_full_transform(shape, seed):
    one, two = noisy_pair(tuple(shape), seed)
    got = resolution.fsc(one, two, shells="linear").values
    assert got.shape == (min(shape) // 2 + 1,)
    np.testing.assert_allclose(got, linear_fsc(one, two), atol=1e-10)


@pytest.mark.parametrize("rule", resolution.RULES)
@pytest.mark.parametrize("shape", [(16, 16, 16), (17, 17, 17), (32, 32)])
def test_identical_maps_correlate_fully(rule, shape):
    one = np.random.default_rng(3).normal(size=shape)
    values = resolution.fsc(one, one, shells=rule).values
    np.testing.assert_allclose(values, 1.0, atol=1e-12)
    np.testing.assert_allclose(resolution.fsc(one, -one, shells=rule).values, -1.0, atol=1e-12)


@pytest.mark.parametrize("snr", [0.25, 1.0, 4.0])
@pytest.mark.parametrize("rule", resolution.RULES)
def test_two_noisy_copies_give_snr_over_one_plus_snr(snr, rule):
    """FSC = SNR / (1 + SNR) in every shell for white signal and noise; each shell's estimate has a standard
    error of about (1 - rho^2) / sqrt(n) for n samples: all within 5 of those (shells of >= 100 samples)."""
    one, two = noisy_pair((40, 40, 40), 11, snr)
    expected = snr / (1 + snr)
    values = resolution.fsc(one, two, shells=rule).values
    index = np.arange(values.size)
    samples = 2 * math.pi * index ** 2  # a shell of the half transform: half a sphere's surface
    sure = samples >= 100
    assert sure.sum() >= 15
    error = (1 - expected ** 2) / np.sqrt(samples[sure])
    assert np.all(np.abs(values[sure] - expected) < 5 * error), values[sure] - expected


def test_mask_multiplies_both_halves():
    one, two = noisy_pair((16, 16, 16), 5)
    mask = np.random.default_rng(8).uniform(size=(16, 16, 16))
    np.testing.assert_allclose(resolution.fsc(one, two, mask=mask).values, relion_get_fsc(one * mask, two * mask),
                               atol=1e-12)


def test_crossing_relion_shell_and_interpolation():
    curve = resolution.Curve(np.array([1.0, 0.9, 0.6, 0.4, 0.1, 0.2, 0.05]), "relion", 12, 2.0)
    found = curve.crossing(0.5)
    assert (found.falls_below, found.shell) == (True, 2)
    assert found.interpolated == pytest.approx(2 + (0.6 - 0.5) / (0.6 - 0.4))
    assert curve.in_angstrom(found.interpolated) == pytest.approx(24.0 / 2.5)
    found = curve.crossing(0.143)
    assert (found.shell, found.interpolated) == (3, pytest.approx(3 + (0.4 - 0.143) / 0.3))
    assert curve.crossing(0.01) == resolution.Crossing(0.01, False, 6, None)
    assert curve.crossing(0.95) == resolution.Crossing(0.95, True, None, None)
    np.testing.assert_allclose(curve.angstrom, [999.0, 24.0, 12.0, 8.0, 6.0, 4.8, 4.0])


def test_refusals():
    with pytest.raises(ShapeError, match="differ in shape"):
        resolution.fsc(np.zeros((8, 8, 8)), np.zeros((8, 8, 10)))
    with pytest.raises(ShapeError, match="mask"):
        resolution.fsc(np.zeros((8, 8, 8)), np.zeros((8, 8, 8)), mask=np.zeros((8, 8)))
    with pytest.raises(ShapeError, match="stack"):
        resolution.fsc(np.zeros((2, 1, 8, 8)), np.zeros((2, 1, 8, 8)))
    with pytest.raises(ParameterError):
        resolution.fsc(np.zeros((8, 8)), np.zeros((8, 8)), shells="nearest")


@pytest.mark.parametrize("where", ["half1", "half2", "mask"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_maps_and_masks_are_refused_by_name(where, bad):
    """One such voxel made every shell NaN, which the crossing read as 'above up to the last shell'."""
    maps = dict(zip(("half1", "half2"), noisy_pair((8, 8, 8), 1), strict=True), mask=np.ones((8, 8, 8)))
    maps[where][2, 3, 4] = bad
    with pytest.raises(ValueRangeError, match=f"^{where}: .*NaN or infinite"):
        resolution.fsc(maps["half1"], maps["half2"], mask=maps["mask"])
    with pytest.raises(ValueRangeError, match=r"^m.mrc: "):
        resolution.fsc(maps["half1"], maps["half2"], mask=maps["mask"], names=("m.mrc",) * 3)


@pytest.mark.parametrize("value", [0.0, 3.5])
def test_constant_maps_have_an_undefined_fsc_and_no_resolution(value):
    """A constant map's transform is 0 beyond shell 0 (NumPy): 0 / 0 in every shell from 1, no crossing."""
    one = np.full((12, 12, 12), value)
    assert not np.fft.rfftn(one).reshape(-1)[1:].any()
    curve = resolution.fsc(one, np.random.default_rng(0).normal(size=one.shape), pixel_size=1.0)
    assert np.isnan(curve.values[1:]).all() and curve.undefined_from == 1
    for threshold in resolution.THRESHOLDS:
        assert curve.crossing(threshold) == resolution.Crossing(threshold, False, None, None, 1)


def test_the_crossing_is_looked_for_before_the_first_undefined_shell():
    values = np.array([1.0, 0.9, 0.6, np.nan, 0.1, 0.05])
    curve = resolution.Curve(values, "relion", 10, 1.0)
    assert curve.undefined_from == 3
    assert curve.crossing(0.5) == resolution.Crossing(0.5, False, 2, None, 3)  # never from the NaN or beyond it
    assert curve.crossing(0.7) == resolution.Crossing(0.7, True, 1, pytest.approx(1 + 0.2 / 0.3), 3)
    assert resolution.Curve(np.array([1.0, 0.9, 0.1]), "relion", 4, 1.0).undefined_from is None


def test_python_api_takes_noa_arrays():
    import noa_core as noa

    one, two = noisy_pair((1, 12, 12, 12), 2)
    curve = noa.fsc(noa.asarray(one.astype(np.float32)), noa.asarray(two.astype(np.float32)), pixel_size=1.5)
    np.testing.assert_allclose(curve.values, relion_get_fsc(one[0].astype(np.float32), two[0].astype(np.float32)),
                               atol=2e-6)
    assert curve.angstrom[1] == pytest.approx(18.0)


# -- the two compute paths ---------------------------------------------------------------------------------


def both_paths(one, two, rule):
    """shell_sums on the NumPy path and on the numba kernels' path (pinned)."""
    from noa_core.compute import compute_path

    with compute_path.using("numpy"):
        numpy = resolution.shell_sums(one, two, rule)
    with compute_path.using("numba"):
        kernels = resolution.shell_sums(one, two, rule)
    return numpy, kernels


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(2, 24), min_size=2, max_size=3), st.sampled_from(resolution.RULES),
       st.sampled_from([np.float32, np.float64]), st.integers(0, 2 ** 16))
def test_numpy_and_kernel_paths_give_the_same_bits(shape, rule, dtype, seed):
    one, two = (x.astype(dtype) for x in noisy_pair(tuple(shape), seed))
    numpy, kernels = both_paths(one, two, rule)
    for a, b in zip(numpy, kernels, strict=True):
        assert np.array_equal(a, b), np.abs(a - b).max()
    if rule == "relion":
        expected = relion_get_fsc(one, two)
        np.testing.assert_allclose(resolution.correlation(*numpy), expected,
                                   atol=2e-6 if dtype == np.float32 else 1e-12)


def relion_fsc_vectorised(one: np.ndarray, two: np.ndarray) -> np.ndarray:
    """relion_get_fsc's sums with np.meshgrid and np.bincount (for maps too large for its Python loop)."""
    f1, f2 = np.fft.rfftn(one), np.fft.rfftn(two)
    half = f1.shape[-1]
    axes = [np.where(np.arange(n) < half, np.arange(n), np.arange(n) - n) for n in one.shape[:-1]]
    grids = np.meshgrid(*axes, np.arange(half), indexing="ij")
    shell = np.floor(np.sqrt(sum(g.astype(np.float64) ** 2 for g in grids)) + 0.5).astype(int).reshape(-1)
    keep = shell < half
    sums = [np.bincount(shell[keep], w.reshape(-1)[keep], half) for w in
            ((f1 * np.conj(f2)).real, np.abs(f1) ** 2, np.abs(f2) ** 2)]
    return sums[0] / np.sqrt(sums[1] * sums[2])


@pytest.mark.parametrize("rule", resolution.RULES)
def test_paths_agree_on_maps_the_parallel_kernels_take(rule):
    """104^3 maps: 104 x 104 x 53 samples, past SERIAL_THRESHOLD (the kernels run on every thread)."""
    from noa_core.kernels import runtime

    one, two = noisy_pair((104, 104, 104), 21)
    assert runtime.SERIAL_THRESHOLD <= 104 * 104 * 53
    numpy, kernels = both_paths(one, two, rule)
    for a, b in zip(numpy, kernels, strict=True):
        assert np.array_equal(a, b)
    if rule == "relion":
        np.testing.assert_allclose(resolution.correlation(*kernels), relion_fsc_vectorised(one, two), atol=1e-12)


@pytest.mark.parametrize(("environment", "loaded"), [("auto", False), ("numba", True)])
def test_small_maps_do_not_load_numba(environment, loaded):
    """A small FSC sums with NumPy in a process without numba (its start costs more than the sums);
    NOA_COMPUTE=numba runs the kernels."""
    import os
    import subprocess
    import sys

    code = ("import sys, numpy as np; from noa_core.fourier import resolution; rng = np.random.default_rng(0); "
            "a = rng.normal(size=(16, 16, 16)).astype(np.float32); resolution.fsc(a, a + 1); "
            "print('numba' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "NOA_COMPUTE": environment})
    assert done.stdout.strip() == str(loaded)


# -- tables ----------------------------------------------------------------------------------------------


def test_tables_read_back(tmp_path):
    one, two = noisy_pair((16, 16, 16), 4)
    curve = resolution.fsc(one, two, pixel_size=1.25)
    (tmp_path / "t.star").write_text(resolution.table_text(curve, "star"))
    star = starfile.read(tmp_path / "t.star")
    assert list(star.columns) == list(resolution.STAR_COLUMNS)
    np.testing.assert_allclose(star["rlnFourierShellCorrelation"], curve.values, atol=PRINTED)
    np.testing.assert_allclose(star["rlnAngstromResolution"][1:], 20.0 / np.arange(1, 9), atol=PRINTED)
    rows = list(csv.DictReader(text_io.StringIO(resolution.table_text(curve, "csv"))))
    np.testing.assert_allclose([float(r["fsc"]) for r in rows], curve.values, rtol=1e-8)
    root = ElementTree.fromstring(resolution.table_text(curve, "xml", "FSC of a & b").encode())
    assert root.tag == "fsc" and root.attrib == {"title": "FSC of a & b", "xaxis": "Resolution (A-1)",
                                                  "yaxis": "Correlation Coefficient"}
    points = [(float(c.find("x").text), float(c.find("y").text)) for c in root.findall("coordinate")]
    np.testing.assert_allclose([p[0] for p in points], np.arange(9) / 20.0, atol=5e-7)
    np.testing.assert_allclose([p[1] for p in points], curve.values, atol=5e-7)
    unknown = resolution.Curve(curve.values, "relion", 16, None)
    assert "rlnResolution" not in resolution.table_text(unknown, "star")
    with pytest.raises(ParameterError, match="pixel size"):
        resolution.table_text(unknown, "xml")


# -- RELION itself ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [24, 25])
def test_cli_star_is_relions_on_random_maps(tmp_path, size):
    one, two = noisy_pair((size, size, size), size, snr=0.5)
    write_mrc(tmp_path / "h1.mrc", one.astype(np.float32), voxel_size=1.1)
    write_mrc(tmp_path / "h2.mrc", two.astype(np.float32), voxel_size=1.1)
    expected = relion("relion_image_handler", "--i", tmp_path / "h1.mrc", "--fsc", tmp_path / "h2.mrc").stdout
    result = noa("fsc", tmp_path / "h1.mrc", tmp_path / "h2.mrc", "-o", tmp_path / "noa.star")
    assert result.returncode == 0, result.stderr
    theirs, ours = relion_table(expected, tmp_path), starfile.read(tmp_path / "noa.star")
    np.testing.assert_allclose(ours["rlnFourierShellCorrelation"], theirs["rlnFourierShellCorrelation"], atol=1e-4)
    for column in resolution.STAR_COLUMNS[:3]:
        np.testing.assert_allclose(ours[column], theirs[column], rtol=1e-6)
    differ = sum(a != b for a, b in zip((tmp_path / "noa.star").read_text().splitlines(), expected.splitlines()))
    assert differ <= 2  # the same text, but for a last printed digit where float32 and double round apart


def test_cli_star_is_relions_on_the_example_map_with_noise(tmp_path):
    with mrcfile.open(EXAMPLE_MAP, permissive=True) as f:
        data, voxel = np.array(f.data, dtype=np.float32), float(f.voxel_size.x)
    start = [(n - 48) // 2 for n in data.shape]
    crop = data[start[0]:start[0] + 48, start[1]:start[1] + 48, start[2]:start[2] + 48]
    rng = np.random.default_rng(7)
    noise = crop.std()
    for name in ("h1.mrc", "h2.mrc"):
        write_mrc(tmp_path / name, (crop + rng.normal(0, noise, crop.shape)).astype(np.float32), voxel_size=voxel)
    expected = relion("relion_image_handler", "--i", tmp_path / "h1.mrc", "--fsc", tmp_path / "h2.mrc").stdout
    result = noa("fsc", tmp_path / "h1.mrc", tmp_path / "h2.mrc", "-o", tmp_path / "noa.star")
    assert result.returncode == 0, result.stderr
    theirs, ours = relion_table(expected, tmp_path), starfile.read(tmp_path / "noa.star")
    np.testing.assert_allclose(ours["rlnFourierShellCorrelation"], theirs["rlnFourierShellCorrelation"], atol=1e-4)
    np.testing.assert_allclose(ours["rlnAngstromResolution"], theirs["rlnAngstromResolution"], rtol=1e-6)


def test_frc_of_images_is_relions(tmp_path):
    one, two = noisy_pair((32, 32), 9)
    write_mrc(tmp_path / "a.mrc", one.astype(np.float32), voxel_size=2.0)
    write_mrc(tmp_path / "b.mrc", two.astype(np.float32), voxel_size=2.0)
    result = operations.get("fsc").describe([tmp_path / "a.mrc", tmp_path / "b.mrc"])
    assert result["correlation"] == "FRC"
    np.testing.assert_allclose(result["curve"]["fsc"], relion_get_fsc(one.astype(np.float32), two.astype(np.float32)),
                               atol=2e-6)
    expected = relion("relion_image_handler", "--i", tmp_path / "a.mrc", "--fsc", tmp_path / "b.mrc").stdout
    np.testing.assert_allclose(result["curve"]["fsc"], relion_table(expected, tmp_path)["rlnFourierShellCorrelation"],
                               atol=1e-4)


# -- the operation: Python, CLI, HTTP ----------------------------------------------------------------------


def test_describe_result_and_thresholds(tmp_path):
    one, two = noisy_pair((20, 20, 20), 1)
    write_mrc(tmp_path / "a.mrc", one.astype(np.float32), voxel_size=1.5)
    write_mrc(tmp_path / "b.mrc", two.astype(np.float32), voxel_size=1.5)
    mask = np.ones((20, 20, 20), np.float32)
    mask[:, :, :3] = 0.25
    write_mrc(tmp_path / "m.mrc", mask)
    result = operations.get("fsc").describe([tmp_path / "a.mrc", tmp_path / "b.mrc", tmp_path / "m.mrc"],
                                            shells="linear")
    expected = linear_fsc(one.astype(np.float32) * mask, two.astype(np.float32) * mask)
    np.testing.assert_allclose(result["curve"]["fsc"], expected, atol=2e-6)
    assert result["pixel_size"] == pytest.approx(1.5) and result["mask"].endswith("m.mrc")
    for row in result["thresholds"]:  # the crossing written out here
        t = row["threshold"]
        first = next((s for s in range(1, len(expected)) if expected[s] < t), None)
        if first is None:
            assert not row["falls_below"] and row["shell"] == len(expected) - 1
            continue
        assert row["shell"] == first - 1
        s = first - 1
        assert row["interpolated_shell"] == pytest.approx(s + (expected[s] - t) / (expected[s] - expected[first]),
                                                          abs=1e-4)
        assert row["interpolated_angstrom"] == pytest.approx(30.0 / row["interpolated_shell"], rel=1e-6)


def test_cli_prints_the_resolution_and_writes_files(tmp_path):
    rng = np.random.default_rng(2)
    from scipy import ndimage

    signal = ndimage.gaussian_filter(rng.normal(size=(32, 32, 32)), 2.0) * 10
    write_mrc(tmp_path / "a.mrc", (signal + rng.normal(size=signal.shape)).astype(np.float32), voxel_size=1.2)
    write_mrc(tmp_path / "b.mrc", (signal + rng.normal(size=signal.shape)).astype(np.float32), voxel_size=1.2)
    bare = noa("fsc", tmp_path / "a.mrc", tmp_path / "b.mrc")
    assert bare.returncode == 0, bare.stderr
    curve = resolution.fsc(mrcfile.read(tmp_path / "a.mrc"), mrcfile.read(tmp_path / "b.mrc"), pixel_size=1.2)
    at = curve.in_angstrom(curve.crossing(0.143).interpolated)
    assert f"FSC = 0.143 at {at:.3f} Å" in bare.stdout and "FSC = 0.5 at" in bare.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.mrc", "b.mrc"]

    made = noa("fsc", tmp_path / "a.mrc", tmp_path / "b.mrc", "-o", tmp_path / "fsc.csv", "--plot",
               tmp_path / "fsc.png", "--json")
    assert made.returncode == 0, made.stderr
    result = json.loads(made.stdout)
    assert result["outputs"] == [str(tmp_path / "fsc.csv"), str(tmp_path / "fsc.png")]
    rows = list(csv.DictReader(text_io.StringIO((tmp_path / "fsc.csv").read_text())))
    np.testing.assert_allclose([float(r["fsc"]) for r in rows], curve.values, atol=1e-6)
    from PIL import Image

    with Image.open(tmp_path / "fsc.png") as image:
        pixels = np.asarray(image.convert("RGB"))
    assert pixels.shape[1] >= 600
    from noa_core.pictures import plots

    colours = {tuple(c) for c in pixels.reshape(-1, 3)[::7]}
    assert plots.CURVE_COLOUR in colours and plots.LINE_COLOURS[0.143] in colours
    again = noa("fsc", tmp_path / "a.mrc", tmp_path / "b.mrc", "-o", tmp_path / "fsc.csv")
    assert_user_error(again, "fsc.csv", "exists")


def test_cli_refusals_leave_nothing(tmp_path):
    write_mrc(tmp_path / "a.mrc", np.zeros((16, 16, 16), np.float32), voxel_size=1.0)
    write_mrc(tmp_path / "b.mrc", np.zeros((16, 16, 18), np.float32), voxel_size=1.0)
    write_mrc(tmp_path / "c.mrc", np.zeros((16, 16, 16), np.float32), voxel_size=2.0)
    write_mrc(tmp_path / "s.mrcs", np.zeros((3, 16, 16), np.float32), stack=True, voxel_size=1.0)
    before = sorted(tmp_path.iterdir())
    out = tmp_path / "fsc.star"
    assert_user_error(noa("fsc", tmp_path / "a.mrc", tmp_path / "b.mrc", "-o", out), "a.mrc", "b.mrc", "same shape")
    assert_user_error(noa("fsc", tmp_path / "a.mrc", tmp_path / "c.mrc", "-o", out), "a.mrc", "c.mrc", "pixel size")
    assert_user_error(noa("fsc", tmp_path / "s.mrcs", tmp_path / "s.mrcs", "-o", out), "s.mrcs", "stack")
    assert_user_error(noa("fsc", tmp_path / "a.mrc", tmp_path / "a.mrc", "--mask", tmp_path / "b.mrc", "-o", out),
                      "--mask", "b.mrc")
    assert_user_error(noa("fsc", tmp_path / "a.mrc", tmp_path / "a.mrc", "-o", tmp_path / "fsc.txt"), "--output")
    assert_user_error(noa("fsc", tmp_path / "a.mrc", tmp_path / "a.mrc", "--plot", tmp_path / "fsc.jpg"), "--plot")
    assert sorted(tmp_path.iterdir()) == before


def test_cli_refuses_non_finite_files_by_name_and_writes_nothing(tmp_path):
    one, two = noisy_pair((16, 16, 16), 3)
    bad = one.astype(np.float32)
    bad[4, 5, 6] = np.nan
    mask = np.ones((16, 16, 16), np.float32)
    mask[0, 0, 0] = np.inf
    for name, data in (("a.mrc", one), ("b.mrc", two), ("nan.mrc", bad), ("mask.mrc", mask)):
        write_mrc(tmp_path / name, data.astype(np.float32), voxel_size=1.0)
    before = sorted(tmp_path.iterdir())
    out = ("-o", tmp_path / "fsc.star", "--plot", tmp_path / "fsc.png")
    assert_user_error(noa("fsc", tmp_path / "a.mrc", tmp_path / "nan.mrc", *out), "nan.mrc", "NaN or infinite")
    assert_user_error(noa("fsc", tmp_path / "nan.mrc", tmp_path / "b.mrc", *out), "nan.mrc", "NaN or infinite")
    assert_user_error(noa("fsc", tmp_path / "a.mrc", tmp_path / "b.mrc", "--mask", tmp_path / "mask.mrc", *out),
                      "mask.mrc", "NaN or infinite")
    assert sorted(tmp_path.iterdir()) == before


def test_cli_constant_maps_report_no_resolution(tmp_path):
    """Two empty (or constant) maps: the FSC is undefined beyond shell 0; it printed 'not reached; above it up to
    the last shell 8 (2.000 Å)', the JSON resolution_angstrom 2.0. Exit 0: the files are valid maps."""
    write_mrc(tmp_path / "z.mrc", np.zeros((16, 16, 16), np.float32), voxel_size=1.0)
    write_mrc(tmp_path / "c.mrc", np.full((16, 16, 16), 2.0, np.float32), voxel_size=1.0)
    for pair in (("z.mrc", "z.mrc"), ("c.mrc", "c.mrc"), ("z.mrc", "c.mrc")):
        text = noa("fsc", *(tmp_path / name for name in pair))
        assert text.returncode == 0, text.stderr
        assert "Å" not in "".join(text.stdout.splitlines()[1:]) and "not reached" not in text.stdout
        assert text.stdout.count("no resolution: the FSC is undefined from shell 1 on") == 2
        result = json.loads(noa("fsc", *(tmp_path / name for name in pair), "--json").stdout)
        for row in result["thresholds"]:
            assert row["shell"] is row["resolution_angstrom"] is row["interpolated_angstrom"] is None
            assert not row["falls_below"] and "undefined" in row["reason"]


def test_cli_star_of_constant_maps_is_relions_text(tmp_path):
    write_mrc(tmp_path / "z.mrc", np.zeros((16, 16, 16), np.float32), voxel_size=1.0)
    write_mrc(tmp_path / "c.mrc", np.full((16, 16, 16), 2.0, np.float32), voxel_size=1.0)
    for name in ("z.mrc", "c.mrc"):
        expected = relion("relion_image_handler", "--i", tmp_path / name, "--fsc", tmp_path / name).stdout
        assert noa("fsc", tmp_path / name, tmp_path / name, "-o", tmp_path / "t.star", "-f").returncode == 0
        assert (tmp_path / "t.star").read_text() == expected[expected.index("\n# version"):]


def test_cli_prints_resolutions_to_sensible_precision(tmp_path):
    one, two = noisy_pair((16, 16, 16), 8, snr=100.0)
    write_mrc(tmp_path / "a.mrc", one.astype(np.float32))
    write_mrc(tmp_path / "b.mrc", two.astype(np.float32))
    result = noa("fsc", tmp_path / "a.mrc", tmp_path / "b.mrc", "--angpix", "1e8")
    assert result.returncode == 0, result.stderr
    assert "above it up to the last shell 8 (2e+08 Å)" in result.stdout, result.stdout  # was 200000000.000 Å
    assert "1e+08 Å/px" in result.stdout


def test_unknown_pixel_size_gives_shells_and_a_notice(tmp_path):
    one, two = noisy_pair((16, 16, 16), 6)
    write_mrc(tmp_path / "a.mrc", one.astype(np.float32))
    write_mrc(tmp_path / "b.mrc", two.astype(np.float32))
    result = noa("fsc", tmp_path / "a.mrc", tmp_path / "b.mrc", "-o", tmp_path / "t.star")
    assert result.returncode == 0, result.stderr
    assert "pixel size is unknown" in result.stdout and "Å" not in result.stdout.splitlines()[1]
    assert list(starfile.read(tmp_path / "t.star").columns) == ["rlnSpectralIndex", "rlnFourierShellCorrelation"]
    assert_user_error(noa("fsc", tmp_path / "a.mrc", tmp_path / "b.mrc", "-o", tmp_path / "t.xml"), "pixel size")
    assert not (tmp_path / "t.xml").exists()
    given = operations.get("fsc").describe([tmp_path / "a.mrc", tmp_path / "b.mrc"], angpix=2.0)
    assert given["curve"]["resolution_angstrom"][2] == pytest.approx(16.0)


def test_http_upload_and_paths(tmp_path, make_client):
    one, two = noisy_pair((16, 16, 16), 12)
    root = tmp_path / "root"
    root.mkdir()
    write_mrc(root / "a.mrc", one.astype(np.float32), voxel_size=1.0)
    write_mrc(root / "b.mrc", two.astype(np.float32), voxel_size=1.0)
    write_mrc(root / "c.mrc", np.zeros((16, 16, 12), np.float32), voxel_size=1.0)
    client = make_client(data_root=root)
    expected = relion_get_fsc(one.astype(np.float32), two.astype(np.float32))
    files = [("files", (name, (root / name).read_bytes())) for name in ("a.mrc", "b.mrc")]
    response = client.post("/v1/upload/fsc", data={"shells": "relion"}, files=files)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["path"] == "a.mrc" and body["half2"] == "b.mrc"
    np.testing.assert_allclose(body["curve"]["fsc"], expected, atol=2e-6)
    assert [row["threshold"] for row in body["thresholds"]] == [0.143, 0.5]
    on_paths = client.post("/v1/paths/fsc", json={"srcs": ["a.mrc", "b.mrc"]})
    assert on_paths.status_code == 200, on_paths.text
    np.testing.assert_allclose(on_paths.json()["curve"]["fsc"], expected, atol=2e-6)
    problem = assert_problem(client.post("/v1/paths/fsc", json={"srcs": ["a.mrc", "c.mrc"]}), 422)
    assert "a.mrc" in problem["detail"] and "c.mrc" in problem["detail"] and str(root) not in problem["detail"]
    files = [("files", (name, (root / name).read_bytes())) for name in ("a.mrc", "c.mrc")]
    assert_problem(client.post("/v1/upload/fsc", files=files), 422)
    assert sorted(p.name for p in root.glob("*.*") if not p.name.startswith(".")) == ["a.mrc", "b.mrc", "c.mrc"]


def test_http_refuses_non_finite_maps_and_reports_constant_ones(tmp_path, make_client):
    root = tmp_path / "root"
    root.mkdir()
    bad = np.zeros((16, 16, 16), np.float32)
    bad[1, 2, 3] = np.inf
    write_mrc(root / "bad.mrc", bad, voxel_size=1.0)
    write_mrc(root / "zero.mrc", np.zeros((16, 16, 16), np.float32), voxel_size=1.0)
    client = make_client(data_root=root)
    problem = assert_problem(client.post("/v1/paths/fsc", json={"srcs": ["zero.mrc", "bad.mrc"]}), 422)
    assert "bad.mrc" in problem["detail"] and "NaN or infinite" in problem["detail"]
    constant = client.post("/v1/paths/fsc", json={"srcs": ["zero.mrc", "zero.mrc"]})
    assert constant.status_code == 200, constant.text
    assert [row["resolution_angstrom"] for row in constant.json()["thresholds"]] == [None, None]
    assert all("undefined" in row["reason"] for row in constant.json()["thresholds"])


def test_operation_kind():
    operation = operations.get("fsc")
    assert isinstance(operation, operations.Reports) and operation.max_inputs == 3
    assert {p.name for p in operation.params_for("http")} >= {"shells", "angpix"}
    assert not {"output", "plot", "mask", "force"} & {p.name for p in operation.params_for("http")}
    with pytest.raises(NoaError):
        operation.describe([EXAMPLE_MAP])

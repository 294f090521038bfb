"""RELION's geometry conventions in noa: Euler angles (noa transform --euler against relion_project --3d_rot and
RELION's Euler_angles2matrix transcribed), the plain flip (relion_image_handler --flipX/Y/Z) and the hand
inversion about the centre (--invert_hand), through Python, the CLI and HTTP.

The RELION programs run where RELION 3.1.3 is installed (the tests skip with the reason otherwise); the
transcribed formula and the index arithmetic run always.
"""

from __future__ import annotations

import mrcfile
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import noa_core as noa
from helpers import assert_user_error, euler_matrix, load, relion, write_mrc
from helpers import noa as run_noa
from noa_core import operations
from noa_core.errors import ParameterError, ShapeError
from noa_core.geometry import transforms
from noa_core.images import boxes
from noa_core.run import local

N = 32  # RELION's projector wants a cube; its centre, as noa's, is N // 2


def blobs(n: int = N) -> np.ndarray:
    """Three Gaussian blobs of different heights off the centre, not in one plane with it: a map with a hand."""
    z, y, x = np.mgrid[:n, :n, :n].astype(np.float64) - n // 2
    volume = np.zeros((n, n, n))
    for (bz, by, bx), height in (((1, 3, 8), 1.0), ((6, 0, 0), 0.6), ((-2, -7, 2), 0.3)):
        volume += height * np.exp(-((x - bx) ** 2 + (y - by) ** 2 + (z - bz) ** 2) / (2 * 2.0 ** 2))
    return volume.astype(np.float32)


def correlation(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a.ravel(), b.ravel())[0, 1])


def peak(a: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(np.argmax(a), a.shape))


# -- Euler angles ------------------------------------------------------------------------------------------------


def relion_euler_angles2matrix(rot: float, tilt: float, psi: float) -> np.ndarray:
    """RELION 3.1.3's Euler_angles2matrix (src/euler.cpp) of angles in degrees: A acting on (x, y, z)."""
    return euler_matrix(*np.radians([rot, tilt, psi]))


@settings(max_examples=50, deadline=None)
@given(angles=st.tuples(*[st.floats(-360, 360, allow_nan=False)] * 3))
def test_euler_zyz_is_relions_matrix_in_zyx_order(angles):
    a = relion_euler_angles2matrix(*angles)
    np.testing.assert_allclose(transforms.euler_zyz(*angles), a[::-1, ::-1], rtol=0, atol=1e-15)
    m = transforms.affine_3d((1, 8, 9, 10), euler=angles)  # the inverse: output r samples A^T r (about n // 2)
    np.testing.assert_allclose(m[:3, :3], a.T[::-1, ::-1], atol=1e-12)
    np.testing.assert_allclose(m[:3, 3], [4, 4, 5] - m[:3, :3] @ [4, 4, 5], atol=1e-12)


def test_relions_own_matrix_rotates_the_map_as_noa_does():
    """The direction, without RELION installed: A (RELION's formula) applied to the map (out(A r) = in(r), r in
    x, y, z from the voxel N // 2) by scipy is what noa's --euler writes."""
    from scipy import ndimage

    volume = blobs().astype(np.float64)
    a = relion_euler_angles2matrix(20, 50, -70)
    inverse = a.T[::-1, ::-1]  # out at (z, y, x) samples A^T r
    centre = np.full(3, N // 2, float)
    expected = ndimage.affine_transform(volume, inverse, offset=centre - inverse @ centre, order=1,
                                        mode="grid-constant")
    out = noa.zeros((1, N, N, N), "float64")
    transforms.transform_3d(volume[None], out, transforms.affine_3d(volume.shape, euler=(20, 50, -70)))
    np.testing.assert_allclose(out.numpy()[0], expected, atol=1e-9)
    # the blob at +8 in x goes where A sends it
    x, y, z = a @ [8, 3, 1]
    assert peak(out.numpy()[0]) == tuple(int(round(v)) + N // 2 for v in (z, y, x))  # noqa: RUF046 (NumPy floats)


@pytest.mark.parametrize("angles", [(30, 0, 0), (0, 90, 0), (0, 0, -45), (20, 50, -70), (-120, 135, 60)])
def test_euler_is_relion_project_3d_rot(tmp_path, angles):
    write_mrc(tmp_path / "map.mrc", blobs(), voxel_size=1.0)
    rot, tilt, psi = angles
    relion("relion_project", "--i", "map.mrc", "--o", "relion.mrc", "--3d_rot", "--rot", rot, "--tilt", tilt,
           "--psi", psi, cwd=tmp_path)
    expected = load(tmp_path / "relion.mrc")
    result = run_noa("transform", tmp_path / "map.mrc", tmp_path / "noa.mrc", "--euler", f"{rot},{tilt},{psi}",
                     "--interp", "cubic")
    assert result.returncode == 0, result.stderr
    got = load(tmp_path / "noa.mrc")
    # RELION rotates by trilinear interpolation in Fourier space (padded twice), noa in real space: close, not equal
    assert correlation(got, expected) > 0.999
    assert np.abs(got - expected).max() < 0.08 * expected.max()
    assert peak(got) == peak(expected)
    # the old noa meaning (every angle negated) is the other rotation: the comparison can fail
    old = noa.zeros((1, N, N, N), "float32")
    transforms.transform_3d(blobs()[None], old, transforms.affine_3d(old.shape, euler=(-rot, -tilt, -psi)))
    assert correlation(old.numpy()[0], expected) < 0.7


def test_euler_with_relions_offsets_and_its_projection(tmp_path):
    """relion_project's --xoff/--yoff/--zoff move the content by minus the offset (noa's --shift -Z,-Y,-X); its
    projection for the same angles is noa's rotated map summed along z."""
    write_mrc(tmp_path / "map.mrc", blobs(), voxel_size=1.0)
    angles = ("--rot", 20, "--tilt", 50, "--psi", -70)
    relion("relion_project", "--i", "map.mrc", "--o", "moved.mrc", "--3d_rot", *angles, "--xoff", 3, "--yoff", -2,
           "--zoff", 1, cwd=tmp_path)
    relion("relion_project", "--i", "map.mrc", "--o", "projection.mrc", *angles, cwd=tmp_path)
    assert run_noa("transform", tmp_path / "map.mrc", tmp_path / "noa.mrc", "--euler", "20,50,-70", "--shift",
                   "-1,2,-3", "--interp", "cubic").returncode == 0
    got, expected = load(tmp_path / "noa.mrc"), load(tmp_path / "moved.mrc")
    assert correlation(got, expected) > 0.999 and peak(got) == peak(expected)
    projection = load(tmp_path / "projection.mrc")
    assert projection.shape == (N, N)
    turned = noa.zeros((1, N, N, N), "float32")
    transforms.transform_3d(blobs()[None], turned, transforms.affine_3d(turned.shape, euler=(20, 50, -70)), "cubic")
    assert correlation(turned.numpy()[0].sum(axis=0), projection) > 0.999


def beyond_the_sphere(n: int) -> np.ndarray:
    """blobs() with two more near opposite corners, outside the box's inscribed sphere: turned, they leave it."""
    z, y, x = np.mgrid[:n, :n, :n].astype(np.float64) - n // 2
    volume = blobs(n).astype(np.float64)
    corners = (((3 - n // 2, n // 2 - 4, n // 2 - 3), 0.8), ((n // 2 - 3, 3 - n // 2, 4 - n // 2), 0.5))
    for (bz, by, bx), height in corners:
        volume += height * np.exp(-((x - bx) ** 2 + (y - by) ** 2 + (z - bz) ** 2) / (2 * 2.0 ** 2))
    return volume.astype(np.float32)


@pytest.mark.parametrize("n", [32, 33], ids=["even", "odd"])
@pytest.mark.parametrize("angles, offsets", [((20, 50, -70), (0, 0, 0)), ((45, 45, 45), (3, -2, 1.5)),
                                             ((0, 90, 0), (0, 0, 0))])
def test_like_relion_is_relion_project_3d_rot_beyond_the_sphere_and_on_odd_boxes(tmp_path, n, angles, offsets):
    """RELION turns the map in Fourier space: content turned out of the box comes back at the opposite face, an odd
    box comes out one voxel further, the corners of the transform are dropped. noa's real-space rotation does none
    of that (r 0.65 to 0.98 here); --like relion does all of it, to float32 rounding."""
    write_mrc(tmp_path / "map.mrc", beyond_the_sphere(n), voxel_size=1.0)
    (rot, tilt, psi), (xoff, yoff, zoff) = angles, offsets
    relion("relion_project", "--i", "map.mrc", "--o", "relion.mrc", "--3d_rot", "--rot", rot, "--tilt", tilt,
           "--psi", psi, "--xoff", xoff, "--yoff", yoff, "--zoff", zoff, cwd=tmp_path)
    expected = load(tmp_path / "relion.mrc")
    options = ("--euler", f"{rot},{tilt},{psi}", "--shift", f"{-zoff},{-yoff},{-xoff}")
    result = run_noa("transform", tmp_path / "map.mrc", tmp_path / "noa.mrc", *options, "--like", "relion")
    assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(load(tmp_path / "noa.mrc"), expected, atol=1e-6 * np.abs(expected).max())
    plain = run_noa("transform", tmp_path / "map.mrc", tmp_path / "plain.mrc", *options, "--interp", "cubic")
    assert plain.returncode == 0, plain.stderr
    assert correlation(load(tmp_path / "plain.mrc"), expected) < 0.99


@pytest.mark.parametrize("n", [16, 17], ids=["even", "odd"])
def test_like_relion_at_rest_is_its_band_limited_gridding_corrected_map(n):
    """Without RELION: at Euler angles 0 the Fourier interpolation lands on grid points, so relion_project writes
    the map divided by its gridding correction sinc²(r / 2N), its transform cut to the Nyquist sphere |k| <= N // 2,
    rolled by one voxel on every axis of an odd box; integer offsets roll it on (NumPy's FFT, written here)."""
    volume = np.random.default_rng(n).normal(size=(n, n, n))
    r = np.sqrt(sum(g ** 2 for g in np.mgrid[:n, :n, :n] - n // 2)) / (2 * n)
    corrected = volume / np.where(r > 0, np.sinc(r), 1.0) ** 2
    spectrum = np.fft.fftn(np.fft.ifftshift(corrected))
    k = np.fft.fftfreq(n, 1 / n)
    spectrum[np.sqrt(k[:, None, None] ** 2 + k[None, :, None] ** 2 + k[None, None, :] ** 2) > n // 2] = 0
    expected = np.roll(np.fft.fftshift(np.fft.ifftn(spectrum).real), n % 2, axis=(0, 1, 2))
    np.testing.assert_allclose(transforms.relion_rotated(volume), expected, atol=1e-12)
    np.testing.assert_allclose(transforms.relion_rotated(volume, shift=(2, -1, 5)),
                               np.roll(expected, (2, -1, 5), axis=(0, 1, 2)), atol=1e-12)


def test_like_relion_refusals(tmp_path):
    write_mrc(tmp_path / "cube.mrc", np.zeros((8, 8, 8), np.float32))
    write_mrc(tmp_path / "box.mrc", np.zeros((8, 8, 10), np.float32))
    write_mrc(tmp_path / "images.mrcs", np.zeros((2, 8, 8), np.float32), stack=True)
    out = tmp_path / "out.mrc"
    like = ("--like", "relion")
    assert_user_error(run_noa("transform", tmp_path / "box.mrc", out, "--euler", "1,2,3", *like), "--like", "box.mrc",
                      "cubes")
    assert_user_error(run_noa("transform", tmp_path / "images.mrcs", out, "--shift", "1,2", *like), "--like", "cubes")
    assert_user_error(run_noa("transform", tmp_path / "cube.mrc", out, "--euler", "1,2,3", "--scale", "2", *like),
                      "--like", "scale")
    assert_user_error(run_noa("transform", tmp_path / "cube.mrc", out, "--euler", "1,2,3", "--interp", "cubic",
                              *like), "--interp", "Fourier space")
    assert_user_error(run_noa("transform", tmp_path / "cube.mrc", out, "--euler", "1,2,3", "--border", "mirror",
                              *like), "--border")
    assert not out.exists()
    with pytest.raises(ShapeError, match="cubes"):
        transforms.relion_rotated(np.zeros((8, 8, 10)))


# -- flips -------------------------------------------------------------------------------------------------------


def flipped(tmp_path, name: str, axis: str, about: str = "box") -> np.ndarray:
    """noa flip of ``name`` as the CLI runs it, in this process (the plan, written tile by tile)."""
    plan = operations.get("flip").task(axis=axis, about=about).plan(tmp_path / name)
    local.write_plan(plan, tmp_path / f"noa_{axis}_{about}.mrc", overwrite=True)
    return load(tmp_path / f"noa_{axis}_{about}.mrc")


def mirrored(values: np.ndarray, axis: int, about: str) -> np.ndarray:
    """NumPy's reading of the two mirrors: index i takes N-1-i (box) or 2 (N // 2) - i modulo N (centre)."""
    n = values.shape[axis]
    last = n - 1 if about == "box" else 2 * (n // 2)
    return np.take(values, (last - np.arange(n)) % n, axis=axis)


@pytest.mark.parametrize("shape", [(8, 10, 12), (7, 9, 11)], ids=["even", "odd"])
def test_plain_flip_is_relions_flip(tmp_path, shape):
    data = write_mrc(tmp_path / "in.mrc", np.random.default_rng(0).normal(size=shape).astype(np.float32))
    for axis in "xyz":
        relion("relion_image_handler", "--i", "in.mrc", "--o", f"relion_{axis}.mrc", f"--flip{axis.upper()}",
               cwd=tmp_path)
        got = flipped(tmp_path, "in.mrc", axis)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, load(tmp_path / f"relion_{axis}.mrc"))
        np.testing.assert_array_equal(got, np.flip(data, {"x": 2, "y": 1, "z": 0}[axis]))


def test_hand_inversion_about_the_centre_is_relions_invert_hand_for_even_boxes(tmp_path):
    data = write_mrc(tmp_path / "in.mrc", np.random.default_rng(1).normal(size=(8, 10, 12)).astype(np.float32))
    relion("relion_image_handler", "--i", "in.mrc", "--o", "hand.mrc", "--invert_hand", cwd=tmp_path)
    result = run_noa("flip", tmp_path / "in.mrc", tmp_path / "noa.mrc", "--axis", "x", "--about", "centre")
    assert result.returncode == 0, result.stderr
    got, expected = load(tmp_path / "noa.mrc"), load(tmp_path / "hand.mrc")
    np.testing.assert_array_equal(got, expected)  # every voxel, float32: RELION wraps index 0 onto itself
    np.testing.assert_array_equal(got[..., 0], data[..., 0])
    np.testing.assert_array_equal(got, np.roll(np.flip(data, 2), 1, axis=2))  # the reversal rolled by one
    np.testing.assert_array_equal(got[..., 6], data[..., 6])  # the centre voxel N // 2 stays


def test_hand_inversion_of_odd_boxes_is_the_reversal_not_relions_roll(tmp_path):
    """For odd N the mirror about N // 2 is the plain reversal. RELION's --invert_hand takes (N - i) mod N there,
    which moves the centre voxel to N // 2 + 1: noa keeps the centre, one voxel from RELION."""
    data = write_mrc(tmp_path / "in.mrc", np.random.default_rng(2).normal(size=(7, 9, 11)).astype(np.float32))
    relion("relion_image_handler", "--i", "in.mrc", "--o", "hand.mrc", "--invert_hand", cwd=tmp_path)
    got, relions = flipped(tmp_path, "in.mrc", "x", "centre"), load(tmp_path / "hand.mrc")
    np.testing.assert_array_equal(got, np.flip(data, 2))
    np.testing.assert_array_equal(got[..., 5], data[..., 5])
    np.testing.assert_array_equal(relions, np.roll(got, 1, axis=2))


def test_hand_inversion_keeps_the_header_so_the_centre_stays_in_place(tmp_path):
    with mrcfile.new(tmp_path / "in.mrc", np.random.default_rng(3).normal(size=(6, 8, 10)).astype(np.float32)) as f:
        f.voxel_size = (1.5, 2.0, 2.5)
        f.header.origin = (3.0, -4.0, 5.0)
        data = np.array(f.data)
    result = run_noa("flip", tmp_path / "in.mrc", tmp_path / "out.mrc", "--axis", "z", "--about", "centre")
    assert result.returncode == 0, result.stderr
    with mrcfile.open(tmp_path / "out.mrc") as f:
        np.testing.assert_array_equal(f.data, mirrored(data, 0, "centre"))
        np.testing.assert_array_equal(f.data[3], data[3])  # the section N // 2 keeps its place and its values
        assert tuple(float(v) for v in f.header.origin.tolist()) == (3.0, -4.0, 5.0)
        assert tuple(float(v) for v in f.voxel_size.tolist()) == (1.5, 2.0, 2.5)
        assert "--about centre" in b"".join(f.header.label).decode()


@settings(max_examples=30, deadline=None)
@given(shape=st.tuples(st.integers(1, 2), st.integers(2, 7), st.integers(1, 7), st.integers(1, 7)),
       axis=st.sampled_from("xyz"), about=st.sampled_from(["box", "centre"]), data=st.data())
def test_flip_reads_tile_by_tile(shape, axis, about, data):
    """Any tiling along the mirrored axis (a tile holding index 0 of an even axis reads two regions)."""
    values = np.random.default_rng(4).normal(size=shape).astype(np.float32)
    index = boxes.AXES[axis]
    n = shape[index]
    cuts = sorted(set(data.draw(st.lists(st.integers(1, n - 1), max_size=3)) if n > 1 else []))
    reads = boxes.flip_reads(noa.asarray(values), index, about)
    out = np.empty_like(values)
    for start, stop in zip([0, *cuts], [*cuts, n]):
        key = [slice(0, s) for s in shape]
        key[index] = slice(start, stop)
        blocks, compute = reads(tuple(key))
        tile = noa.empty(out[tuple(key)].shape, "float32")
        compute([noa.asarray(np.ascontiguousarray(b.numpy())) for b in blocks], tile)
        out[tuple(key)] = tile.numpy()
    np.testing.assert_array_equal(out, mirrored(values, index, about))
    np.testing.assert_array_equal(noa.flip(values, axis, about).numpy(), mirrored(values, index, about))


def test_flip_refusals(tmp_path):
    write_mrc(tmp_path / "in.mrc", np.zeros((4, 6, 6), np.float32))
    assert_user_error(run_noa("flip", tmp_path / "in.mrc", tmp_path / "out.mrc", "--axis", "x", "--about", "middle"),
                      "about", "box", "centre")
    assert not (tmp_path / "out.mrc").exists()
    with pytest.raises(ParameterError, match="not one of box, centre"):
        noa.flip(np.zeros((4, 4), np.float32), "x", "edge")
    with pytest.raises(ParameterError) as error:
        operations.get("flip").task(axis="x", about="middle")
    assert error.value.param == "about"
    assert "--invert_hand" in operations.get("flip").details and "--flipX" in operations.get("flip").details


def test_hand_inversion_over_http(tmp_path):
    from fastapi.testclient import TestClient

    from noa_server.app import create_app
    from noa_server.settings import Settings

    root = tmp_path / "root"
    root.mkdir()
    data = write_mrc(root / "in.mrc", np.random.default_rng(5).normal(size=(4, 6, 8)).astype(np.float32))
    with TestClient(create_app(Settings(warmup=False, data_root=root))) as client:
        response = client.post("/v1/upload/flip", data={"axis": "y", "about": "centre"},
                               files={"file": ("in.mrc", (root / "in.mrc").read_bytes())})
        assert response.status_code == 200, response.text
        (tmp_path / "out.mrc").write_bytes(response.content)
        np.testing.assert_array_equal(load(tmp_path / "out.mrc"), mirrored(data, 1, "centre"))
        refused = client.post("/v1/upload/flip", data={"axis": "y", "about": "middle"},
                              files={"file": ("in.mrc", (root / "in.mrc").read_bytes())})
        assert 400 <= refused.status_code < 500 and "about" in refused.text

"""noa symmetrize: point groups as RELION 3.1.3 names them, and maps averaged over them.

Oracles: RELION's programs where installed (``relion_image_handler --sym`` for the maps,
``relion_particle_symmetry_expand`` for its operators and their order); always, RELION's symmetry
definitions transcribed from ``src/symmetries.cpp`` (its decimal axes, below), group axioms, and
``np.rot90`` for the 2-fold about z.

Tolerance against RELION's maps, over the whole box: RELION reads 0 for a sample more than 1e-6 beyond
the last voxel and interpolates inside only, and so does noa, in the same double-precision arithmetic; the
maps agree to float32 rounding (1e-6 of the peak; the same bits for C2, C7 and D3, whose operators are
RELION's to the bit: rows that noa copies between symmetric rows could differ by one float32 unit, seldom,
but not on this map), and to the error of RELION's decimal axes elsewhere (T's 6 digits: 2e-6 of the
peak at 40^3); a sample within 1e-6 of a face may land on either side for T and I (their axes differ at
1e-7 to 1e-10), which moves one voxel of the outermost shell by at most |map| / order.
"""

from __future__ import annotations

import math

import mrcfile
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import assert_problem, assert_user_error, load, noa, relion, write_mrc
from noa_core import operations
from noa_core.errors import ParameterError, ShapeError
from noa_core.geometry import symmetry
from noa_core.geometry.point_groups import PATTERN as GROUP_NAME

ORDERS = {"C1": 1, "C2": 2, "C7": 7, "C12": 12, "D1": 2, "D3": 6, "D12": 24, "T": 12, "TD": 24, "TH": 24, "O": 24,
          "OH": 48, "I": 60, "I1": 60, "I2": 60, "I3": 60, "I4": 60, "IH": 120, "I1H": 120, "I2H": 120, "I3H": 120,
          "I4H": 120, "CI": 2, "CS": 2, "C4V": 8, "C5H": 10, "S4": 4, "S6": 6, "D4V": 16, "D3H": 12, "C99": 99}
RELION_GROUPS = ("C2", "C7", "D3", "T", "O", "I1", "I2", "I3", "I4")

# RELION 3.1.3 src/symmetries.cpp, fill_symmetry_class: the axes as its source writes them.
RELION_AXES = {
    "T": [(3, (0, 0, 1)), (2, (0., 0.816496, 0.577350))],
    "O": [(3, (.5773502, .5773502, .5773502)), (4, (0, 0, 1))],
    "I2": [(2, (0, 0, 1)), (5, (0.525731114, 0, 0.850650807)), (3, (0, 0.356822076, 0.934172364))],
    "I1": [(2, (1, 0, 0)), (5, (0.85065080702670, 0, -0.5257311142635)), (3, (0.9341723640, 0.3568220765, 0))],
    "I3": [(2, (-0.5257311143, 0, 0.8506508070)), (5, (0., 0., 1.)),
           (3, (-0.4911234778630044, 0.3568220764705179, 0.7946544753759428))],
    "I4": [(2, (0.5257311143, 0, 0.8506508070)), (5, (0.8944271932547096, 0, 0.4472135909903704)),
           (3, (0.4911234778630044, 0.3568220764705179, 0.7946544753759428))],
}

# ... and its mirror planes (normals), and the inversion, of the improper groups.
RELION_MIRRORS = {"CS": (0, 0, 1), "C4V": (0, 1, 0), "C4H": (0, 0, 1), "D3V": (1, 0, 0), "D3H": (0, 0, 1),
                  "TD": (1.4142136, 2.4494897, 0.0000000), "OH": (0, 1, 1), "IH": (1, 0, 0), "I1H": (0, 0, -1),
                  "I3H": (0.850650807, 0, 0.525731114), "I4H": (0.850650807, 0, -0.525731114)}
IMPROPER_ORDERS = {"CI": 2, "CS": 2, "C4V": 8, "C4H": 8, "S4": 4, "D3V": 12, "D3H": 12, "TD": 24, "TH": 24, "OH": 48,
                   "IH": 120, "I1H": 120, "I3H": 120, "I4H": 120}


def rotation(degrees: float, axis) -> np.ndarray:
    """RELION's rotation3DMatrix(ang, axis) = alignWithZ(axis)^T Rz(ang) alignWithZ(axis), written out
    (src/transformations.cpp), on (x, y, z)."""
    u = np.asarray(axis, float) / np.linalg.norm(axis)
    proj = math.hypot(u[1], u[2])
    if proj > 1e-6:
        a = np.array([[proj, -u[0] * u[1] / proj, -u[0] * u[2] / proj], [0, u[2] / proj, -u[1] / proj], u])
    else:
        s = -1 if u[0] > 0 else 1
        a = np.array([[0, 0, s], [0, 1, 0], [-s, 0, 0]])
    c, si = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
    rz = np.array([[c, -si, 0], [si, c, 0], [0, 0, 1]])
    return a.T @ rz @ a


def euler_to_matrix(rot: float, tilt: float, psi: float) -> np.ndarray:
    """RELION's Euler_angles2matrix (src/euler.cpp), on (x, y, z)."""
    a, b, g = (math.radians(v) for v in (rot, tilt, psi))
    ca, sa, cb, sb, cg, sg = math.cos(a), math.sin(a), math.cos(b), math.sin(b), math.cos(g), math.sin(g)
    return np.array([[cg * cb * ca - sg * sa, cg * cb * sa + sg * ca, -cg * sb],
                     [-sg * cb * ca - cg * sa, -sg * cb * sa + cg * ca, sg * sb],
                     [sb * ca, sb * sa, cb]])


def distance_to_group(m: np.ndarray, group: np.ndarray) -> float:
    return float(np.abs(group - m).max(axis=(1, 2)).min())


def blobs(n: int, seed: int = 1) -> np.ndarray:
    """A smooth map: Gaussian blobs within 8 voxels of the centre N//2, near 0 at the box's faces."""
    z, y, x = np.mgrid[:n, :n, :n] - n // 2
    rng = np.random.default_rng(seed)
    v = np.zeros((n, n, n))
    for _ in range(12):
        c, s = rng.uniform(-8, 8, 3), rng.uniform(2, 3.5)
        v += np.exp(-((x - c[0]) ** 2 + (y - c[1]) ** 2 + (z - c[2]) ** 2) / (2 * s * s))
    return v.astype(np.float32)


def trilinear_symmetrize(v: np.ndarray, matrices: np.ndarray) -> np.ndarray:
    """RELION's symmetriseMap written out with NumPy: the map plus, per operator R (on x, y, z), the map
    sampled at R r about N//2 by trilinear interpolation within the box, 0 for a sample more than 1e-6
    outside it on any axis (RELION's bounds test); divided by the count."""
    shape = np.array(v.shape)[::-1]  # (nx, ny, nz)
    c = shape // 2
    grid = np.stack(np.meshgrid(*(np.arange(n) for n in v.shape), indexing="ij")[::-1], -1) - c  # (x, y, z)
    total = v.astype(np.float64)
    values = v.astype(np.float64)
    for r in matrices[1:]:
        p = grid @ r.T + c  # index coordinates (x, y, z) of every sample
        inside = np.all((p >= -1e-6) & (p <= shape - 1 + 1e-6), axis=-1)
        p = np.clip(p, 0, shape - 1)
        low = np.minimum(np.floor(p).astype(int), shape - 2)
        t = p - low
        sample = np.zeros(v.shape)
        for corner in np.ndindex(2, 2, 2):  # (dx, dy, dz)
            weight = np.prod(np.where(np.array(corner), t, 1 - t), axis=-1)
            i = low + corner
            sample += weight * values[i[..., 2], i[..., 1], i[..., 0]]
        total += np.where(inside, sample, 0.0)
    return total / len(matrices)


# One particle at angles (0, 0, 0), for relion_particle_symmetry_expand.
ONE_PARTICLE = ("\ndata_\n\nloop_\n_rlnImageName #1\n_rlnAngleRot #2\n_rlnAngleTilt #3\n_rlnAnglePsi #4\n"
                "_rlnOriginXAngst #5\n_rlnOriginYAngst #6\n000001@x.mrcs 0.0 0.0 0.0 0.0 0.0\n")


# -- the groups --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(ORDERS))
def test_every_group_is_a_group_of_its_order(name):
    m = symmetry.point_group(name).matrices
    assert m.shape == (ORDERS[name], 3, 3)
    np.testing.assert_array_equal(m[0], np.eye(3))
    for a in m:  # orthogonal, closed under inverses
        np.testing.assert_allclose(a @ a.T, np.eye(3), atol=1e-12)
        assert distance_to_group(a.T, m) < 1e-9
    products = np.einsum("aij,bjk->abik", m, m).reshape(-1, 3, 3)
    assert max(distance_to_group(p, m) for p in products) < 1e-9
    if len(m) > 1:  # no operator twice
        assert min(np.abs(m[i] - m[j]).max() for i in range(len(m)) for j in range(i)) > 1e-3
    determinants = np.linalg.det(m)
    proper = not any(s in name[1:] for s in "VHI") and name not in ("CS", "TD", "TH", "OH") and name[0] != "S"
    assert symmetry.point_group(name).proper == proper
    if proper:
        np.testing.assert_allclose(determinants, 1.0, atol=1e-12)
    else:
        assert sorted(set(np.round(determinants).astype(int))) == [-1, 1]


@pytest.mark.parametrize("name", sorted(RELION_AXES))
def test_the_generators_are_relions_axes(name):
    """Transcription check: every rotation RELION's definition lists (its decimal axes, normalised as its
    alignWithZ does) is an operator of noa's group within RELION's 1e-6 digits, and the group's first
    operators after the identity are RELION's first axis's, in its order (rotations by -360 j / n)."""
    m = symmetry.point_group(name).matrices
    for fold, axis in RELION_AXES[name]:
        for j in range(1, fold):
            assert distance_to_group(rotation(360.0 * j / fold, axis).T, m) < 2e-6, (name, fold, axis, j)
    fold, axis = RELION_AXES[name][0]
    for j in range(1, fold):
        np.testing.assert_allclose(m[j], rotation(360.0 * j / fold, axis).T, atol=2e-6)


@pytest.mark.parametrize("name", sorted(RELION_MIRRORS))
def test_the_mirrors_are_relions(name):
    """RELION's mirror_plane (R = A L A^-1 with A aligning the normal with z, L = diag(1, 1, -1): the
    reflection I - 2 n n^T) is an operator of the group; Th and Sn hold the inversion -I."""
    n = np.asarray(RELION_MIRRORS[name], float) / np.linalg.norm(RELION_MIRRORS[name])
    assert distance_to_group(np.eye(3) - 2 * np.outer(n, n), symmetry.point_group(name).matrices) < 2e-6
    for inverted in ("TH", "S4", "S6", "CI"):
        assert distance_to_group(-np.eye(3), symmetry.point_group(inverted).matrices) < 1e-12


@pytest.mark.parametrize("name", sorted(IMPROPER_ORDERS))
def test_improper_groups_have_relions_counts(tmp_path, name):
    """relion_particle_symmetry_expand writes one line per operator (its angles mean nothing for a mirror)."""
    (tmp_path / "one.star").write_text(ONE_PARTICLE)
    relion("relion_particle_symmetry_expand", "--i", "one.star", "--o", "out.star", "--sym", name, "--ignore_optics",
           cwd=tmp_path)
    import starfile

    assert len(starfile.read(tmp_path / "out.star")) == IMPROPER_ORDERS[name] == symmetry.point_group(name).order


def test_cn_is_about_z_and_dn_adds_a_two_fold_about_x():
    c7 = symmetry.point_group("c7").matrices  # any case, as RELION
    for j in range(7):
        t = -2 * math.pi * j / 7  # RELION's R(j+1) turns by -360 j / 7
        expected = np.array([[math.cos(t), -math.sin(t), 0], [math.sin(t), math.cos(t), 0], [0, 0, 1]])
        np.testing.assert_allclose(c7[j], expected, atol=1e-12)
    d3 = symmetry.point_group("D3").matrices
    assert distance_to_group(np.diag([1.0, -1.0, -1.0]), d3) < 1e-12
    assert distance_to_group(np.diag([-1.0, 1.0, -1.0]), d3) > 0.5  # D3 has no 2-fold about y


def test_the_icosahedral_settings_differ_as_relions_do():
    two_folds = {name: [distance_to_group(np.diag(d), symmetry.point_group(name).matrices) < 1e-12
                        for d in ([1, -1, -1], [-1, 1, -1], [-1, -1, 1])] for name in ("I1", "I2", "I3", "I4")}
    assert two_folds == {"I1": [True] * 3, "I2": [True] * 3, "I3": [False, True, False], "I4": [False, True, False]}
    quarter = np.array([[0.0, -1, 0], [1, 0, 0], [0, 0, 1]])  # I1 is I2 turned 90 degrees about z
    i1, i2 = symmetry.point_group("I1").matrices, symmetry.point_group("I2").matrices
    assert max(distance_to_group(quarter @ m @ quarter.T, i1) for m in i2) < 1e-12
    assert max(distance_to_group(m, i1) for m in i2) > 0.3  # and they are not the same group
    five = rotation(72, (0, 0, 1))
    assert [distance_to_group(five, symmetry.point_group(n).matrices) < 1e-12 for n in ("I1", "I2", "I3", "I4")] \
        == [False, False, True, True]
    np.testing.assert_array_equal(symmetry.point_group("I").matrices, i2)


@pytest.mark.parametrize("name", ["Q7", "C", "I5", "I5H", "S3", "C0", "C100", "D4X", "", "CIV"])
def test_unknown_groups_are_refused_naming_sym(name):
    with pytest.raises(ParameterError) as refused:
        symmetry.point_group(name)
    assert refused.value.param == "sym"


@settings(max_examples=300, deadline=None)
@given(name=st.one_of(st.from_regex(r"\A[CcDdSsIiTtOo][0-9A-Za-z]{0,3}\Z"),
                      st.from_regex(GROUP_NAME, fullmatch=True),
                      st.from_regex(r"\A\s?[CcDdSs][0-9\u0660-\u0669\uff10-\uff19]{1,3}\s?\Z")))
def test_the_schemas_pattern_is_the_names_accepted(name):
    """The HTTP schema's pattern of sym and list (GROUP_NAME) accepts exactly the names point_group accepts."""
    import re

    try:
        symmetry.point_group(name)
        accepted = True
    except ParameterError:
        accepted = False
    assert accepted == bool(re.fullmatch(GROUP_NAME, name)), name


@pytest.mark.parametrize("name", RELION_GROUPS)
def test_operators_in_relions_order_from_relion_particle_symmetry_expand(tmp_path, name):
    """relion_particle_symmetry_expand writes one particle at (0, 0, 0) turned by each of RELION's operators
    in RELION's order (Euler_apply_transf: the angles of R); its 6 printed decimals bound the agreement."""
    (tmp_path / "one.star").write_text(ONE_PARTICLE)
    relion("relion_particle_symmetry_expand", "--i", "one.star", "--o", "out.star", "--sym", name, "--ignore_optics",
           cwd=tmp_path)
    import starfile

    table = starfile.read(tmp_path / "out.star")
    expected = np.array([euler_to_matrix(*angles) for angles in
                         zip(table["rlnAngleRot"], table["rlnAngleTilt"], table["rlnAnglePsi"])])
    got = symmetry.point_group(name).matrices
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, atol=1e-6 if name != "T" else 2e-6)  # RELION's T axis has 6 digits


# -- maps ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [15, 16])
def test_c2_is_the_mean_of_the_map_and_its_half_turn_about_z(n):
    """Odd and even boxes: about N//2 a half turn maps the grid onto itself, so C2 is exact; in an even box
    the first row and column have no partner inside the box and average with 0."""
    v = np.random.default_rng(n).normal(size=(n - 2, n, n + 1)).astype(np.float32)
    turned = np.zeros_like(v)
    cy, cx = n // 2, (n + 1) // 2
    keep_y, keep_x = min(cy, n - 1 - cy), min(cx, n - cx)  # rows / columns with a partner on both sides
    ys, xs = slice(cy - keep_y, cy + keep_y + 1), slice(cx - keep_x, cx + keep_x + 1)
    turned[:, ys, xs] = np.rot90(v[:, ys, xs], 2, axes=(1, 2))
    got = symmetry.symmetrize(v, symmetry.point_group("C2")).numpy()[0]
    np.testing.assert_allclose(got, (v + turned) / 2, atol=1e-6)


@settings(max_examples=8, deadline=None)
@given(size=st.tuples(st.integers(9, 20), st.integers(9, 20), st.integers(9, 20)),
       name=st.sampled_from(["C3", "D2", "T", "O", "I1", "D3H", "TH"]))
def test_any_map_against_relions_formula_written_out_with_numpy(size, name):
    v = np.random.default_rng(sum(size)).normal(size=size).astype(np.float32)
    got = symmetry.symmetrize(v, symmetry.point_group(name)).numpy()[0]
    np.testing.assert_allclose(got, trilinear_symmetrize(v, symmetry.point_group(name).matrices), atol=2e-5)


@pytest.mark.parametrize("name", ["C4", "D3", "O", "I2"])
def test_a_symmetric_map_comes_back(name):
    """A map made symmetric exactly (Gaussians of sigma 2 px centred on the group's orbit of a point) comes
    back within the error bound of trilinear interpolation, h²/8 of the second derivative per axis: 3 / (8
    sigma²) of the peak; symmetrized with another group, it changes by more than twice that."""
    n, sigma = 33, 2.0
    r = np.stack(np.meshgrid(*(np.arange(n) - n // 2,) * 3, indexing="ij"), -1)[..., ::-1].astype(float)  # x y z
    v = np.zeros((n, n, n))
    for m in symmetry.point_group(name).matrices:
        v += np.exp(-((r - m @ np.array([7.0, 2.0, 3.0])) ** 2).sum(-1) / (2 * sigma ** 2))
    v = (v / v.max()).astype(np.float32)
    bound = 3 / (8 * sigma ** 2)
    assert np.abs(symmetry.symmetrize(v, symmetry.point_group(name)).numpy()[0] - v).max() < bound
    other = {"C4": "C3", "D3": "D4", "O": "I2", "I2": "I1"}[name]
    assert np.abs(symmetry.symmetrize(v, symmetry.point_group(other)).numpy()[0] - v).max() > 2 * bound


def test_stacks_of_volumes_integer_maps_and_outputs():
    v = np.random.default_rng(3).normal(size=(2, 12, 12, 12)).astype(np.float32)
    out = np.empty(v.shape, np.float64)
    symmetry.symmetrize(v, symmetry.point_group("D2"), out)
    for b in range(2):
        np.testing.assert_allclose(out[b], trilinear_symmetrize(v[b], symmetry.point_group("D2").matrices), atol=1e-5)
    whole = np.arange(12 ** 3, dtype=np.int16).reshape(12, 12, 12)
    np.testing.assert_allclose(symmetry.symmetrize(whole, symmetry.point_group("C3")).numpy()[0],
                               trilinear_symmetrize(whole.astype(np.float32), symmetry.point_group("C3").matrices),
                               rtol=1e-6, atol=1e-3)
    with pytest.raises(ShapeError):
        symmetry.symmetrize(np.zeros((3, 1, 8, 8), np.float32), symmetry.point_group("C2"))  # a stack of images


@pytest.mark.parametrize("name", RELION_GROUPS)
def test_against_relion_image_handler(tmp_path, name):
    n = 40
    v = blobs(n) + np.random.default_rng(2).normal(0, 0.05, (n, n, n)).astype(np.float32)  # faces not 0
    write_mrc(tmp_path / "in.mrc", v, voxel_size=1.5)
    relion("relion_image_handler", "--i", "in.mrc", "--o", "relion.mrc", "--sym", name, cwd=tmp_path)
    result = noa("symmetrize", tmp_path / "in.mrc", tmp_path / "noa.mrc", "--sym", name)
    assert result.returncode == 0, result.stderr
    got, expected = load(tmp_path / "noa.mrc"), load(tmp_path / "relion.mrc")
    peak = float(v.max())
    assert np.abs(got - expected).max() < (2e-6 if name == "T" else 1e-6) * peak  # the whole box, faces included
    if name[0] in "CD":  # the same operators to the bit: the same arithmetic, the same bits here
        np.testing.assert_array_equal(got, expected)
    with mrcfile.open(tmp_path / "noa.mrc") as f:
        assert f.voxel_size.x == pytest.approx(1.5) and f.data.dtype == np.float32


# -- the doors -----------------------------------------------------------------------------------------


def test_cli_writes_the_mean_and_lists_matrices(tmp_path):
    v = np.random.default_rng(5).normal(size=(16, 16, 16)).astype(np.float32)
    write_mrc(tmp_path / "in.mrc", v, voxel_size=2.0)
    result = noa("symmetrize", tmp_path / "in.mrc", tmp_path / "out.mrc", "--sym", "d2")
    assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(load(tmp_path / "out.mrc"), trilinear_symmetrize(v, symmetry.point_group("D2").matrices),
                               atol=1e-5)
    with mrcfile.open(tmp_path / "out.mrc") as f:
        assert "noa symmetrize --sym D2: mean over 4 operators" in f.header.label[1].decode()
    listed = noa("symmetrize", "--list", "C4")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].startswith("C4: 4 operators") and lines[5] == "R(2) ="
    assert [float(t) for t in lines[6].split()] == [0.0, 1.0, 0.0]  # RELION's R(2): -90 degrees about z


def test_cli_refusals_leave_no_output(tmp_path):
    write_mrc(tmp_path / "in.mrc", np.zeros((8, 8, 8), np.float32))
    write_mrc(tmp_path / "stack.mrcs", np.zeros((3, 8, 8), np.float32), stack=True)
    write_mrc(tmp_path / "image.mrc", np.zeros((8, 8), np.float32))
    assert_user_error(noa("symmetrize", tmp_path / "in.mrc", tmp_path / "a.mrc", "--sym", "X9"), "--sym", "X9")
    assert_user_error(noa("symmetrize", tmp_path / "in.mrc", tmp_path / "b.mrc", "--sym", "I5"), "--sym", "I5")
    assert_user_error(noa("symmetrize", tmp_path / "in.mrc", tmp_path / "c.mrc"), "--sym", "required")
    assert_user_error(noa("symmetrize", tmp_path / "stack.mrcs", tmp_path / "d.mrc", "--sym", "C2"), "stack of images")
    assert_user_error(noa("symmetrize", tmp_path / "image.mrc", tmp_path / "e.mrc", "--sym", "C2"), "an image")
    write_mrc(tmp_path / "line.mrc", np.zeros((64, 1, 1), np.float32))  # issue 38 item 17: it was "an image"
    assert_user_error(noa("symmetrize", tmp_path / "line.mrc", tmp_path / "g.mrc", "--sym", "C2"),
                      "64 x 1 x 1 voxels: flat, not a 3-d map")
    assert_user_error(noa("symmetrize", "--list", "S5"), "--list", "even")
    both = noa("symmetrize", tmp_path / "in.mrc", tmp_path / "f.mrc", "--list", "C2")  # a query reads no file
    assert both.returncode == 2 and "--list reads no file" in both.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["image.mrc", "in.mrc", "line.mrc", "stack.mrcs"]


def test_http_upload_and_query(tmp_path, make_client):
    v = np.random.default_rng(6).normal(size=(12, 12, 12)).astype(np.float32)
    write_mrc(tmp_path / "in.mrc", v)
    client = make_client()
    sent = client.post("/v1/upload/symmetrize", data={"sym": "C3"},
                       files={"file": ("in.mrc", (tmp_path / "in.mrc").read_bytes())})
    assert sent.status_code == 200, sent.text
    (tmp_path / "back.mrc").write_bytes(sent.content)
    expected = trilinear_symmetrize(v, symmetry.point_group("C3").matrices)
    np.testing.assert_allclose(load(tmp_path / "back.mrc"), expected, atol=1e-5)
    listed = client.get("/v1/query/symmetrize", params={"list": "d3"})
    assert listed.status_code == 200, listed.text
    body = listed.json()
    assert (body["group"], body["order"], body["proper"]) == ("D3", 6, True)
    np.testing.assert_allclose(body["matrices"], symmetry.point_group("D3").matrices, atol=1e-15)
    assert "/v1/query/symmetrize" in client.get("/openapi.json").json()["paths"]
    # names outside the schema's grammar (GROUP_NAME) are refused by the schema, naming the parameter
    refused = assert_problem(client.get("/v1/query/symmetrize", params={"list": "I5"}), 400, "invalid-parameters")
    assert refused["errors"][0]["loc"] == ["query", "list"]
    refused = assert_problem(client.post("/v1/upload/symmetrize", data={"sym": "Z2"},
                                         files={"file": ("in.mrc", (tmp_path / "in.mrc").read_bytes())}), 400,
                             "invalid-parameters")
    assert refused["errors"][0]["loc"][-1] == "sym"


def test_declaration():
    operation = operations.get("symmetrize")
    assert isinstance(operation, operations.Writes) and operation.query is not None
    assert operation.query.answer("o")["order"] == 24


@pytest.mark.parametrize("name", ["C\u0663", "C\uff13", " C3 ", "C3\n", "c 3"])
def test_one_grammar_on_every_door(tmp_path, make_client, name):
    """Issue 38 item 16: the CLI took an Arabic-Indic or full-width digit and spaces, HTTP refused them."""
    write_mrc(tmp_path / "in.mrc", np.zeros((8, 8, 8), np.float32))
    assert_user_error(noa("symmetrize", tmp_path / "in.mrc", tmp_path / "out.mrc", "--sym", name), "--sym")
    assert_user_error(noa("symmetrize", "--list", name), "--list")
    assert not (tmp_path / "out.mrc").exists()
    client = make_client()
    assert_problem(client.get("/v1/query/symmetrize", params={"list": name}), 400)
    assert_problem(client.post("/v1/upload/symmetrize", data={"sym": name},
                               files={"file": ("in.mrc", (tmp_path / "in.mrc").read_bytes())}), 400)
    with pytest.raises(ParameterError):
        symmetry.point_group(name)


def test_names_are_canonical_on_every_door(make_client):
    """Issue 38 item 16: `C01` was accepted and named "C01"."""
    assert symmetry.point_group("c01").name == "C1" and symmetry.point_group("d07h").name == "D7H"
    assert noa("symmetrize", "--list", "c01").stdout.startswith("C1: 1 operators")
    assert make_client().get("/v1/query/symmetrize", params={"list": "s04"}).json()["group"] == "S4"

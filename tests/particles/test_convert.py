"""``convert`` (noa_core.particles.convert): cryoSPARC .cs to STAR against pyem's csparc2star conventions (its
pure functions copied below as the oracle: pyem.geom.convert's expmap, rot2euler and euler2rot, and the field
mapping of pyem.metadata.cryosparc2), STAR to .cs and back, and RELION 3.0 to 3.1 against RELION 3.1.3's own
conversion (relion_star_handler reading a 3.0 file writes 3.1)."""

from __future__ import annotations

import numpy as np
import pytest
import starfile

from noa_core.errors import ParameterError
from noa_core.particles.convert import convert
from tests.helpers import euler_matrix, relion
from tests.particles.tables import project, relion31

# -- pyem's functions (pyem/geom/convert.py, GPL-3.0, Daniel Asarnow), copied as the oracle ------------------


def pyem_expmap(e):
    """Convert axis-angle vector into 3D rotation matrix"""
    theta = np.linalg.norm(e)
    if theta < 1e-16:
        return np.identity(3, dtype=e.dtype)
    w = e / theta
    k = np.array([[0, w[2], -w[1]],
                  [-w[2], 0, w[0]],
                  [w[1], -w[0], 0]], dtype=e.dtype)
    r = np.identity(3, dtype=e.dtype) + np.sin(theta) * k + (1 - np.cos(theta)) * np.dot(k, k)
    return r


def pyem_rot2euler(r):
    """Decompose rotation matrix into Euler angles"""
    epsilon = np.finfo(np.double).eps
    abs_sb = np.sqrt(r[0, 2] ** 2 + r[1, 2] ** 2)
    if abs_sb > 16 * epsilon:
        gamma = np.arctan2(r[1, 2], -r[0, 2])
        alpha = np.arctan2(r[2, 1], r[2, 0])
        if np.abs(np.sin(gamma)) < epsilon:
            sign_sb = np.sign(-r[0, 2]) / np.cos(gamma)
        else:
            sign_sb = np.sign(r[1, 2]) if np.sin(gamma) > 0 else -np.sign(r[1, 2])
        beta = np.arctan2(sign_sb * abs_sb, r[2, 2])
    else:
        if np.sign(r[2, 2]) > 0:
            alpha = 0
            beta = 0
            gamma = np.arctan2(-r[1, 0], r[0, 0])
        else:
            alpha = 0
            beta = np.pi
            gamma = np.arctan2(r[1, 0], -r[0, 0])
    return alpha, beta, gamma


pyem_euler2rot = euler_matrix  # pyem's euler2rot: RELION's matrix of radians


# -- a cryoSPARC refinement's particles ---------------------------------------------------------------------


def refined_cs(path, rows=25, seed=0):
    rng = np.random.default_rng(seed)
    dtype = [("uid", "<u8"), ("blob/path", "S40"), ("blob/idx", "<u4"), ("blob/shape", "<u4", (2,)),
             ("blob/psize_A", "<f4"), ("ctf/accel_kv", "<f4"), ("ctf/cs_mm", "<f4"), ("ctf/amp_contrast", "<f4"),
             ("ctf/df1_A", "<f4"), ("ctf/df2_A", "<f4"), ("ctf/df_angle_rad", "<f4"), ("ctf/phase_shift_rad", "<f4"),
             ("ctf/exp_group_id", "<u4"), ("alignments3D/split", "<u4"), ("alignments3D/shift", "<f4", (2,)),
             ("alignments3D/pose", "<f4", (3,)), ("alignments3D/class_posterior", "<f4"),
             ("alignments3D/class", "<u4"), ("location/micrograph_path", "S40"),
             ("location/micrograph_shape", "<u4", (2,)), ("location/center_x_frac", "<f4"),
             ("location/center_y_frac", "<f4")]
    array = np.zeros(rows, dtype)
    array["uid"] = rng.integers(1, 2**63, rows, dtype=np.uint64)
    array["blob/path"] = [b">J12/extract/%03d_particles.mrc" % (i // 10) for i in range(rows)]
    array["blob/idx"] = np.arange(rows) % 10
    array["blob/shape"] = 256
    array["blob/psize_A"] = 1.06
    array["ctf/accel_kv"], array["ctf/cs_mm"], array["ctf/amp_contrast"] = 300, 2.7, 0.1
    array["ctf/df1_A"] = rng.uniform(5000, 30000, rows)
    array["ctf/df2_A"] = rng.uniform(5000, 30000, rows)
    array["ctf/df_angle_rad"] = rng.uniform(-np.pi, np.pi, rows)
    array["ctf/phase_shift_rad"] = rng.uniform(0, 1, rows)
    array["ctf/exp_group_id"] = np.arange(rows) % 2
    array["alignments3D/split"] = np.arange(rows) % 2
    array["alignments3D/shift"] = rng.uniform(-8, 8, (rows, 2))
    axes = rng.normal(size=(rows, 3))
    array["alignments3D/pose"] = axes / np.linalg.norm(axes, axis=1, keepdims=True) * rng.uniform(0, np.pi, (rows, 1))
    array["alignments3D/pose"][0] = 0  # the identity: tilt 0, rot and psi one angle
    array["alignments3D/class_posterior"] = 1
    array["alignments3D/class"] = np.arange(rows) % 3
    array["location/micrograph_path"] = [b"J3/motioncorrected/%03d_mic.mrc" % (i // 10) for i in range(rows)]
    array["location/micrograph_shape"] = (4092, 5760)
    array["location/center_x_frac"] = rng.uniform(0, 1, rows)
    array["location/center_y_frac"] = rng.uniform(0, 1, rows)
    with open(path, "wb") as f:
        np.save(f, array)
    return array


def test_a_cs_file_becomes_the_star_pyem_makes(tmp_path):
    cs = refined_cs(tmp_path / "in.cs")
    result = convert(tmp_path / "in.cs", tmp_path / "out.star")
    assert result.rows == 25 and result.layout == "RELION 3.1"
    tables = starfile.read(tmp_path / "out.star")
    optics, particles = tables["optics"], tables["particles"]
    # pyem: the pose's rotation, Euler angles in degrees
    expected = np.rad2deg([pyem_rot2euler(pyem_expmap(p.astype(np.float64))) for p in cs["alignments3D/pose"]])
    got = particles[["rlnAngleRot", "rlnAngleTilt", "rlnAnglePsi"]].to_numpy()
    assert np.allclose(got, expected, atol=1e-6)
    # shifts in pixels, to Å with the pixel size; CTF angles in degrees; classes and groups from 1
    assert np.allclose(particles["rlnOriginXAngst"], cs["alignments3D/shift"][:, 0] * cs["blob/psize_A"], atol=1e-5)
    assert np.allclose(particles["rlnOriginYAngst"], cs["alignments3D/shift"][:, 1] * cs["blob/psize_A"], atol=1e-5)
    assert np.allclose(particles["rlnDefocusU"], cs["ctf/df1_A"])
    assert np.allclose(particles["rlnDefocusV"], cs["ctf/df2_A"])
    assert np.allclose(particles["rlnDefocusAngle"], np.rad2deg(cs["ctf/df_angle_rad"]), atol=1e-5)
    assert np.allclose(particles["rlnPhaseShift"], np.rad2deg(cs["ctf/phase_shift_rad"]), atol=1e-5)
    assert particles["rlnClassNumber"].tolist() == (cs["alignments3D/class"] + 1).tolist()
    assert particles["rlnRandomSubset"].tolist() == (cs["alignments3D/split"] + 1).tolist()
    assert particles["rlnOpticsGroup"].tolist() == (cs["ctf/exp_group_id"] + 1).tolist()
    # images from 1, the '>' taken off; coordinates from the fractions of [y, x], y from the top
    assert particles["rlnImageName"].tolist() == [f"{i + 1:06d}@{p.decode()[1:]}" for p, i in
                                                  zip(cs["blob/path"], cs["blob/idx"])]
    assert particles["rlnMicrographName"].tolist() == [p.decode() for p in cs["location/micrograph_path"]]
    assert particles["rlnCoordinateX"].tolist() == np.round(cs["location/center_x_frac"] * 5760).astype(int).tolist()
    from_top = np.round((1 - cs["location/center_y_frac"]) * 4092).astype(int)
    assert particles["rlnCoordinateY"].tolist() == from_top.tolist()
    assert optics["rlnOpticsGroup"].tolist() == [1, 2] and optics["rlnImageSize"].tolist() == [256, 256]
    assert np.allclose(optics["rlnImagePixelSize"], 1.06) and np.allclose(optics["rlnVoltage"], 300)
    assert np.allclose(optics["rlnSphericalAberration"], 2.7) and np.allclose(optics["rlnAmplitudeContrast"], 0.1)


def test_relion_30_from_a_cs_file_keeps_shifts_in_pixels(tmp_path):
    cs = refined_cs(tmp_path / "in.cs")
    convert(tmp_path / "in.cs", tmp_path / "out.star", layout="3.0")
    frame = starfile.read(tmp_path / "out.star")
    assert np.allclose(frame["rlnOriginX"], cs["alignments3D/shift"][:, 0], atol=1e-6)
    assert np.allclose(frame["rlnDetectorPixelSize"], 1.06) and (frame["rlnMagnification"] == 10000).all()
    assert "rlnOpticsGroup" not in frame and "rlnOriginXAngst" not in frame


def test_a_star_becomes_a_cs_file_pyem_reads_back(tmp_path):
    src = relion31(tmp_path / "in.star", rows=30)
    convert(src, tmp_path / "out.cs")
    cs = np.load(tmp_path / "out.cs")
    frame = starfile.read(src)["particles"]
    angles = np.deg2rad(frame[["rlnAngleRot", "rlnAngleTilt", "rlnAnglePsi"]].to_numpy())
    for pose, (rot, tilt, psi) in zip(cs["alignments3D/pose"], angles):  # the pose's rotation is RELION's
        assert np.allclose(pyem_expmap(pose.astype(np.float64)), pyem_euler2rot(rot, tilt, psi), atol=1e-6)
    assert np.allclose(cs["alignments3D/shift"][:, 0], frame["rlnOriginXAngst"] / 1.5, atol=1e-5)
    assert np.allclose(cs["ctf/df_angle_rad"], np.deg2rad(frame["rlnDefocusAngle"]), atol=1e-6)
    assert cs["blob/idx"].tolist() == [int(n.split("@")[0]) - 1 for n in frame["rlnImageName"]]
    assert cs["blob/path"].tolist() == [n.split("@")[1].encode() for n in frame["rlnImageName"]]
    assert (cs["blob/shape"] == 32).all() and np.allclose(cs["blob/psize_A"], 1.5)
    assert cs["alignments3D/class"].tolist() == (frame["rlnClassNumber"] - 1).tolist()
    # and back: the values it started from
    convert(tmp_path / "out.cs", tmp_path / "back.star")
    back = starfile.read(tmp_path / "back.star")["particles"]
    again = np.deg2rad(back[["rlnAngleRot", "rlnAngleTilt", "rlnAnglePsi"]].to_numpy())
    for a, b in zip(angles, again):  # the same rotations (float32 poses)
        assert np.allclose(pyem_euler2rot(*a), pyem_euler2rot(*b), atol=1e-5)
    assert np.allclose(back["rlnOriginXAngst"], frame["rlnOriginXAngst"], atol=1e-4)
    assert np.allclose(back["rlnDefocusU"], frame["rlnDefocusU"], rtol=1e-6)
    assert back["rlnImageName"].tolist() == frame["rlnImageName"].tolist()


def test_relion_30_becomes_31_as_relion_converts_it(tmp_path):
    folder = project(tmp_path)
    src = relion31(folder / "in.star", rows=20)
    convert(src, folder / "old.star", layout="3.0")
    old = starfile.read(folder / "old.star")
    angst = starfile.read(src)["particles"]["rlnOriginXAngst"]
    assert "rlnOriginX" in old and np.allclose(old["rlnOriginX"], angst / 1.5)
    convert(folder / "old.star", folder / "noa.star", layout="3.1", project_dir=folder)
    relion("relion_star_handler", "--i", "old.star", "--o", "relion.star", cwd=folder)
    ours, theirs = starfile.read(folder / "noa.star"), starfile.read(folder / "relion.star")
    for label in ("rlnImagePixelSize", "rlnImageSize", "rlnVoltage", "rlnSphericalAberration", "rlnAmplitudeContrast",
                  "rlnImageDimensionality"):
        assert np.allclose(ours["optics"][label], theirs["optics"][label]), label
    for label in ("rlnOriginXAngst", "rlnOriginYAngst", "rlnDefocusU", "rlnAngleRot", "rlnOpticsGroup"):
        assert np.allclose(ours["particles"][label], theirs["particles"][label], atol=1e-5), label
    assert ours["particles"]["rlnImageName"].tolist() == theirs["particles"]["rlnImageName"].tolist()
    original = starfile.read(src)
    assert np.allclose(ours["particles"]["rlnOriginXAngst"], original["particles"]["rlnOriginXAngst"], atol=1e-6)


@pytest.mark.parametrize("dst, options, fragment", [("out.star", {}, "give the other layout"),
                                                    ("out.star", {"layout": "3.1"}, "give the other layout"),
                                                    ("out.star", {"layout": "4"}, "one of 3.0, 3.1"),
                                                    ("out.cs", {"layout": "3.0"}, "for a STAR output"),
                                                    ("out.txt", {}, "name the output .star or .cs")])
def test_conversions_that_are_none_are_refused(tmp_path, dst, options, fragment):
    src = relion31(tmp_path / "in.star", rows=3)
    with pytest.raises(ParameterError, match=fragment):
        convert(src, tmp_path / dst, **options)
    assert [p.name for p in tmp_path.iterdir()] == ["in.star"]

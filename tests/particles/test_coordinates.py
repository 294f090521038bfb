"""Coordinate files as labs have them (issue 43 item 2): EMAN .box and plain x y text read as relion_preprocess
reads them (the same boxes extracted), a particles STAR re-extracted (--recentre as RELION's --recenter, every
other column kept), cryoSPARC .cs picks with their y convention (center_y_frac counts rows from the first stored,
as pyem's csparc2star reads it: a spot at row y is found at y), and the readers' errors naming file and row."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import starfile

from helpers import load, noa, relion, write_mrc
from noa_core.particles import coordinates
from tests.particles.tables import micrographs_star

HEIGHT, WIDTH, PIXEL = 80, 100, 2.0
MICROGRAPHS_STAR = micrographs_star(["Mics/m.mrc"], PIXEL)


@pytest.fixture()
def project(tmp_path) -> Path:
    (tmp_path / "Mics").mkdir()
    data = np.random.default_rng(1).normal(size=(HEIGHT, WIDTH)).astype(np.float32)
    write_mrc(tmp_path / "Mics/m.mrc", data, voxel_size=PIXEL)
    (tmp_path / "mics.star").write_text(MICROGRAPHS_STAR)
    return tmp_path


def extract_both(project: Path, suffix: str, box: int = 16) -> tuple[np.ndarray, np.ndarray]:
    relion("relion_preprocess", "--i", "mics.star", "--coord_dir", "./", "--coord_suffix", suffix, "--part_dir",
           "Relion/", "--part_star", "relion.star", "--extract", "--extract_size", box, cwd=project)
    (project / "noa").mkdir(exist_ok=True)
    done = noa("extract", "Mics/m.mrc", "--coords", f"Mics/m{suffix}", "--box", box, "-o", "noa/out.star",
               cwd=project)
    assert done.returncode == 0, done.stderr
    return load(project / "noa/Particles/Mics/m.mrcs"), load(project / "Relion/Mics/m.mrcs")


def test_eman_box_files_are_read_as_relion_reads_them(project):
    # corner + size // 2 in integers: (10, 20, 15, 15) is centred at (17, 27)
    (project / "Mics/m.box").write_text("10\t20\t15\t15\n0 0 16 16\n90 70 16 16\n40 33 17 17\n")
    got, expected = extract_both(project, ".box")
    assert got.shape == (4, 16, 16)
    np.testing.assert_array_equal(got, expected)
    assert coordinates.read(project / "Mics/m.box")[0].xy.tolist() == [[17, 27], [8, 8], [98, 78], [48, 41]]


def test_plain_text_is_read_as_relion_reads_it(project):
    (project / "Mics/m.txt").write_text("x y\n5 6\n99 79\n50 40\n")
    got, expected = extract_both(project, ".txt")
    assert got.shape == (3, 16, 16)
    np.testing.assert_array_equal(got, expected)


def test_a_particles_star_is_reextracted_and_recentred_as_relion_does(project):
    (project / "run_data.star").write_text(f"""
data_optics
loop_
_rlnOpticsGroupName
_rlnOpticsGroup
_rlnImagePixelSize
_rlnImageSize
_rlnImageDimensionality
_rlnVoltage
_rlnSphericalAberration
_rlnAmplitudeContrast
opticsGroup1 1 {PIXEL} 16 2 300 2.7 0.1

data_particles
loop_
_rlnCoordinateX
_rlnCoordinateY
_rlnImageName
_rlnMicrographName
_rlnOpticsGroup
_rlnOriginXAngst
_rlnOriginYAngst
_rlnAngleRot
_rlnClassNumber
30 40 1@old.mrcs Mics/m.mrc 1 5.2 -3.1 12.5 3
60.7 20 2@old.mrcs Mics/m.mrc 1 -1.0 7.0 -40 1
10 70 3@old.mrcs Mics/m.mrc 1 0.99 0 0 2
""")
    relion("relion_preprocess", "--i", "mics.star", "--reextract_data_star", "run_data.star", "--recenter",
           "--part_dir", "Relion/", "--part_star", "relion.star", "--extract", "--extract_size", 16, cwd=project)
    (project / "noa").mkdir()
    done = noa("extract", "mics.star", "--coords", "run_data.star", "--recentre", "--box", 16, "-o", "noa/out.star",
               cwd=project)
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(load(project / "noa/Particles/Mics/m.mrcs"), load(project / "Relion/Mics/m.mrcs"))
    ours, theirs = starfile.read(project / "noa/out.star")["particles"], starfile.read(project / "relion.star")
    theirs = theirs["particles"] if isinstance(theirs, dict) else theirs
    for column in ("rlnCoordinateX", "rlnCoordinateY", "rlnOriginXAngst", "rlnOriginYAngst", "rlnAngleRot",
                   "rlnClassNumber"):
        np.testing.assert_allclose(ours[column], theirs[column], atol=1e-6, err_msg=column)


def test_cryosparc_picks_follow_pyems_y_convention(project, tmp_path):
    # a bright spot at row 25, column 70: a pick at center_y_frac 25/80 must be centred on it
    data = np.zeros((HEIGHT, WIDTH), np.float32)
    data[25, 70] = 100
    write_mrc(project / "Mics/m.mrc", data, voxel_size=PIXEL)
    fields = [("location/micrograph_path", "S40"), ("location/micrograph_shape", "<u4", (2,)),
              ("location/center_x_frac", "<f4"), ("location/center_y_frac", "<f4")]
    picks = np.zeros(2, fields)
    picks["location/micrograph_path"] = b"J12/motioncorrected/m.mrc"
    picks["location/micrograph_shape"] = (HEIGHT, WIDTH)
    picks["location/center_x_frac"] = [70.2 / WIDTH, 10.5 / WIDTH]
    picks["location/center_y_frac"] = [25.4 / HEIGHT, 60.5 / HEIGHT]
    with open(project / "picks.cs", "wb") as f:
        np.save(f, picks)
    read = coordinates.read(project / "picks.cs")
    assert read[0].micrograph == "J12/motioncorrected/m.mrc"
    np.testing.assert_allclose(read[0].xy, [[70.2, 25.4], [10.5, 60.5]], rtol=1e-5)
    (project / "noa").mkdir()
    done = noa("extract", "mics.star", "--coords", "picks.cs", "--box", 10, "-o", "noa/out.star", cwd=project)
    assert done.returncode == 0, done.stderr
    boxes = load(project / "noa/Particles/Mics/m.mrcs")
    assert boxes[0][5, 5] == 100 and boxes[0].sum() == 100  # the centre N//2 of the first box is the spot
    np.testing.assert_array_equal(boxes[1], data[60 - 5:60 + 5, 10 - 5:10 + 5])


def test_readers_name_the_file_and_row_of_what_is_wrong(tmp_path):
    (tmp_path / "bad.box").write_text("1 2 16 16\n3 x 16 16\n")
    with pytest.raises(coordinates.CoordinateError, match=r"bad.box: row 2"):
        coordinates.read(tmp_path / "bad.box")
    (tmp_path / "few.txt").write_text("1 2\n3\n")
    with pytest.raises(coordinates.CoordinateError, match=r"few.txt: row 2: 1 values"):
        coordinates.read(tmp_path / "few.txt")
    (tmp_path / "none.star").write_text("data_\nloop_\n_rlnAngleRot\n1\n")
    with pytest.raises(coordinates.CoordinateError, match="no loop has rlnCoordinateX"):
        coordinates.read(tmp_path / "none.star")
